"""Laying the workspace out under the target: where each carried file goes, and what is
refused (links out of the target, repro's own state, the venv's place, files in the way);
what pack reports as left out; how a model's place is recorded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from repro.bundle.info import BundleInfo, ModelRef, SourceInfo, WorkspaceInfo
from repro.errors import PatchConflictError, UsageError
from repro.install.deploy.restore import path_values, plan_restore, restore_workspace, venv_dir
from repro.snapshot.workspace.leftout import (
    MAX_CARRIED_FILE,
    split_by_size,
    uncovered_entries,
    weights_left_out,
)
from repro.snapshot.workspace.models import describe_model, recorded_path


def info(venv: str = "venv", models: tuple[ModelRef, ...] = ()) -> BundleInfo:
    return BundleInfo(
        name="b",
        version="1",
        created="2026-01-01T00:00:00Z",
        tool_version="0",
        source=SourceInfo("3.12.1", "CPython", "linux", "2.36"),
        models=models,
        workspace=WorkspaceInfo(venv=venv),
    )


def drafter(local_path: str) -> ModelRef:
    return ModelRef("drafter", "drafter", 10, 2, local_path=local_path)


def bundle(tmp_path: Path) -> Path:
    root = tmp_path / "bundle"
    for rel, data in {
        "files/bench/run.sh": b"#!/bin/sh\n",
        "files/results/a.json": b"{}",
        "models/drafter/config.json": b'{"a": 1}',
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "files/bench/run.sh").chmod(0o755)
    return root


def test_plan_puts_files_and_workspace_models_at_their_workspace_place(tmp_path: Path) -> None:
    planned = plan_restore(bundle(tmp_path), info(models=(drafter("models/drafter"),)))
    assert [(p.member, p.rel, p.executable) for p in planned] == [
        ("files/bench/run.sh", "bench/run.sh", True),
        ("models/drafter/config.json", "models/drafter/config.json", False),
        ("files/results/a.json", "results/a.json", False),
    ]


def test_a_model_from_outside_the_workspace_is_not_restored(tmp_path: Path) -> None:
    planned = plan_restore(bundle(tmp_path), info(models=(drafter("/data/models/d"),)))
    assert [p.rel for p in planned] == ["bench/run.sh", "results/a.json"]


def test_files_inside_the_venv_place_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="inside the venv's place bench/"):
        plan_restore(bundle(tmp_path), info(venv="bench"))


def test_restore_writes_then_finds_everything_already_there(tmp_path: Path) -> None:
    source = bundle(tmp_path)
    planned = plan_restore(source, info())
    target = tmp_path / "t"
    target.mkdir()
    written, present = restore_workspace(source, target, planned)
    assert written == ["bench/run.sh", "results/a.json"] and present == []
    assert os.access(target / "bench/run.sh", os.X_OK)
    assert restore_workspace(source, target, planned) == ([], ["bench/run.sh", "results/a.json"])


def test_every_conflict_is_reported_and_nothing_written(tmp_path: Path) -> None:
    source = bundle(tmp_path)
    target = tmp_path / "t"
    (target / "results").mkdir(parents=True)
    (target / "results/a.json").write_text("mine")
    (target / "bench" / "run.sh").mkdir(parents=True)
    with pytest.raises(PatchConflictError) as caught:
        restore_workspace(source, target, plan_restore(source, info()))
    message = str(caught.value)
    assert "results/a.json: exists with sha256" in message
    assert "bench/run.sh: a directory is in the file's place" in message
    assert (target / "results/a.json").read_text() == "mine"
    forced = restore_workspace(
        source,
        target,
        [p for p in plan_restore(source, info()) if p.rel != "bench/run.sh"],
        force=True,
    )
    assert forced == (["results/a.json"], [])


def test_a_link_out_of_the_target_is_never_written_through(tmp_path: Path) -> None:
    source = bundle(tmp_path)
    target = tmp_path / "t"
    target.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (target / "results").symlink_to(outside)
    with pytest.raises(UsageError, match="outside the target"):
        restore_workspace(source, target, plan_restore(source, info()))
    assert list(outside.iterdir()) == []


def test_paths_of_the_variables(tmp_path: Path) -> None:
    assert venv_dir(tmp_path, info(".")) == tmp_path
    assert path_values(tmp_path, info(".venv"), None) == {
        "REPRO_VENV": str(tmp_path / ".venv"),
        "REPRO_HOME": str(tmp_path),
        "REPRO_MODELS": str(tmp_path / "models"),
    }
    assert path_values(tmp_path, info(), Path("/m"))["REPRO_MODELS"] == "/m"


def test_model_place_is_relative_to_the_workspace_never_to_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "drafter").mkdir(parents=True)
    (workspace / "drafter" / "config.json").write_text("{}")
    (workspace / "drafter" / "w.bin").write_bytes(b"\0" * ((1 << 20) + 1))
    outside = tmp_path / "models" / "big"
    outside.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert recorded_path(Path("ws/drafter"), workspace) == "drafter"
    assert recorded_path(outside, workspace) == str(outside)
    assert recorded_path(workspace, workspace) == "."
    ref = describe_model(Path("ws/drafter"), name="drafter", role="drafter", workspace=workspace)
    assert ref.local_path == "drafter"
    assert ref.large_files == (("w.bin", (1 << 20) + 1),)
    assert [item.path for item in weights_left_out([ref])] == ["drafter/"]


def test_left_out_names_oversized_files_and_entries_no_rule_takes(tmp_path: Path) -> None:
    big = tmp_path / "results" / "big.bin"
    big.parent.mkdir()
    with big.open("wb") as stream:
        stream.truncate(MAX_CARRIED_FILE + 1)  # sparse: no disk used
    small = tmp_path / "results" / "a.json"
    small.write_text("{}")
    kept, refused = split_by_size([big, small], tmp_path)
    assert kept == [small]
    assert [r.path for r in refused] == ["results/big.bin"]
    (tmp_path / "data").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / ".git").mkdir()
    (tmp_path / "repro.toml").write_text("")
    found = uncovered_entries(tmp_path, [small])
    assert [item.path for item in found] == ["data/", "notes.txt"]
    assert uncovered_entries(tmp_path, [tmp_path]) == []
