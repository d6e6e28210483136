"""Staging directories beside the target, each owned by the live run that locks it.

`repro unpack ARCHIVE` extracts the bundle into `.repro-unpack-PID-RANDOM` in the
target's parent directory (the extractor itself works in
`..repro-unpack-PID-RANDOM.staging-RANDOM` beside it), and a kill leaves them there.
The run owns them through an flock on `.repro-unpack-PID-RANDOM.lock`, taken before
they exist and let go after they are gone (or moved into the target). The next run
removes the staging directories whose lock it can take: their owner is dead. The
kernel lets go of an flock when its holder dies, whatever PID namespace the holder
ran in, and on a network filesystem with working flock (NFSv4, CIFS) whichever host
it ran on; a PID proves nothing there. The PID in the name is for people only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from repro.errors import UsageError

STAGING_PREFIX = ".repro-unpack-"
LOCK_SUFFIX = ".lock"
_NAME = re.compile(rf"{re.escape(STAGING_PREFIX)}[0-9]+-[0-9a-f]+")
_EXTRACTOR = ".staging-"
# beside the extractor's: the venv unpacked while a bundle streams in (streaminstall)
STAGED_VENV = f"{_EXTRACTOR}venv"


@contextlib.contextmanager
def staging_dir(parent: Path) -> Iterator[Path]:
    """A new staging directory's path in `parent`, owned by this run while the block
    runs: not created here (the extractor makes it), removed afterwards unless the
    block moved it away. Stale staging directories of dead runs are removed first."""
    remove_stale_staging(parent)
    fd, dest = _new_lock(parent)
    try:
        yield dest
    finally:
        _remove_staging(parent, dest.name)
        with contextlib.suppress(FileNotFoundError):
            (parent / f"{dest.name}{LOCK_SUFFIX}").unlink()
        os.close(fd)


def create_staging_dir(path: Path) -> None:
    """Make `path`, a staging directory of this run, here and now: exclusively (mode
    0700), never finding one. The names are beside a lock file another local user can
    read in a group-writable parent: whatever stands at the name already (a link to that
    user's directory, say) was planted, and the run ends without writing through it."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError as exc:
        raise UsageError(
            f"{path}: refusing to stage there: {_what(path)} already exists at the name of "
            "this run's staging directory, which repro creates itself; another user of "
            f"{path.parent} may have planted it",
            hint="remove it, and unpack into a --target whose parent only you can write",
        ) from exc
    except OSError as exc:
        raise UsageError(
            f"cannot create the staging directory {path}: {exc.strerror}",
            hint="unpack into a --target whose parent directory is writable",
        ) from exc


def _what(path: Path) -> str:
    if path.is_symlink():
        return f"a symbolic link (to {os.readlink(path)})"
    return "a directory" if path.is_dir() else "a file"


def moved_away(dest: Path) -> None:
    """The staging directory `dest` was moved elsewhere (into the target): its lock file
    has nothing left to guard, and goes now, so that a kill from here on leaves nothing
    beside the target. The lock itself is let go when the block ends."""
    with contextlib.suppress(FileNotFoundError):
        dest.with_name(f"{dest.name}{LOCK_SUFFIX}").unlink()


def remove_stale_staging(parent: Path) -> list[str]:
    """Remove the staging directories (and lock files) in `parent` whose lock no live
    run holds; returns their names. Those of live runs stay, on any host."""
    names = set()
    with contextlib.suppress(OSError):
        for path in parent.iterdir():
            name = path.name.removesuffix(LOCK_SUFFIX)
            if name.startswith(f".{STAGING_PREFIX}") and _EXTRACTOR in name:
                name = name[1:].partition(_EXTRACTOR)[0]
            if _NAME.fullmatch(name):
                names.add(name)
    return [name for name in sorted(names) if _remove_if_stale(parent, name)]


def _new_lock(parent: Path) -> tuple[int, Path]:
    """Create and lock a lock file of a name no run used; (its fd, the staging path)."""
    while True:
        name = f"{STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        lock = parent / f"{name}{LOCK_SUFFIX}"
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
        except OSError as exc:
            raise UsageError(
                f"cannot create a staging directory in {parent}: {exc.strerror}",
                hint="unpack into a --target whose parent directory is writable",
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _is_linked(fd, lock):
                return fd, parent / name
        except BlockingIOError:
            pass
        # Another run's cleanup took it between open and flock, for a dead run's lock,
        # and removed it: start again under a new name.
        os.close(fd)


def _is_linked(fd: int, path: Path) -> bool:
    """Whether `path` still names the file open as `fd` (not removed or replaced)."""
    try:
        on_disk = path.lstat()
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)


def _remove_if_stale(parent: Path, name: str) -> bool:
    lock = parent / f"{name}{LOCK_SUFFIX}"
    try:
        # Created when missing (a kill between the removal of the directories and of
        # the lock leaves none): then no run holds it, and taking it proves so.
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live run holds it
        if not _is_linked(fd, lock):
            return False  # removed by another cleanup meanwhile
        _remove_staging(parent, name)
        lock.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)


def _remove_staging(parent: Path, name: str) -> None:
    for path in [parent / name, *parent.glob(f".{name}{_EXTRACTOR}*")]:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
