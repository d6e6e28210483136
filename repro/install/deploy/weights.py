"""A model directory's weight files against the pins pack recorded.

Cheap, on every unpack: each pinned file's size, and for a .safetensors file its
header (one small read: tensor count, dtypes, data length, the header's sha256), so a
truncated shard or one of another revision is `different` at once. With `hashes`
(`repro unpack --verify-weights`, `repro verify --weights`) the sha256 of every pinned
file too, read in parallel at disk speed (`repro.hashing.hash_files`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from repro.bundle.info import ModelRef
from repro.bundle.manifest import ProgressSink
from repro.bundle.weights import SafetensorsFacts, WeightPin
from repro.errors import SafetensorsHeaderError
from repro.hashing import hash_files
from repro.safetensors_header import read_header


def pins_of(ref: ModelRef) -> tuple[WeightPin, ...]:
    """The model's pins; a bundle from before pins has its large files' sizes only."""
    if ref.weights:
        return ref.weights
    return tuple(
        WeightPin(path, size, None, "not-hashed") for path, size in sorted(ref.large_files.items())
    )


def check_weights(
    ref: ModelRef,
    directory: Path,
    *,
    hashes: bool,
    jobs: int | None = None,
    progress: ProgressSink | None = None,
) -> list[str]:
    """How the weight files in `directory` differ from `ref`'s pins, one line per file
    ("model-00001-of-00002.safetensors: 1000 bytes, 2000 pinned"); empty when they match.
    Sizes and safetensors headers always; with `hashes`, the sha256 of each pin that has
    one (`progress` hears the bytes)."""
    out: list[str] = []
    to_hash: list[tuple[Path, WeightPin]] = []
    for pin in pins_of(ref):
        path = directory / pin.path
        try:
            info = os.stat(path)
        except OSError:
            out.append(f"{pin.path}: missing")
            continue
        if not stat.S_ISREG(info.st_mode):
            out.append(f"{pin.path}: not a regular file")
            continue
        if info.st_size != pin.size:
            out.append(f"{pin.path}: {info.st_size} bytes, {pin.size} pinned")
            continue
        if pin.safetensors is not None:
            try:
                header = read_header(path)
            except SafetensorsHeaderError as exc:
                out.append(f"{pin.path}: {exc.message.removeprefix(f'{path}: ')}")
                continue
            found = SafetensorsFacts(
                header.tensor_count, header.dtypes, header.data_length, header.header_sha256
            )
            differences = pin.safetensors.differences(found)
            if differences:
                out.append(f"{pin.path}: " + "; ".join(differences))
                continue
        if hashes and pin.sha256 is not None:
            to_hash.append((path, pin))
    if to_hash:
        if progress is not None:
            progress.start(sum(pin.size for _, pin in to_hash), len(to_hash))
        results = hash_files(
            [path for path, _ in to_hash],
            jobs=jobs,
            on_progress=progress.advance if progress is not None else None,
            sizes=[pin.size for _, pin in to_hash],
        )
        for (_, pin), result in zip(to_hash, results, strict=True):
            if result.digest is None:
                out.append(f"{pin.path}: cannot be read: {result.error}")
            elif result.digest != pin.sha256:
                out.append(
                    f"{pin.path}: sha256 {result.digest}, {pin.sha256} pinned "
                    f"({'from its hub blob name' if pin.source == 'hf-blob' else 'hashed'})"
                )
    return sorted(out)


def pinned_summary(ref: ModelRef, *, hashes: bool) -> str:
    """What a match of `check_weights` vouched for, in words."""
    pins = pins_of(ref)
    if not pins:
        return ""
    hashed = sum(1 for pin in pins if pin.sha256 is not None)
    if hashes and hashed:
        return f"{len(pins)} weight file(s) match (sha256 of {hashed})"
    checked = "size and header" if any(p.safetensors for p in pins) else "size"
    return f"{len(pins)} weight file(s) match by {checked}"
