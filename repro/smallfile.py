"""The sha256 of a small file that a bundle names, read without trusting the name.

A model's small files are named by bundle.toml (a path under the model's directory,
which may be an absolute `local_path` such as `/`): `proc/self/pagemap` under `/` is a
"regular" file of 0 bytes that yields gigabytes, a FIFO blocks the reader forever, and
a link may lead anywhere. So the path is resolved and must stay inside the directories
it may live in, the file is opened without following a last link and without blocking,
must be a regular file by `fstat`, and is read up to its own size and a fixed cap.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from repro.errors import SmallFileRefused

_CHUNK = 1 << 16


def small_file_sha256(path: Path, *, within: Sequence[Path], limit: int) -> str:
    """sha256 of `path`, a regular file of at most `limit` bytes whose real path lies
    under one of `within` (each resolved by the caller's rules, e.g. the model directory
    and the Hugging Face repository its snapshot links into)."""
    real = Path(os.path.realpath(path))
    homes = [Path(os.path.realpath(home)) for home in within]
    if not any(real.is_relative_to(home) for home in homes):
        raise SmallFileRefused(f"{path}: leads to {real}, outside {homes[0]}: not read")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        raise SmallFileRefused(f"{path}: cannot open: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SmallFileRefused(f"{path}: not a regular file: not read")
        if info.st_size > limit:
            raise SmallFileRefused(f"{path}: {info.st_size} bytes, over {limit}: not read")
        return _read_bounded(fd, path, info.st_size)
    finally:
        os.close(fd)


def _read_bounded(fd: int, path: Path, size: int) -> str:
    """Read at most `size` bytes (and one more, to see whether there are more): a file
    of /proc or /sys says 0 bytes and then streams, and is no small file of a model."""
    digest = hashlib.sha256()
    left = size + 1
    while left > 0:
        try:
            chunk = os.read(fd, min(_CHUNK, left))
        except OSError as exc:
            raise SmallFileRefused(f"{path}: cannot read: {exc.strerror or exc}") from exc
        if not chunk:
            return digest.hexdigest()
        left -= len(chunk)
        digest.update(chunk)
    raise SmallFileRefused(f"{path}: yields more bytes than its size ({size}): not read")
