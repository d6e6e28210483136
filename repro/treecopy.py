"""Copying a bundle directory into staging, hashing every byte on the way.

`repro unpack DIR/` installs what it verified: verifying DIR in place and reading it
again later would let an edit made in between (during the preflight, say) through.
So a directory is treated as an archive is: copied into the run's own staging
directory, each file read once and hashed from the buffer it is written from. The
digests go to the manifest check (which need not read the copy back), and every
later step reads the copy.

Only directories and regular files are copied: a bundle holds nothing else (the
archive reader refuses links, devices and FIFOs, and names that are not plain
UTF-8), so a directory holding anything else is refused naming every such entry.
Nothing is followed: directories are opened with O_NOFOLLOW relative to their
parent, files with O_NOFOLLOW | O_NONBLOCK and checked with fstat once open.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from repro.archive.common import DIR_MODE, EXEC_MODE, FILE_MODE
from repro.archive.extract import DIR_FLAGS, NEW_FILE_FLAGS, DirWalker
from repro.archive.membercopy import MemberCopier
from repro.archive.reader import ArchiveLimits
from repro.archive.tarformat import name_problem
from repro.bundle.manifest import ProgressSink, printable_path
from repro.errors import InputError, UsageError, VerificationError
from repro.hashing import file_kind

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
SHOWN_REFUSALS = 50


class _Copy:
    """One copy: the source walked with descriptors, the destination written through a
    DirWalker, files handed to a MemberCopier."""

    def __init__(
        self,
        source: Path,
        source_fd: int,
        dest: DirWalker,
        copier: MemberCopier,
        limits: ArchiveLimits,
        own: frozenset[tuple[int, int]],
    ) -> None:
        self.source = source
        # (st_dev, st_ino) of the copy and of its run's lock file: skipped if they are
        # inside the source (unpack run inside the bundle directory)
        self.own = own
        self.source_fd = source_fd
        self.dest = dest
        self.copier = copier
        self.limits = limits
        self.refused: list[str] = []
        self.files = 0
        self.total = 0

    def refuse(self, rel: str, why: str) -> None:
        self.refused.append(f"{printable_path(rel)}: {why}")

    def open_source_dir(self, parts: tuple[str, ...]) -> int:
        fd = os.dup(self.source_fd)
        try:
            for part in parts:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def directory(self, parts: tuple[str, ...]) -> list[tuple[str, ...]]:
        """Copy the files of one directory; return its subdirectories."""
        fd = self.open_source_dir(parts)
        try:
            self.dest.open(parts)  # created here, so that its files find it cached
            with os.scandir(fd) as listing:
                entries = sorted(listing, key=lambda e: e.name)
            subdirs: list[tuple[str, ...]] = []
            for entry in entries:
                child = (*parts, entry.name)
                rel = "/".join(child)
                problem = name_problem(rel)
                if problem is not None:
                    self.refuse(rel, problem)
                    continue
                info = entry.stat(follow_symlinks=False)
                mode = info.st_mode
                if (info.st_dev, info.st_ino) in self.own:
                    continue  # the staging copy or its lock (unpack run inside the bundle)
                if stat.S_ISDIR(mode):
                    subdirs.append(child)
                elif stat.S_ISREG(mode):
                    self.file(fd, child)
                else:
                    self.refuse(rel, file_kind(mode))
            return subdirs
        finally:
            os.close(fd)

    def file(self, parent_fd: int, parts: tuple[str, ...]) -> None:
        rel = "/".join(parts)
        try:
            fd = os.open(parts[-1], _READ_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):  # swapped since it was listed
                self.refuse(rel, "replaced by a link or a special file while it was read")
                return
            raise InputError(
                f"{self.source}/{printable_path(rel)}: cannot read: {exc.strerror}"
            ) from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                self.refuse(rel, file_kind(info.st_mode))
                os.close(fd)
                return
            self.admit(rel, info.st_size)
            out = os.open(parts[-1], NEW_FILE_FLAGS, 0o600, dir_fd=self.dest.open(parts[:-1]))
            try:
                os.fchmod(out, EXEC_MODE if info.st_mode & 0o111 else FILE_MODE)
            except BaseException:
                os.close(out)
                raise
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        self.copier.submit(rel, out, 0, info.st_size, source_fd=fd)

    def admit(self, rel: str, size: int) -> None:
        self.files += 1
        self.total += size
        if self.files > self.limits.max_members:
            raise VerificationError(
                f"{self.source}: more than {self.limits.max_members} files; a bundle holds fewer"
            )
        if size > self.limits.max_member_bytes or self.total > self.limits.max_total_bytes:
            raise VerificationError(
                f"{self.source}/{printable_path(rel)}: over the size limits of a bundle "
                f"({self.limits.max_member_bytes} bytes a file, "
                f"{self.limits.max_total_bytes} in all)"
            )


def copy_bundle_dir(
    source: Path,
    dest: Path,
    *,
    jobs: int | None = None,
    limits: ArchiveLimits | None = None,
    progress: ProgressSink | None = None,
    skip: Sequence[Path] = (),
) -> dict[str, str]:
    """Copy the bundle directory `source` as `dest` (created here, mode 0700 until it is
    complete); return the sha256 of every file copied, by its path below `source`, taken
    from the bytes written. `dest` and the files of `skip` (the run's staging lock) are
    never copied, should they lie inside `source`. Raises VerificationError naming every
    entry that is not a directory or a regular file, or whose name a bundle cannot hold;
    `dest` is removed on any failure by the caller."""
    limits = limits or ArchiveLimits()
    try:
        source_fd = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(f"{source}: cannot open the directory: {exc.strerror}") from exc
    try:
        dest.mkdir(mode=0o700)
        dest_fd = os.open(dest, DIR_FLAGS)
    except OSError as exc:
        os.close(source_fd)
        raise UsageError(f"cannot create a staging directory at {dest}: {exc.strerror}") from exc
    own = {(info.st_dev, info.st_ino) for info in map(_identity, skip) if info is not None}
    dest_info = os.fstat(dest_fd)
    own.add((dest_info.st_dev, dest_info.st_ino))
    walker = DirWalker(dest_fd)
    if progress is not None:
        progress.start(0, 0)  # sizes are learnt while walking, as for a stream
    advance = progress.advance if progress is not None else None
    try:
        with MemberCopier(source_fd, str(source), jobs, on_copied=advance) as copier:
            copy = _Copy(source, source_fd, walker, copier, limits, frozenset(own))
            pending: list[tuple[str, ...]] = [()]
            while pending:
                pending.extend(reversed(copy.directory(pending.pop())))
            digests = copier.finish()
        if copy.refused:
            shown = copy.refused[:SHOWN_REFUSALS]
            more = len(copy.refused) - len(shown)
            raise VerificationError(
                f"{source}: the bundle directory holds what a bundle never holds "
                "(only directories and regular files with plain names):\n"
                + "\n".join(f"  - {item}" for item in shown)
                + (f"\n  ... and {more} more" if more else ""),
                hint="unpack the bundle's archive, or a directory extracted from it",
            )
        os.fchmod(dest_fd, DIR_MODE)
    finally:
        walker.close()
        os.close(dest_fd)
        os.close(source_fd)
    return digests


def _identity(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None
