"""The one rule for where a model is (repro.install.deploy.models.locate_model), on real
directories: a model only at its recorded path, only under --models, only in a real
Hugging Face cache (blobs/, snapshots/<rev>/ linking into them, refs/main), nowhere;
and the units rendered at the place where it was found."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from repro.bundle.info import ModelRef
from repro.install.deploy.models import locate_model, model_placements
from repro.install.deploy.services import render_units

CONFIG = json.dumps({"model_type": "llama", "num_hidden_layers": 1}).encode()
DIGEST = hashlib.sha256(CONFIG).hexdigest()
REVISION = "0123456789abcdef0123456789abcdef01234567"


def _model_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_bytes(CONFIG)
    return path


def _ref(local_path: str | None, **changes: object) -> ModelRef:
    base: dict[str, object] = {
        "name": "tiny",
        "role": "target",
        "total_bytes": len(CONFIG),
        "file_count": 1,
        "local_path": local_path,
        "small_files": {"config.json": DIGEST},
    }
    base.update(changes)
    return ModelRef(**base)  # type: ignore[arg-type]


def _hf_cache(root: Path, repo_id: str, revision: str) -> Path:
    """A Hugging Face hub cache as the hub library lays it out."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True)
    blob = repo / "blobs" / DIGEST
    blob.write_bytes(CONFIG)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(f"../../blobs/{DIGEST}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot


@pytest.fixture(autouse=True)
def _no_real_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_only_at_its_recorded_path(tmp_path: Path) -> None:
    model = _model_dir(tmp_path / "elsewhere" / "tiny")
    target = tmp_path / "target"
    check = locate_model(_ref(str(model)), None, target)
    assert (check.status, check.path, check.found) == ("found", str(model), True)


def test_only_under_models(tmp_path: Path) -> None:
    models = tmp_path / "weights"
    model = _model_dir(models / "tiny")
    check = locate_model(_ref("/gone/tiny"), models, tmp_path / "target")
    assert (check.status, check.path) == ("found", str(model))


def test_only_in_the_hugging_face_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "hub"
    snapshot = _hf_cache(cache, "org/tiny", REVISION)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    by_revision = _ref("/gone/tiny", repo_id="org/tiny", revision=REVISION)
    assert locate_model(by_revision, None, tmp_path / "t").path == str(snapshot)
    # no revision recorded: the one refs/main names
    by_main = _ref("/gone/tiny", repo_id="org/tiny")
    assert locate_model(by_main, None, tmp_path / "t").path == str(snapshot)
    # another revision recorded: not that snapshot
    other = _ref("/gone/tiny", repo_id="org/tiny", revision="f" * 40)
    assert locate_model(other, None, tmp_path / "t").status == "missing"
    # HF_HOME/hub is looked at too
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert locate_model(by_revision, None, tmp_path / "t").path == str(snapshot)


def test_under_target_models(tmp_path: Path) -> None:
    target = tmp_path / "target"
    model = _model_dir(target / "models" / "tiny")
    assert locate_model(_ref("/gone/tiny"), None, target).path == str(model)


def test_nowhere_says_where_to_put_it_and_how_to_fetch_it(tmp_path: Path) -> None:
    target = tmp_path / "target"
    ref = _ref("/gone/tiny", repo_id="org/tiny", revision=REVISION)
    check = locate_model(ref, None, target)
    dest = target / "models" / "tiny"
    assert (check.status, check.path, check.found) == ("missing", str(dest), False)
    assert check.fetch == f"hf download org/tiny --revision {REVISION} --local-dir {dest}"
    assert f"put it at {dest}" in check.detail and check.fetch in check.detail
    with_models = locate_model(ref, tmp_path / "w", target)
    assert with_models.path == str(tmp_path / "w" / "tiny")
    unknown = locate_model(_ref("/gone/tiny"), None, target)
    assert unknown.fetch is None and "identity is unknown" in unknown.detail


def test_a_model_absent_at_pack_time_is_found_by_its_directory(tmp_path: Path) -> None:
    ref = _ref("/gone/big", name="big", small_files={}, present=False, total_bytes=0)
    assert locate_model(ref, None, tmp_path / "t").status == "missing"
    model = _model_dir(tmp_path / "w" / "big")
    check = locate_model(ref, tmp_path / "w", tmp_path / "t")
    assert (check.status, check.path, check.present_when_packed) == ("found", str(model), False)


def test_the_rendered_unit_names_the_place_where_the_model_was_found(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "services").mkdir(parents=True)
    (bundle / "services" / "llm.service").write_text(
        "[Service]\nExecStart=${REPRO_VENV}/bin/vllm serve ${REPRO_MODELS}/tiny --port 8000 "
        "--tokenizer ${REPRO_MODELS}/tiny-tok\nEnvironment=MODEL=${REPRO_MODELS}/tiny\n"
    )
    found = _model_dir(tmp_path / "with space" / "tiny")
    refs = [_ref(str(found)), _ref("/gone/tiny-tok", name="tiny-tok")]
    target = tmp_path / "target"
    checks = [locate_model(ref, None, target) for ref in refs]
    placed = model_placements(refs, checks)
    assert placed == {"${REPRO_MODELS}/tiny": str(found)}
    (unit,) = render_units(
        bundle, target, venv=target / "venv", home=target, models=target / "models", placed=placed
    )
    text = unit.path.read_text()
    # found: its place, quoted for the space; missing: ${REPRO_MODELS}/<name>
    assert f'serve "{found}" --port' in text
    assert f"--tokenizer {target}/models/tiny-tok" in text
    assert f'Environment=MODEL="{found}"' in text
