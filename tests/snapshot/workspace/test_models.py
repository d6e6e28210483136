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


# --- models a unit names that pack does not find, and their identity ----------------

SEED_CARD = """---
license: other
base_model: moonshotai/Kimi-K2.6
tags:
- eagle
---
# drafter
"""


def test_a_drafter_cards_base_model_names_the_absent_target(tmp_path: Path) -> None:
    from repro.snapshot.workspace.models import absent_model, card_base_models, infer_identities

    drafter = tmp_path / "models" / "drafter"
    drafter.mkdir(parents=True)
    (drafter / "README.md").write_text(SEED_CARD)
    (drafter / "config.json").write_text("{}")
    assert card_base_models(drafter) == ("moonshotai/Kimi-K2.6",)
    listed = tmp_path / "listed"
    listed.mkdir()
    (listed / "README.md").write_text("---\nbase_model:\n  - org/a\n  - 'org/b'\n---\n")
    assert card_base_models(listed) == ("org/a", "org/b")
    refs = [
        describe_model(drafter, name="drafter", role="drafter", workspace=tmp_path),
        absent_model("/models/Kimi-K2.6", name="Kimi-K2.6", role="target", workspace=tmp_path),
    ]
    _, target = infer_identities(refs)
    assert (target.present, target.local_path, target.repo_id) == (
        False,
        "/models/Kimi-K2.6",
        "moonshotai/Kimi-K2.6",
    )
    assert target.to_toml()["present"] is False
    assert target.identity_from == "the base_model: of drafter's model card"


def test_an_absent_path_in_the_hf_cache_layout_says_its_identity() -> None:
    from repro.snapshot.workspace.models import absent_model

    rev = "a" * 40
    ref = absent_model(
        f"/cache/hub/models--org--big/snapshots/{rev}", name=rev, role="target", workspace=None
    )
    assert (ref.repo_id, ref.revision, ref.present) == ("org/big", rev, False)


def test_a_repository_id_is_described_from_the_local_cache(tmp_path: Path) -> None:
    from repro.snapshot.workspace.models import hub_model

    rev = "b" * 40
    repo = tmp_path / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    data = b'{"model_type": "llama"}'
    digest = hashlib.sha256(data).hexdigest()
    (repo / "blobs" / digest).write_bytes(data)
    (repo / "snapshots" / rev).mkdir(parents=True)
    (repo / "snapshots" / rev / "config.json").symlink_to(f"../../blobs/{digest}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    found = hub_model("org/tiny", name="tiny", role="target", caches=[tmp_path])
    assert (found.present, found.repo_id, found.revision) == (True, "org/tiny", rev)
    assert dict(found.small_files) == {"config.json": digest}
    absent = hub_model("org/none", name="none", role="target", caches=[tmp_path])
    assert (absent.present, absent.repo_id, absent.local_path) == (False, "org/none", "")
