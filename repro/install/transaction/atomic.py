"""Atomic file replacement and an exclusive lock on a directory."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from repro.errors import LockedError

# The temporary file of an atomic write: `.NAME.RANDOM.repro-tmp` beside NAME.
TEMP_SUFFIX = ".repro-tmp"


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write `data` to `path` so that a reader (or a crash) sees old or new, never half.

    A temporary file in the same directory is written, fsynced and renamed over
    the target; then the directory is fsynced so the rename itself is durable.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    fsync_directory(path.parent)


def write_if_changed(path: Path, data: bytes, *, mode: int = 0o644) -> bool:
    """`atomic_write`, unless `path` is already a regular file (not a link) that holds
    `data` with `mode`: then it is left as it is, same inode and mtime, so that a rerun
    or an upgrade in place rewrites only what differs. True when it wrote."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        fd = -1  # absent, a link, unreadable: written
    if fd >= 0:
        with os.fdopen(fd, "rb") as stream:
            info = os.fstat(stream.fileno())
            same = (
                stat.S_ISREG(info.st_mode)
                and stat.S_IMODE(info.st_mode) == mode
                and info.st_size == len(data)
                and stream.read(len(data) + 1) == data
            )
        if same:
            return False
    atomic_write(path, data, mode=mode)
    return True


def remove_temp_leftovers(root: Path) -> list[Path]:
    """Remove the temporary files of atomic writes that a kill cut short anywhere under
    `root` (symbolic links are not followed); returns them. Only a SIGKILL (or a power
    cut) leaves one: every other exit removes its own."""
    removed = []
    for directory, _dirs, files in os.walk(root):
        for name in files:
            if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
                continue
            path = Path(directory) / name
            if path.is_file() and not path.is_symlink():
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                removed.append(path)
    return removed


def atomic_unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fsync_directory(path.parent)


@contextlib.contextmanager
def exclusive_lock(lock_path: Path, *, what: str, wait: bool = False) -> Iterator[None]:
    """Hold an flock on `lock_path`; refuse (or wait) if another process holds it."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    # never through a link: one planted at the lock's name would have repro truncate
    # and write the file it points to
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise LockedError(
            f"{lock_path}: a symbolic link stands at the lock's name; refusing to open it",
            hint="remove it (repro never makes one), then run the command again",
        ) from exc
    try:
        flags = fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB
        try:
            fcntl.flock(fd, flags)
        except BlockingIOError as exc:
            raise LockedError(
                f"{lock_path}: another repro process is {what} here",
                hint="wait for it to finish, then run the command again",
            ) from exc
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)
