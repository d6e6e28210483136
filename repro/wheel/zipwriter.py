"""A stored (uncompressed) ZIP whose every byte is known before it is written.

A rebuilt wheel is planned, not written: each member's name, size and CRC-32 come from
the pass that already read the installed file to check it against RECORD. From the plan
the wheel's exact size follows, so it can be streamed straight into a tar member (whose
header states the size first) without a temporary copy, and its sha256 can be computed
by any thread ahead of the tar writer.

The format is plain PKZIP as Python's zipfile, pip, uv and installer read it: local
header, data, central directory, end record; ZIP64 extra fields and end records only
where a size, an offset or the member count overflows the classic fields. No data
descriptors: the local header carries the CRC and sizes, which strict readers compare
with the central directory.
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.archive.memberfill import not_as_recorded
from repro.crc import crc32
from repro.errors import InputError

CHUNK = 1 << 20
LIMIT_32 = 0xFFFFFFFF  # the value a classic field holds when the real one is in ZIP64
LIMIT_16 = 0xFFFF
ZIP64_SIZE = LIMIT_32  # sizes and offsets from here on go to ZIP64 fields
ZIP64_COUNT = LIMIT_16  # as does a member count from here on
VERSION_DEFAULT = 20
VERSION_ZIP64 = 45
MADE_BY_UNIX = 3 << 8
UTF8_FLAG = 0x800
_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_END = struct.Struct("<IHHHHIIH")
_END64 = struct.Struct("<IQHHIIQQQQ")
_LOCATOR = struct.Struct("<IIQI")


@dataclass(frozen=True, slots=True)
class ZipMember:
    """One member: its bytes are `data`, or the file `source` of `size` bytes. A plain
    str path and slots: a pack holds one per installed file until the bundle is written
    (a Path is ~380 bytes more per file, tracemalloc on the 22k-file bench venv)."""

    arcname: str
    size: int
    crc32: int
    executable: bool
    data: bytes | None = None
    source: str | None = None
    mtime_ns: int | None = None  # of `source` when it was hashed: a change is refused
    sha256: str | None = None  # of `source`, as the scan found it
    sha256_pending: bool = False  # `sha256` is RECORD's: the writer checks the bytes

    @classmethod
    def from_bytes(cls, arcname: str, data: bytes, *, executable: bool = False) -> ZipMember:
        return cls(arcname, len(data), crc32(data), executable, data=data)


def dos_date_time(date_time: Sequence[int]) -> tuple[int, int]:
    year, month, day, hour, minute, second = date_time[:6]
    date = ((year - 1980) << 9) | (month << 5) | day
    time = (hour << 11) | (minute << 5) | (second // 2)
    return date, time


def _name_bytes(arcname: str) -> tuple[bytes, int]:
    try:
        return arcname.encode("ascii"), 0
    except UnicodeEncodeError:
        return arcname.encode("utf-8"), UTF8_FLAG


def _local_header(member: ZipMember, date: int, time: int) -> bytes:
    name, flags = _name_bytes(member.arcname)
    zip64 = member.size >= ZIP64_SIZE
    extra = struct.pack("<HHQQ", 1, 16, member.size, member.size) if zip64 else b""
    size32 = LIMIT_32 if zip64 else member.size
    head = _LOCAL.pack(
        0x04034B50,
        VERSION_ZIP64 if zip64 else VERSION_DEFAULT,
        flags,
        0,  # stored
        time,
        date,
        member.crc32,
        size32,
        size32,
        len(name),
        len(extra),
    )
    return head + name + extra


def _central_header(member: ZipMember, offset: int, date: int, time: int) -> bytes:
    name, flags = _name_bytes(member.arcname)
    fields = []
    big = member.size >= ZIP64_SIZE
    if big:
        fields += [member.size, member.size]
    if offset >= ZIP64_SIZE:
        fields.append(offset)
    extra = struct.pack(f"<HH{len(fields)}Q", 1, 8 * len(fields), *fields) if fields else b""
    size32 = LIMIT_32 if big else member.size
    version = VERSION_ZIP64 if fields else VERSION_DEFAULT
    mode = 0o100755 if member.executable else 0o100644
    head = _CENTRAL.pack(
        0x02014B50,
        MADE_BY_UNIX | version,
        version,
        flags,
        0,
        time,
        date,
        member.crc32,
        size32,
        size32,
        len(name),
        len(extra),
        0,  # comment
        0,  # disk
        0,  # internal attributes
        mode << 16,
        LIMIT_32 if offset >= ZIP64_SIZE else offset,
    )
    return head + name + extra


def _end_records(count: int, cd_offset: int, cd_size: int) -> bytes:
    zip64 = count >= ZIP64_COUNT or cd_offset >= ZIP64_SIZE or cd_size >= ZIP64_SIZE
    out = b""
    if zip64:
        end64_offset = cd_offset + cd_size
        out += _END64.pack(
            0x06064B50,
            _END64.size - 12,
            MADE_BY_UNIX | VERSION_ZIP64,
            VERSION_ZIP64,
            0,
            0,
            count,
            count,
            cd_size,
            cd_offset,
        )
        out += _LOCATOR.pack(0x07064B50, 0, end64_offset, 1)
    out += _END.pack(
        0x06054B50,
        0,
        0,
        LIMIT_16 if zip64 else count,
        LIMIT_16 if zip64 else count,
        LIMIT_32 if zip64 else cd_size,
        LIMIT_32 if zip64 else cd_offset,
        0,
    )
    return out


@dataclass(frozen=True)
class ZipPlan:
    """Members in order and their timestamp: everything that decides the archive's bytes."""

    members: tuple[ZipMember, ...]
    date_time: tuple[int, int, int, int, int, int]

    @functools.cached_property
    def _layout(self) -> tuple[list[bytes], bytes]:
        """Every local header and the tail (central directory, end records): computed
        once, as size, digest and stream all need them."""
        date, time = dos_date_time(self.date_time)
        locals_: list[bytes] = []
        central: list[bytes] = []
        offset = 0
        for member in self.members:
            header = _local_header(member, date, time)
            locals_.append(header)
            central.append(_central_header(member, offset, date, time))
            offset += len(header) + member.size
        directory = b"".join(central)
        return locals_, directory + _end_records(len(self.members), offset, len(directory))

    @property
    def size(self) -> int:
        locals_, tail = self._layout
        return sum(len(h) for h in locals_) + sum(m.size for m in self.members) + len(tail)

    def pieces(self) -> Iterator[bytes | ZipMember]:
        """The archive in order: headers and in-memory data as bytes, each member read
        from a file as its `ZipMember` (`source`, `size`, `mtime_ns`)."""
        locals_, tail = self._layout
        for header, member in zip(locals_, self.members, strict=True):
            yield header
            yield member if member.data is None else member.data
        yield tail

    def iter_bytes(self) -> Iterator[bytes]:
        """The archive's bytes, in pieces; a file that changed since it was planned stops it."""
        for piece in self.pieces():
            if isinstance(piece, bytes):
                yield piece
            else:
                yield from _file_chunks(piece)

    def sha256(self) -> str:
        digest = hashlib.sha256()
        for piece in self.iter_bytes():
            digest.update(piece)
        return digest.hexdigest()

    def write(self, target: Path) -> str:
        """Write the archive to `target`; return its sha256."""
        digest = hashlib.sha256()
        with open(target, "wb") as stream:
            for piece in self.iter_bytes():
                digest.update(piece)
                stream.write(piece)
        return digest.hexdigest()


def _file_chunks(member: ZipMember) -> Iterator[bytes]:
    assert member.source is not None
    try:
        with open(member.source, "rb", buffering=0) as stream:
            info = os.fstat(stream.fileno())
            if info.st_size != member.size or (
                member.mtime_ns is not None and info.st_mtime_ns != member.mtime_ns
            ):
                raise _changed(member)
            remaining = member.size
            # a digest the scan took from RECORD unread is checked by whoever writes it
            own = hashlib.sha256() if member.sha256_pending else None
            while remaining:
                chunk = stream.read(min(CHUNK, remaining))
                if not chunk:
                    raise _changed(member)
                remaining -= len(chunk)
                if own is not None:
                    own.update(chunk)
                yield chunk
            if own is not None and own.hexdigest() != member.sha256:
                raise not_as_recorded(member.source)
    except OSError as exc:
        raise InputError(f"cannot read {member.source}: {exc.strerror or exc}") from exc


def _changed(member: ZipMember) -> InputError:
    return InputError(
        f"{member.source} changed while it was packed (planned {member.size} bytes)",
        hint="stop whatever writes into the environment and pack again",
    )
