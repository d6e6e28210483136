from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from repro.errors import ConfigError
from repro.snapshot.workspace.files import select_files
from repro.snapshot.workspace.models import describe_model


def test_describe_model_from_hf_cache_layout(tmp_path: Path) -> None:
    snap = tmp_path / "hub/models--z-lab--Qwen3-8B-DFlash/snapshots/0123abcd4567ef"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (snap / "README.md").write_text("# drafter\n")
    weights = snap / "model.safetensors"
    weights.write_bytes(b"\0" * (2 << 20))
    ref = describe_model(snap, name="drafter", role="drafter")
    assert ref.repo_id == "z-lab/Qwen3-8B-DFlash"
    assert ref.revision == "0123abcd4567ef"
    assert ref.file_count == 3
    assert ref.total_bytes == sum(p.stat().st_size for p in snap.iterdir())
    small = dict(ref.small_files)
    assert "model.safetensors" not in small
    assert small["config.json"] == hashlib.sha256((snap / "config.json").read_bytes()).hexdigest()
    assert [name for name, _ in ref.copied] == ["config.json", "README.md"]


def test_describe_model_name_from_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"_name_or_path": "org/model"}))
    ref = describe_model(tmp_path, name="m", role="target")
    assert (ref.repo_id, ref.revision) == ("org/model", None)


def test_select_files_refuses_secrets_and_escapes(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench/run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "bench/results.json").write_text("{}")
    (tmp_path / "bench/.netrc").write_text("machine x password y")
    (tmp_path / "bench/hf_token").write_text("hf_x")
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv/lib.txt").write_text("no")
    selection = select_files(tmp_path, ["bench", "venv/*"], exclude=[tmp_path / "venv"])
    assert [f.bundle_path for f in selection.files] == [
        "files/bench/results.json",
        "files/bench/run.sh",
    ]
    assert {p.name for p in selection.refused_secrets} == {".netrc", "hf_token"}
    with pytest.raises(ConfigError, match="escapes"):
        select_files(tmp_path, ["../x"])
    with pytest.raises(ConfigError, match="matches nothing"):
        select_files(tmp_path, ["nothing*"])
