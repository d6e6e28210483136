"""Tests of repro.snapshot.workspace.leftout: what a pack leaves out, and why."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from repro.snapshot.workspace.leftout import (
    LEFT_OUT_KINDS,
    MAX_CARRIED_FILE,
    LeftOut,
    split_by_size,
    split_secrets,
    uncovered_entries,
    weights_left_out,
)
from repro.snapshot.workspace.models import ModelReference

HIDDEN_VALUE = "s3cr3t-value-" + "x" * 12


def _sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as stream:
        stream.truncate(size)  # no disk used
    return path


@pytest.mark.parametrize(
    ("size", "said"),
    [
        (MAX_CARRIED_FILE + 1, "64.0 MiB, over the 64 MiB limit"),
        (3 << 30, "3.00 GiB, over the 64 MiB limit"),
    ],
)
def test_an_oversized_file_is_left_out_with_its_size(tmp_path: Path, size: int, said: str) -> None:
    big = _sparse(tmp_path / "results" / "ckpt.bin", size)
    kept, refused = split_by_size([big], tmp_path)
    assert kept == []
    assert refused == [LeftOut("results/ckpt.bin", refused[0].reason, "size")]
    assert refused[0].reason.startswith(said)
    assert refused[0].describe() == f"results/ckpt.bin: {refused[0].reason}"


def test_a_file_at_the_limit_and_an_unreadable_one_are_kept(tmp_path: Path) -> None:
    edge = _sparse(tmp_path / "edge.bin", MAX_CARRIED_FILE)
    vanished = tmp_path / "vanished.json"  # the writer names it when it fails to read it
    assert split_by_size([edge, vanished], tmp_path) == ([edge, vanished], [])


def test_secrets_are_left_out_by_name_or_content_never_quoting_it(tmp_path: Path) -> None:
    named = tmp_path / "bench" / ".netrc"
    assigned = tmp_path / "bench" / "env.sh"
    known = tmp_path / "bench" / "notes.txt"
    plain = tmp_path / "bench" / "run.sh"
    named.parent.mkdir()
    named.write_text("machine example.com\n")
    assigned.write_text("export HF_TOKEN=another-value-0123456789\n")
    known.write_text(f"remember {HIDDEN_VALUE}\n")
    plain.write_text("python bench.py --tokenizer-path /models/t\n")
    kept, refused = split_secrets([named, assigned, known, plain], tmp_path, [HIDDEN_VALUE])
    assert kept == [plain]
    assert [(r.path, r.kind) for r in refused] == [
        ("bench/.netrc", "secret"),
        ("bench/env.sh", "secret"),
        ("bench/notes.txt", "secret"),
    ]
    assert refused[0].reason.startswith("looks like a credential (its name): never carried")
    assert refused[1].reason.startswith("looks like a credential (assigns HF_TOKEN)")
    assert "value of a secret environment variable" in refused[2].reason
    assert all(HIDDEN_VALUE not in r.describe() for r in refused)


def _model(name: str, local_path: str, large: tuple[tuple[str, int], ...]) -> ModelReference:
    return ModelReference(
        name=name,
        role="drafter",
        local_path=local_path,
        repo_id=None,
        revision=None,
        total_bytes=sum(s for _, s in large),
        file_count=len(large),
        small_files=(),
        copied=(),
        large_files=large,
    )


def test_weights_are_named_per_model_with_count_and_size() -> None:
    models = [
        _model("eagle", "drafter/", (("a.safetensors", 1 << 30), ("b.safetensors", 1 << 29))),
        _model("config-only", "other", ()),
        _model("tiny", "/models/tiny", (("w.bin", 5 << 20),)),
    ]
    out = weights_left_out(models)
    assert [(o.path, o.kind) for o in out] == [
        ("drafter/", "weights"),
        ("/models/tiny/", "weights"),
    ]
    assert out[0].reason.startswith("2 weight file(s) of model 'eagle' (1.50 GiB): referenced")
    assert out[1].reason.startswith("1 weight file(s) of model 'tiny' (5.0 MiB)")


def test_uncovered_entries_name_what_no_rule_takes(tmp_path: Path) -> None:
    for name in ("venv", "services", "data", "__pycache__", ".cache"):
        (tmp_path / name).mkdir()
    for name in ("notes.txt", "repro.toml", ".hidden"):
        (tmp_path / name).write_text("x")
    (tmp_path / "services" / "a.service").write_text("[Service]\n")
    covered = [tmp_path / "venv", tmp_path / "services" / "a.service", tmp_path / "elsewhere"]
    found = uncovered_entries(tmp_path, covered)
    assert [(o.path, o.kind) for o in found] == [
        ("data/", "unselected"),
        ("notes.txt", "unselected"),
    ]
    assert found[0].reason.startswith("a directory no rule selects")
    assert found[1].reason.startswith("a file no rule selects")
    assert all(o.kind in LEFT_OUT_KINDS for o in found)


def test_an_undecodable_entry_name_is_shown_escaped(tmp_path: Path) -> None:
    (tmp_path / os.fsdecode(b"odd\xffname")).write_text("x")
    (found,) = uncovered_entries(tmp_path, [])
    assert found.path == "odd\\xffname"


def test_a_relative_source_is_compared_as_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ws" / "venv").mkdir(parents=True)
    (tmp_path / "ws" / "extra").write_text("x")
    monkeypatch.chdir(tmp_path)
    found = uncovered_entries(Path("ws"), [tmp_path / "ws" / "venv"])
    assert [o.path for o in found] == ["extra"]
