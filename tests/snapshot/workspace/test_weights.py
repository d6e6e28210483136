"""Weights pinned at pack: from a hub blob's name (no read), hashed with a cache, or
by size only with --no-hash-weights; safetensors files with their header's facts."""

from __future__ import annotations

import hashlib
from pathlib import Path

from repro.snapshot.workspace.models import describe_model
from repro.snapshot.workspace.weights import WeightHashing, blob_sha256, pin_weights
from tests.support.safetensors_files import hf_cache_model, shard, write_safetensors

REV = "0123456789abcdef0123456789abcdef01234567"
ELEMENTS = 300_000  # 1.2 MB of F32: over the small-file limit


def _local_model(root: Path, seed: int = 0) -> Path:
    model = root / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}')
    for index in (1, 2):
        (model / f"model-0000{index}-of-00002.safetensors").write_bytes(
            shard(ELEMENTS, seed=seed + index)
        )
    return model


def test_hub_blobs_are_pinned_by_their_name_without_a_read(tmp_path: Path) -> None:
    data = shard(ELEMENTS, seed=1)
    snapshot = hf_cache_model(
        tmp_path / "hub",
        "org/tiny",
        REV,
        {"model.safetensors": data, "config.json": b"{}", "extra.bin": b"x" * 2_000_000},
    )
    blob = (snapshot / "extra.bin").resolve()
    # the blob's content no longer matches its name: a pin by name never reads it
    blob.write_bytes(b"y" * 2_000_000)
    ref = describe_model(snapshot, name="tiny", role="target")
    pins = {pin.path: pin for pin in ref.weights}
    assert pins["extra.bin"].source == "hf-blob"
    assert pins["extra.bin"].sha256 == hashlib.sha256(b"x" * 2_000_000).hexdigest()
    assert pins["model.safetensors"].sha256 == hashlib.sha256(data).hexdigest()
    facts = pins["model.safetensors"].safetensors
    assert facts is not None
    assert (facts.tensor_count, facts.dtypes, facts.data_length) == (2, ("F32",), 4 * ELEMENTS)
    assert ref.weights_hashed
    assert (ref.repo_id, ref.revision) == ("org/tiny", REV)


def test_blob_names_are_checked(tmp_path: Path) -> None:
    blobs = tmp_path / "models--o--n" / "blobs"
    blobs.mkdir(parents=True)
    for name in ("a" * 64, "A" * 64, "a" * 40, "g" * 64):
        (blobs / name).write_bytes(b"")
    assert blob_sha256(blobs / ("a" * 64)) == "a" * 64
    assert [blob_sha256(blobs / n) for n in ("A" * 64, "a" * 40, "g" * 64)] == [None] * 3
    elsewhere = tmp_path / "blobs"
    elsewhere.mkdir()
    (elsewhere / ("a" * 64)).write_bytes(b"")
    assert blob_sha256(elsewhere / ("a" * 64)) is None  # not a models--*/blobs/ directory


def test_other_files_are_hashed_and_the_cache_spares_the_second_read(tmp_path: Path) -> None:
    model = _local_model(tmp_path)
    cache = tmp_path / "cache"
    said: list[str] = []
    hashing = WeightHashing(cache_dir=cache, racy_ns=0, jobs=2, say=said.append)
    files = [(p.name, p.stat().st_size) for p in sorted(model.glob("*.safetensors"))]
    first = pin_weights(model, files, name="m", hashing=hashing)
    assert [p.source for p in first.pins] == ["hashed", "hashed"]
    assert [p.sha256 for p in first.pins] == [
        hashlib.sha256((model / rel).read_bytes()).hexdigest() for rel, _ in files
    ]
    assert (first.cache_hits, first.read_bytes) == (0, sum(size for _, size in files))
    second = pin_weights(model, files, name="m", hashing=hashing)
    assert second.pins == first.pins
    assert (second.cache_hits, second.read_bytes) == (2, 0)  # no weight file read again
    assert any("2 weight file(s) unchanged since the last pack, not read" in s for s in said)
    # a file written since is read again; --rehash reads them all
    (model / files[0][0]).write_bytes(shard(ELEMENTS, seed=9))
    third = pin_weights(model, files, name="m", hashing=hashing)
    assert (third.cache_hits, third.read_bytes) == (1, files[0][1])
    assert third.pins[0].sha256 != first.pins[0].sha256
    rehash = WeightHashing(cache_dir=cache, racy_ns=0, rehash=True)
    assert pin_weights(model, files, name="m", hashing=rehash).cache_hits == 0


def test_no_hash_weights_pins_size_and_header_only(tmp_path: Path) -> None:
    model = _local_model(tmp_path)
    ref = describe_model(model, name="m", role="target", hashing=WeightHashing(enabled=False))
    assert not ref.weights_hashed
    assert [(p.source, p.sha256) for p in ref.weights] == [("not-hashed", None)] * 2
    assert all(p.safetensors is not None for p in ref.weights)
    assert dict(ref.large_files) == {p.path: p.size for p in ref.weights}


def test_a_broken_safetensors_file_is_pinned_and_named(tmp_path: Path) -> None:
    model = tmp_path / "model"
    write_safetensors(model / "ok.safetensors", {"w": ("F32", [ELEMENTS])})
    (model / "bad.safetensors").write_bytes(b"\xff" * 2_000_000)
    ref = describe_model(model, name="m", role="target")
    pins = {pin.path: pin for pin in ref.weights}
    assert pins["bad.safetensors"].safetensors is None
    assert pins["bad.safetensors"].sha256 is not None
    [warning] = ref.warnings()
    assert "bad.safetensors" in warning and "header not pinned" in warning
