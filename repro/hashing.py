"""Streaming and parallel SHA-256.

Files are read in fixed-size chunks, so memory does not grow with file size.
hashlib releases the GIL while it hashes a buffer larger than 2 KiB, so a
thread pool scales across cores for large files; for the tens of thousands of
small files of a venv, per-task overhead dominates, so small files are batched
into tasks of roughly equal byte counts.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

CHUNK_SIZE = 1 << 20
BATCH_BYTES = 32 << 20
BATCH_FILES = 256

ProgressCallback = Callable[[int], None]


@dataclass(frozen=True)
class HashResult:
    """The digest of one file, or why it could not be read."""

    path: Path
    digest: str | None
    size: int
    error: str | None = None
    crc32: int | None = None  # with `crc32=True`: what a stored ZIP member of it needs
    mtime_ns: int = 0
    mode: int = 0


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def sha256_stream(stream: BinaryIO, chunk_size: int = CHUNK_SIZE) -> tuple[str, int]:
    """Hash a binary stream to its end; return (hex digest, bytes read)."""
    digest = hashlib.sha256()
    size = 0
    buffer = bytearray(chunk_size)
    view = memoryview(buffer)
    while True:
        count = stream.readinto(view)  # type: ignore[attr-defined]
        if not count:
            break
        digest.update(view[:count])
        size += count
    return digest.hexdigest(), size


def sha256_file(path: Path, chunk_size: int = CHUNK_SIZE) -> str:
    with open(path, "rb", buffering=0) as stream:
        return sha256_stream(stream, chunk_size)[0]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hash_one(path: Path, crc: bool = False) -> HashResult:
    try:
        with open(path, "rb", buffering=0) as stream:
            info = os.fstat(stream.fileno())
            if info.st_size <= CHUNK_SIZE:
                # Most files of a venv are small: read each whole (to its end, even if
                # it grew) instead of zero-filling a chunk buffer per file.
                data = stream.readall()
                digest, size = hashlib.sha256(data).hexdigest(), len(data)
                checksum = zlib.crc32(data) if crc else None
            else:
                digest, size, checksum = _hash_stream_crc(stream, crc)
    except OSError as exc:
        return HashResult(path, None, 0, exc.strerror or str(exc))
    return HashResult(path, digest, size, None, checksum, info.st_mtime_ns, info.st_mode)


def _hash_stream_crc(stream: BinaryIO, crc: bool) -> tuple[str, int, int | None]:
    if not crc:
        digest, size = sha256_stream(stream)
        return digest, size, None
    sha = hashlib.sha256()
    checksum = 0
    size = 0
    buffer = bytearray(CHUNK_SIZE)
    view = memoryview(buffer)
    while True:
        count = stream.readinto(view)  # type: ignore[attr-defined]
        if not count:
            break
        sha.update(view[:count])
        checksum = zlib.crc32(view[:count], checksum)
        size += count
    return sha.hexdigest(), size, checksum


def file_digest(path: Path) -> HashResult:
    """sha256, CRC-32, size, mtime and mode of one file (error set when unreadable)."""
    return _hash_one(path, crc=True)


def _hash_batch(paths: Sequence[Path], crc: AbstractSet[Path] | bool) -> list[HashResult]:
    return [_hash_one(path, crc is True or (crc is not False and path in crc)) for path in paths]


def _batches(paths: Sequence[Path]) -> Iterator[list[Path]]:
    """Tasks for the pool: each large file alone, largest first, then small files batched
    in path order. Largest first: one large file started last would keep one thread
    hashing after the others ran out of work (a bundle's wheels, a venv's .so files)."""
    large: list[tuple[int, Path]] = []
    batch: list[Path] = []
    batch_bytes = 0
    small: list[list[Path]] = []
    for path in paths:
        try:
            size = path.stat().st_size
        except OSError:
            size = 0
        if size >= BATCH_BYTES:
            large.append((size, path))
            continue
        batch.append(path)
        batch_bytes += size
        if batch_bytes >= BATCH_BYTES or len(batch) >= BATCH_FILES:
            small.append(batch)
            batch, batch_bytes = [], 0
    if batch:
        small.append(batch)
    large.sort(key=lambda item: item[0], reverse=True)
    yield from ([path] for _, path in large)
    yield from small


def hash_files(
    paths: Sequence[Path],
    *,
    jobs: int | None = None,
    on_progress: ProgressCallback | None = None,
    crc32: AbstractSet[Path] | bool = False,
) -> list[HashResult]:
    """Hash many files in parallel; results come back in the order of `paths`.

    `on_progress` is called with the byte count of each finished file, from the
    calling thread. `crc32` (True, or the paths that need it) also computes each
    file's CRC-32 in the same read.
    """
    workers = jobs or default_jobs()
    results: dict[Path, HashResult] = {}
    if workers <= 1:
        for path in paths:
            result = _hash_one(path, crc32 is True or (crc32 is not False and path in crc32))
            results[path] = result
            if on_progress is not None:
                on_progress(result.size)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            tasks = pool.map(lambda batch: _hash_batch(batch, crc32), _batches(paths))
            for batch_results in tasks:
                for result in batch_results:
                    results[result.path] = result
                    if on_progress is not None:
                        on_progress(result.size)
    return [results[path] for path in paths]
