"""Safe tar reading for bundles: every member checked before anything is written.

The reader never trusts `tarfile`'s extraction filters alone (some Python 3.10/3.11
releases ship a broken one and Debian's 3.11.2 has none): it decodes headers itself
(`repro.archive.tarstream`), checks every member against the bundle's rules (see
docs/bundle-format.md and docs/security.md) and then asks `tarfile.data_filter`,
where it exists, as a second opinion.

Imports only the standard library; `zstandard` is imported when a .zst is met.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

from repro.archive import tarformat
from repro.archive.common import CHUNK, DIR_MODE, EXEC_MODE, FILE_MODE, Kind
from repro.archive.tarformat import name_problem
from repro.archive.tarstream import Entry, MemberData, TarStream, iter_entries
from repro.errors import ArchiveError, UnsafeArchiveError

FILTER_DEST = "/nonexistent/repro-extract"


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps that keep a hostile archive from filling a disk or memory."""

    max_members: int = 200_000
    max_total_bytes: int = 256 << 30
    max_member_bytes: int = 64 << 30


@dataclass(frozen=True)
class SafeMember:
    """A member that passed every check.

    `name` is relative to the top-level directory `top`; `mode` is what extraction
    gives it (0644 or 0755 for files, 0755 for directories).
    """

    name: str
    kind: Kind
    size: int
    mode: int
    top: str


