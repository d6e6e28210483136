"""A model's weight files pinned: size, sha256 and, for .safetensors, the header's facts.

The sha256 is free where the model came from the Hugging Face hub: the cache names each
LFS file by it (`models--org--name/blobs/<sha256>`, linked from `snapshots/<rev>/`), so
such a file is pinned by its name and never read. Any other weight file is read, in
parallel (`repro.hashing.HashPipeline`), once: its digest is kept in a cache of its own
beside the scan's (`repro.snapshot.scan.cache.ScanCache` under `CACHE/weights`, one file
per model directory, trusted while the file keeps its device, inode, size, mtime and
ctime), so a 600 GB model is read on the first pack and not on the next. With
`--no-hash-weights` nothing is read but the safetensors headers (sizes and header facts
are still pinned; the model says weights_hashed = false).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.bundle.weights import SafetensorsFacts, WeightPin
from repro.errors import InputError, SafetensorsHeaderError
from repro.hashing import HashPipeline, HashResult
from repro.safetensors_header import is_safetensors, read_header
from repro.snapshot.scan.cache import RACY_NS, ScanCache

CACHE_SUBDIR = "weights"
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class WeightHashing:
    """How pack pins weights: hash them (`enabled`), with the cache under `cache_dir`
    (None: no cache), not trusting it (`rehash`), `jobs` threads, `say` for progress."""

    enabled: bool = True
    cache_dir: Path | None = None
    rehash: bool = False
    jobs: int | None = None
    say: Callable[[str], None] | None = None
    racy_ns: int = RACY_NS  # the cache's racy window (tests set 0)


@dataclass(frozen=True)
class PinnedWeights:
    pins: tuple[WeightPin, ...]
    hashed: bool  # every pin has a sha256 (False: --no-hash-weights)
    read_bytes: int  # bytes this pack read to hash (not the cache's, not the blobs')
    cache_hits: int
    refused: tuple[tuple[str, str], ...]  # (path, why): a .safetensors whose header is bad


def blob_sha256(path: Path) -> str | None:
    """The sha256 a Hugging Face cache blob is named by, when `path` is such a blob or a
    link to one (`models--*/blobs/<64 hex>`); None otherwise. Nothing is read."""
    real = os.path.realpath(path)
    blobs, name = os.path.split(real)
    repo, folder = os.path.split(blobs)
    if folder != "blobs" or not os.path.basename(repo).startswith("models--"):
        return None
    return name if _SHA256.fullmatch(name) else None


def safetensors_facts(path: Path) -> SafetensorsFacts:
    header = read_header(path)
    return SafetensorsFacts(
        tensor_count=header.tensor_count,
        dtypes=header.dtypes,
        data_length=header.data_length,
        header_sha256=header.header_sha256,
    )


def pin_weights(
    model_dir: Path,
    files: Sequence[tuple[str, int]],
    *,
    name: str,
    hashing: WeightHashing,
) -> PinnedWeights:
    """Pin each (path in `model_dir`, size) of `files`; a file that cannot be read for
    its hash raises InputError naming it."""
    say = hashing.say or (lambda _: None)
    facts: dict[str, SafetensorsFacts] = {}
    refused: list[tuple[str, str]] = []
    blobs: dict[str, str] = {}
    to_hash: list[tuple[str, int]] = []
    for rel, size in files:
        path = model_dir / rel
        if is_safetensors(rel):
            try:
                facts[rel] = safetensors_facts(path)
            except SafetensorsHeaderError as exc:
                refused.append((rel, exc.message.removeprefix(f"{path}: ") + ": header not pinned"))
        digest = blob_sha256(path)
        if digest is not None:
            blobs[rel] = digest
        elif hashing.enabled:
            to_hash.append((rel, size))
    hashed, hits, read = _hash(model_dir, to_hash, name=name, hashing=hashing, say=say)
    pins = []
    for rel, size in files:
        if rel in blobs:
            sha, source = blobs[rel], "hf-blob"
        elif rel in hashed:
            sha, source = hashed[rel], "hashed"
        else:
            sha, source = None, "not-hashed"
        pins.append(WeightPin(rel, size, sha, source, facts.get(rel)))  # type: ignore[arg-type]
    return PinnedWeights(
        pins=tuple(sorted(pins, key=lambda p: p.path)),
        hashed=all(pin.sha256 is not None for pin in pins),
        read_bytes=read,
        cache_hits=hits,
        refused=tuple(refused),
    )


def _hash(
    model_dir: Path,
    files: Sequence[tuple[str, int]],
    *,
    name: str,
    hashing: WeightHashing,
    say: Callable[[str], None],
) -> tuple[dict[str, str], int, int]:
    """sha256 of each file (by its path in the model directory), cache hits, bytes read."""
    if not files:
        return {}, 0, 0
    root = os.path.realpath(model_dir)
    cache = (
        ScanCache(
            hashing.cache_dir / CACHE_SUBDIR,
            root,
            racy_ns=hashing.racy_ns,
            load=not hashing.rehash,
        )
        if hashing.cache_dir is not None
        else None
    )
    total = sum(size for _, size in files)
    say(
        f"model {name!r}: pinning {len(files)} weight file(s) ({total / 2**30:.2f} GiB)"
        + (f", {len(cache)} in the weights cache" if cache is not None and len(cache) else "")
    )
    sizes = {os.path.join(root, rel): (rel, size) for rel, size in files}
    results: dict[str, HashResult] = {}
    with HashPipeline(hashing.jobs) as pipeline:
        for path, (_, size) in sizes.items():
            known = cache.lookup(path, False) if cache is not None else None
            if known is not None:
                results[path] = known
            else:
                pipeline.submit(path, size)
        read_results = pipeline.finish()
    results.update(read_results)
    out: dict[str, str] = {}
    for path, (rel, _) in sizes.items():
        result = results[path]
        if result.digest is None:
            raise InputError(
                f"{model_dir / rel}: a weight file that cannot be read: {result.error}"
            )
        out[rel] = result.digest
    hits = len(results) - len(read_results)
    if cache is not None:
        cache.stage(results.values())
        cache.commit()
    if hits:
        say(f"model {name!r}: {hits} weight file(s) unchanged since the last pack, not read")
    return out, hits, sum(r.size for r in read_results.values())
