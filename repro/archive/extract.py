"""Extraction of a bundle archive into a staging directory, then into place.

Members come from `repro.archive.reader` already checked; they are written below a
fresh 0700 staging directory, every path component opened with O_NOFOLLOW relative to
its parent's fd and every file created with O_EXCL, and the staging directory is
renamed into place only once `verify` passed (docs/security.md, "extraction").
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, cast

from repro.archive.common import CHUNK, DIR_MODE, is_seekable
from repro.archive.membercopy import MemberCopier
from repro.archive.reader import ArchiveLimits, SafeMember, iter_members, iter_members_at
from repro.errors import ArchiveError, UsageError

if TYPE_CHECKING:
    from repro.bundle.manifest import ProgressSink

# (the top directory being extracted, a member's path below it, its sha256): told once
# the member's file is written and closed, while later members are still to come
OnWritten = Callable[[Path, str, str], None]


def _check_dest(dest: Path) -> None:
    try:
        info = dest.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"cannot use {dest} as destination: {exc.strerror}") from exc
    if not stat.S_ISDIR(info.st_mode) or any(dest.iterdir()):
        raise UsageError(
            f"destination {dest} already exists and is not an empty directory",
            hint="remove it or choose another destination",
        )


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class DirWalker:
    """Opens directories below a root fd, creating them (0755) where missing.

    Every component is opened with O_NOFOLLOW relative to its parent, so nothing
    outside the staging directory can be reached even if a link appeared in it.
    The fd of the last directory used is kept: members come sorted, so the next one
    is usually in the same directory.
    """

    def __init__(self, root_fd: int, where: Path | None = None) -> None:
        self._root_fd = root_fd
        self._where = where  # the root's path, for messages
        self._cached: tuple[tuple[str, ...], int] | None = None

    def open(self, parts: tuple[str, ...]) -> int:
        if self._cached is not None and self._cached[0] == parts:
            return self._cached[1]
        fd = os.dup(self._root_fd)
        try:
            for depth, part in enumerate(parts, 1):
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                    created = True
                except FileExistsError:
                    created = False
                try:
                    child = os.open(part, DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if created or exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    raise self._planted(parts[:depth]) from exc
                os.close(fd)
                fd = child
                if created:
                    os.fchmod(fd, DIR_MODE)
        except BaseException:
            os.close(fd)
            raise
        self.close()
        self._cached = (parts, fd)
        return fd

    def _planted(self, parts: tuple[str, ...]) -> UsageError:
        """Something this run did not make stands where it makes a directory: a link
        another user planted, say. Never followed; the run ends naming it."""
        rel = "/".join(parts)
        path = self._where / rel if self._where is not None else Path(rel)
        return UsageError(
            f"{path}: a link or a file stands where repro makes a directory in this run's "
            "staging; refusing to write through it",
            hint="someone else wrote into the staging directory: unpack into a --target "
            "whose parent only you can write",
        )

    def close(self) -> None:
        if self._cached is not None:
            os.close(self._cached[1])
            self._cached = None


def _create_member(walker: DirWalker, member: SafeMember) -> int:
    """A new file for `member` (O_EXCL, no links followed), with its mode; its fd."""
    parts = (member.top, *member.name.split("/"))
    parent_fd = walker.open(parts[:-1])
    fd = os.open(parts[-1], NEW_FILE_FLAGS, 0o600, dir_fd=parent_fd)
    try:
        os.fchmod(fd, member.mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_member(walker: DirWalker, member: SafeMember, data: BinaryIO) -> str:
    """Write a member's data read through Python (a pipe or a compressed archive),
    hashing it as it passes; return its sha256."""
    digest = hashlib.sha256()
    with os.fdopen(_create_member(walker, member), "wb", buffering=0) as out:
        while chunk := data.read(CHUNK):
            digest.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[out.write(view) or 0 :]
    return digest.hexdigest()


def _fileno(stream: BinaryIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _extract_into(
    stream: BinaryIO,
    staging: Path,
    source: str,
    limits: ArchiveLimits,
    digests: dict[str, str],
    progress: ProgressSink | None = None,
    on_written: OnWritten | None = None,
) -> Path:
    advance = progress.advance if progress is not None else None
    root_fd = os.open(staging, DIR_FLAGS)
    walker = DirWalker(root_fd, staging)
    top: str | None = None
    source_fd = _fileno(stream)
    try:
        with contextlib.ExitStack() as stack:
            copier: MemberCopier | None = None
            for member, data, position in iter_members_at(stream, source=source, limits=limits):
                top = member.top
                if data is None:
                    walker.open((member.top, *member.name.split("/")))
                elif source_fd is not None and position is not None:
                    # an uncompressed archive file: members copied at their offsets
                    if copier is None:
                        copier = stack.enter_context(
                            MemberCopier(source_fd, source, on_copied=advance)
                        )
                    out = _create_member(walker, member)
                    copier.submit(member.name, out, position, member.size)
                else:
                    digests[member.name] = _write_member(walker, member, data)
                    if advance is not None:
                        advance(member.size)
                    if on_written is not None:
                        on_written(staging / member.top, member.name, digests[member.name])
            if copier is not None:
                digests.update(copier.finish())
        if top is None:  # only the top directory itself
            raise ArchiveError(f"{source}: the archive holds no files")
        walker.open((top,))
    except OSError as exc:
        raise ArchiveError(f"cannot extract {source} into {staging}: {exc}") from exc
    finally:
        walker.close()
        os.close(root_fd)
    return staging / top


def extract_archive(
    source: Path | BinaryIO,
    dest: Path,
    *,
    source_name: str,
    limits: ArchiveLimits | None = None,
    verify: Callable[[Path], None] | None = None,
    digests: dict[str, str] | None = None,
    progress: ProgressSink | None = None,
    on_written: OnWritten | None = None,
) -> Path:
    """Extract the archive's top-level directory as `dest`; return `dest`.

    Everything is extracted into a staging directory beside `dest` and checked by
    `verify` there (with `digests` given, filled first with the sha256 of every file
    written, by its path below the top directory, taken from the bytes as they were
    written); only then is it renamed into place. On any failure the staging
    directory is removed and `dest` is left as it was. A seekable archive is scanned
    completely before anything is written.

    `progress` is told the files and bytes to come (`start`: 0 and 0 for a stream,
    whose size is not known ahead) and each file's size once it is written (`advance`).
    `on_written` hears of each file of a stream (not of an uncompressed archive file,
    whose members are copied out of order) once it is written and hashed.
    """
    limits = limits or ArchiveLimits()
    _check_dest(dest)
    if isinstance(source, Path):
        try:
            stream = open(source, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise ArchiveError(f"cannot open {source}: {exc.strerror}") from exc
        with stream:
            return _extract(
                cast(BinaryIO, stream),
                dest,
                source_name,
                limits,
                verify,
                digests,
                progress,
                on_written,
            )
    return _extract(source, dest, source_name, limits, verify, digests, progress, on_written)


def _extract(
    stream: BinaryIO,
    dest: Path,
    source_name: str,
    limits: ArchiveLimits,
    verify: Callable[[Path], None] | None,
    digests: dict[str, str] | None,
    progress: ProgressSink | None = None,
    on_written: OnWritten | None = None,
) -> Path:
    total_bytes = total_files = 0
    if is_seekable(stream):
        start = stream.tell()
        for member, data in iter_members(stream, source=source_name, limits=limits):
            if data is not None:
                total_bytes += member.size
                total_files += 1
        stream.seek(start)
    if progress is not None:
        progress.start(total_bytes, total_files)
    staging = dest.parent / f".{dest.name}.staging-{secrets.token_hex(8)}"
    try:
        staging.mkdir(mode=0o700)
    except OSError as exc:
        raise UsageError(
            f"cannot create a staging directory beside {dest}: {exc.strerror}"
        ) from exc
    try:
        written = {} if digests is None else digests
        top = _extract_into(stream, staging, source_name, limits, written, progress, on_written)
        if verify is not None:
            verify(top)
        _check_dest(dest)
        try:
            top.rename(dest)
        except OSError as exc:
            raise UsageError(f"cannot move the extracted bundle to {dest}: {exc.strerror}") from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    staging.rmdir()
    return dest