@dataclass
class _Validator:
    """Applies the bundle's member rules; state is what was seen so far."""

    source: str
    limits: ArchiveLimits
    top: str | None = None
    members: int = 0
    total: int = 0
    kinds: dict[str, str] = field(default_factory=dict)
    folded: dict[str, str] = field(default_factory=dict)

    def refuse(self, name: str, why: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(
            f"{self.source}: member {name!r} {why}",
            hint="this archive was not made by `repro pack`, or was tampered with; "
            "nothing was extracted",
        )

    def admit(self, entry: Entry) -> SafeMember | None:
        name = entry.name
        self.members += 1
        if self.members > self.limits.max_members:
            raise self.refuse(name, f"is past the limit of {self.limits.max_members} members")
        special = tarformat.SPECIAL_TYPES.get(entry.typeflag)
        if special is not None:
            target = f" to {entry.linkname!r}" if entry.typeflag in (b"1", b"2") else ""
            raise self.refuse(name, f"is {special}{target}; only files and directories allowed")
        if entry.typeflag == tarformat.DIRECTORY_TYPE:
            kind: Kind = "dir"
            rel = name[:-1] if name.endswith("/") else name
        elif entry.typeflag in tarformat.REGULAR_TYPES:
            kind = "file"
            rel = name
        else:
            raise self.refuse(name, f"has unsupported type {entry.typeflag!r}")
        problem = name_problem(rel)
        if problem is not None:
            raise self.refuse(name, f"is refused: {problem}")
        permissions = entry.mode & 0o7777
        if permissions & 0o7000:
            raise self.refuse(name, f"has setuid, setgid or sticky bits (mode {permissions:04o})")
        if permissions & 0o022:
            raise self.refuse(name, f"is group- or world-writable (mode {permissions:04o})")
        parts = rel.split("/")
        if self.top is None:
            self.top = parts[0]
        if parts[0] != self.top:
            raise self.refuse(
                name, f"is outside the top-level directory {self.top!r} (only one is allowed)"
            )
        if len(parts) == 1 and kind == "file":
            raise self.refuse(name, "is a file outside the top-level directory")
        if kind == "dir" and entry.size:
            raise self.refuse(name, "is a directory with data")
        if entry.size > self.limits.max_member_bytes:
            raise self.refuse(
                name, f"is {entry.size} bytes, over the limit of {self.limits.max_member_bytes}"
            )
        self.total += entry.size
        if self.total > self.limits.max_total_bytes:
            raise self.refuse(
                name, f"takes the archive over the limit of {self.limits.max_total_bytes} bytes"
            )
        self._check_unique(name, rel, kind, parts)
        self._second_opinion(name, rel, kind, permissions, entry.size)
        if len(parts) == 1:
            return None
        mode = DIR_MODE if kind == "dir" else (EXEC_MODE if permissions & 0o111 else FILE_MODE)
        return SafeMember("/".join(parts[1:]), kind, entry.size, mode, self.top)

    def _check_unique(self, name: str, rel: str, kind: Kind, parts: list[str]) -> None:
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            seen = self.kinds.get(parent)
            if seen == "file":
                raise self.refuse(name, f"is inside {parent!r}, which is a file")
            if seen is None:
                self._fold(name, parent)
                self.kinds[parent] = "implicit-dir"
        seen = self.kinds.get(rel)
        if seen is not None and not (seen == "implicit-dir" and kind == "dir"):
            raise self.refuse(name, "appears twice")
        if seen is None:
            self._fold(name, rel)
        self.kinds[rel] = kind

    def _fold(self, name: str, path: str) -> None:
        other = self.folded.setdefault(path.casefold(), path)
        if other != path:
            raise self.refuse(name, f"collides with {other!r} when case is ignored")

    def _second_opinion(self, name: str, rel: str, kind: Kind, mode: int, size: int) -> None:
        data_filter = getattr(tarfile, "data_filter", None)
        if data_filter is None:
            return
        info = tarfile.TarInfo(rel)
        info.type = tarfile.DIRTYPE if kind == "dir" else tarfile.REGTYPE
        info.mode = mode
        info.size = size
        try:
            # A destination that does not exist: the filter judges the name alone, as
            # the staging tree holds no links (realpath() over it costs a syscall per
            # component and per member, for no information).
            data_filter(info, FILTER_DEST)
        except tarfile.TarError as exc:
            raise self.refuse(name, f"is refused by tarfile's data filter: {exc}") from exc


def _iter_safe(
    stream: BinaryIO, source: str, limits: ArchiveLimits
) -> Iterator[tuple[SafeMember, BinaryIO | None, int | None]]:
    tar = TarStream(stream, source)
    validator = _Validator(source, limits)
    for entry in iter_entries(tar):
        member = validator.admit(entry)
        if member is None:
            continue
        if member.kind == "dir":
            yield member, None, None
            continue
        position = tar.base + tar.offset if tar.seekable else None
        data = MemberData(tar, member.size, f"member {entry.name!r}")
        tar.unread = data
        yield member, cast(BinaryIO, io.BufferedReader(data, CHUNK)), position
    if validator.top is None:
        raise ArchiveError(f"{source}: the archive is empty")


def iter_members(
    stream: BinaryIO, *, source: str, limits: ArchiveLimits | None = None
) -> Iterator[tuple[SafeMember, BinaryIO | None]]:
    """Validated members of an archive, in archive order, without extracting.

    Each file member comes with a stream of its data, valid until the next member.
    Hostile members raise UnsafeArchiveError, unreadable archives ArchiveError.
    """
    for member, data, _ in _iter_safe(stream, source, limits or ArchiveLimits()):
        yield member, data


def iter_members_at(
    stream: BinaryIO, *, source: str, limits: ArchiveLimits | None = None
) -> Iterator[tuple[SafeMember, BinaryIO | None, int | None]]:
    """`iter_members`, with each file member's data offset in `stream` when the archive
    is an uncompressed file (None otherwise). A member left unread is then skipped by a
    seek, and its bytes can be read at that offset (os.pread) by other threads: the
    members of a tar on disk can be hashed in parallel after one pass over the headers."""
    return _iter_safe(stream, source, limits or ArchiveLimits())


def read_member(archive: Path, rel: str, *, limits: ArchiveLimits | None = None) -> bytes:
    """The content of the file `rel` (relative to the top directory) of `archive`."""
    try:
        stream = open(archive, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise ArchiveError(f"cannot open {archive}: {exc.strerror}") from exc
    with stream:
        for member, data in iter_members(stream, source=str(archive), limits=limits):
            if member.name == rel and data is not None:
                return data.read()
    raise ArchiveError(f"{archive}: has no file {rel!r}")
