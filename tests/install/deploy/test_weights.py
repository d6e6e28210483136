"""The models step's weight checks against what pack pinned, on real files: sizes and
safetensors headers always, sha256 with --verify-weights."""

from __future__ import annotations

import shutil
from pathlib import Path

from repro.bundle.info import ModelRef
from repro.install.deploy.models import locate_model
from repro.install.deploy.weights import check_weights
from repro.snapshot.workspace.models import describe_model
from tests.support.progress import Recorder
from tests.support.safetensors_files import hf_cache_model, shard

REV_A = "a" * 40
REV_B = "b" * 40
ELEMENTS = 300_000


def _ref(model_dir: Path) -> ModelRef:
    """What pack records of `model_dir`, as unpack reads it from bundle.toml."""
    found = describe_model(model_dir, name="m", role="target")
    return ModelRef(
        name=found.name,
        role="target",
        total_bytes=found.total_bytes,
        file_count=found.file_count,
        local_path=str(model_dir),
        small_files=dict(found.small_files),
        large_files=dict(found.large_files),
        weights=found.weights,
        weights_hashed=found.weights_hashed,
    )


def _model(root: Path, name: str = "model", seed: int = 0) -> Path:
    model = root / name
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}')
    for index in (1, 2):
        data = shard(ELEMENTS + index, seed=seed + index)
        (model / f"model-0000{index}-of-00002.safetensors").write_bytes(data)
    return model


def test_a_matching_copy_is_found_with_and_without_hashes(tmp_path: Path) -> None:
    model = _model(tmp_path)
    ref = _ref(model)
    copy = tmp_path / "copy"
    shutil.copytree(model, copy)
    assert check_weights(ref, copy, hashes=False) == []
    progress = Recorder()
    assert check_weights(ref, copy, hashes=True, jobs=2, progress=progress) == []
    total = sum(ref.large_files.values())
    assert progress.started == [(total, 2)] and sum(progress.advanced) == total
    check = locate_model(ref, None, verify_weights=True)
    assert check.status == "found"
    assert "2 weight file(s) match (sha256 of 2)" in check.detail


def test_one_byte_flipped_at_equal_size_is_caught_by_the_hash_only(tmp_path: Path) -> None:
    model = _model(tmp_path)
    ref = _ref(model)
    shard_path = model / "model-00002-of-00002.safetensors"
    data = bytearray(shard_path.read_bytes())
    data[-100] ^= 0x01  # in the tensors' data: header and size unchanged
    shard_path.write_bytes(bytes(data))
    assert check_weights(ref, model, hashes=False) == []
    assert locate_model(ref, None).status == "found"
    [line] = check_weights(ref, model, hashes=True)
    assert line.startswith("model-00002-of-00002.safetensors: sha256 ")
    check = locate_model(ref, None, verify_weights=True)
    assert check.status == "different"
    assert "model-00002-of-00002.safetensors: sha256" in check.detail


def test_a_truncated_shard_is_caught_always(tmp_path: Path) -> None:
    model = _model(tmp_path)
    ref = _ref(model)
    shard_path = model / "model-00001-of-00002.safetensors"
    size = shard_path.stat().st_size
    with open(shard_path, "r+b") as stream:
        stream.truncate(size - 4096)
    [line] = check_weights(ref, model, hashes=False)
    assert line == f"model-00001-of-00002.safetensors: {size - 4096} bytes, {size} pinned"
    check = locate_model(ref, None)
    assert check.status == "different" and "model-00001-of-00002.safetensors" in check.detail


def test_a_shard_of_another_revision_is_caught_by_its_header(tmp_path: Path) -> None:
    """Same name and size, other tensors: the header differs, no hash needed."""
    a = hf_cache_model(
        tmp_path / "hub", "org/m", REV_A, {"model.safetensors": shard(ELEMENTS, seed=1)}
    )
    other = shard(ELEMENTS, seed=2).replace(b"model.head.weight", b"model.norm.weight")
    b = hf_cache_model(tmp_path / "hub", "org/m", REV_B, {"model.safetensors": other})
    ref = _ref(a)
    assert ref.weights[0].source == "hf-blob"
    (a / "model.safetensors").unlink()
    (a / "model.safetensors").symlink_to((b / "model.safetensors").resolve())
    [line] = check_weights(ref, a, hashes=False)
    assert line == "model.safetensors: the header differs (tensor names, shapes or offsets)"


def test_a_shard_with_other_dtypes_is_named_by_what_differs(tmp_path: Path) -> None:
    model = _model(tmp_path)
    ref = _ref(model)
    shard_path = model / "model-00001-of-00002.safetensors"
    size = shard_path.stat().st_size
    # the same size in BF16: twice the elements
    data = shard(2 * (ELEMENTS + 1), seed=5, dtype="BF16")
    assert len(data) == size
    shard_path.write_bytes(data)
    [line] = check_weights(ref, model, hashes=False)
    assert "dtypes BF16, F32 pinned" in line


def test_a_hub_blob_unlike_its_name_is_caught_by_the_hash(tmp_path: Path) -> None:
    """Pinned by the blob's name at pack (never read): --verify-weights reads it."""
    data = shard(ELEMENTS, seed=1)
    snapshot = hf_cache_model(tmp_path / "hub", "org/m", REV_A, {"model.safetensors": data})
    blob = (snapshot / "model.safetensors").resolve()
    changed = bytearray(data)
    changed[-1] ^= 0xFF
    blob.write_bytes(bytes(changed))
    ref = _ref(snapshot)
    assert check_weights(ref, snapshot, hashes=False) == []
    [line] = check_weights(ref, snapshot, hashes=True)
    assert line.endswith("pinned (from its hub blob name)")


def test_a_bundle_without_pins_checks_sizes(tmp_path: Path) -> None:
    model = _model(tmp_path)
    ref = _ref(model)
    older = ModelRef(
        name="m",
        role="target",
        total_bytes=ref.total_bytes,
        file_count=ref.file_count,
        large_files=ref.large_files,
    )
    assert check_weights(older, model, hashes=True) == []
    with open(model / "model-00001-of-00002.safetensors", "ab") as stream:
        stream.write(b"\0")
    [line] = check_weights(older, model, hashes=True)
    assert "bytes" in line and "pinned" in line


def test_an_absent_weight_file_is_missing_not_different(tmp_path: Path) -> None:
    model = _model(tmp_path)
    ref = _ref(model)
    (model / "model-00001-of-00002.safetensors").unlink()
    check = locate_model(ref, None)
    assert check.status == "missing"
