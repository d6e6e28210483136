"""The tar under a bundle archive, decoded without trusting `tarfile`.

Decompression (gzip, zstd) that notices a truncated stream, the tar's blocks with the
byte offset each message names, and its entries with extended headers (PAX, GNU long
names) folded in. What an entry may be is decided by `repro.archive.reader`; this
module refuses only what it cannot represent (names not UTF-8, global PAX headers,
sparse files, extended headers past their cap).

Imports only the standard library; `zstandard` is imported when a .zst is met.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

from repro.archive import tarformat
from repro.archive.common import CHUNK, detect_compression, import_zstandard, is_seekable
from repro.archive.tarformat import BLOCK
from repro.errors import ArchiveError, UnsafeArchiveError

ZSTD_INPUT_CHUNK = 4096  # bounds the output of one zstd call (ratio <= 32768) to 128 MiB
MAX_EXTENDED_HEADER = 1 << 20
MAX_TRAILING_BYTES = 1 << 20


class _Prefixed(io.RawIOBase):
    """A stream whose first bytes were already read to sniff the compression."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._head:
            count = min(len(view), len(self._head))
            view[:count] = self._head[:count]
            self._head = self._head[count:]
            return count
        data = self._rest.read(len(view))
        view[: len(data)] = data
        return len(data)


class _ZstdReader(io.RawIOBase):
    """zstd decompression that notices a truncated frame (zstandard's stream_reader
    returns a silent short read instead)."""

    def __init__(self, raw: BinaryIO, source: str) -> None:
        self._raw = raw
        self._source = source
        self._zstandard = import_zstandard()
        self._decompressor = self._zstandard.ZstdDecompressor().decompressobj()
        self._in_frame = False
        self._pending = b""
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while not self._pending and not self._done:
            self._fill()
        count = min(len(view), len(self._pending))
        view[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def _fill(self) -> None:
        data = self._raw.read(ZSTD_INPUT_CHUNK)
        if not data:
            if self._in_frame:
                raise ArchiveError(f"{self._source}: zstd data is truncated")
            self._done = True
            return
        output: list[bytes] = []
        try:
            while data:
                self._in_frame = True
                output.append(self._decompressor.decompress(data))
                if not self._decompressor.eof:
                    break
                self._in_frame = False
                data = self._decompressor.unused_data
                self._decompressor = self._zstandard.ZstdDecompressor().decompressobj()
        except self._zstandard.ZstdError as exc:
            raise ArchiveError(f"{self._source}: corrupt zstd data ({exc})") from exc
        self._pending = b"".join(output)


def _read_head(stream: BinaryIO, size: int) -> bytes:
    parts: list[bytes] = []
    have = 0
    while have < size:
        data = stream.read(size - have)
        if not data:
            break
        parts.append(data)
        have += len(data)
    return b"".join(parts)


class TarStream:
    """Blocks of the (decompressed) tar, with the byte offset for messages."""

    def __init__(self, stream: BinaryIO, source: str) -> None:
        self.source = source
        self.offset = 0
        self.base = 0  # where the tar starts in `stream` (seekable, uncompressed)
        self.unread: MemberData | None = None  # data of the member last yielded
        self._head = b""  # bytes read to sniff the compression, not yet given out
        self._seekable = False
        self._end = 0
        raw: BinaryIO
        try:
            if is_seekable(stream):
                start = stream.tell()
                head = _read_head(stream, BLOCK)
                kind = detect_compression(head, source=source)
                self._end = stream.seek(0, os.SEEK_END)
                stream.seek(start)
                raw = stream
                self._seekable = kind == "none"
                self.base = start
            else:
                head = _read_head(stream, BLOCK)
                kind = detect_compression(head, source=source)
                if kind == "none" and isinstance(stream, io.BufferedReader):
                    # a pipe (stdin) already buffered: read straight from it, the head
                    # served first (a second buffered layer copied every byte once more)
                    raw = stream
                    self._head = head
                else:
                    raw = cast(BinaryIO, io.BufferedReader(_Prefixed(head, stream), CHUNK))
        except OSError as exc:
            raise ArchiveError(f"{source}: cannot read ({exc.strerror or exc})") from exc
        self._stream: BinaryIO
        if kind == "gz":
            self._stream = cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="rb"))
        elif kind == "zst":
            self._stream = cast(BinaryIO, io.BufferedReader(_ZstdReader(raw, source), CHUNK))
        else:
            self._stream = raw

    def read_some(self, size: int) -> bytes:
        if self._head:
            data, self._head = self._head[:size], self._head[size:]
            self.offset += len(data)
            return data
        try:
            data = self._stream.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise ArchiveError(f"{self.source}: corrupt or truncated archive ({exc})") from exc
        self.offset += len(data)
        return data

    def read_into(self, view: memoryview) -> int:
        """`read_some` into `view` (no bytes object in between); 0 at the end."""
        if self._head:
            count = min(len(view), len(self._head))
            view[:count] = self._head[:count]
            self._head = self._head[count:]
            self.offset += count
            return count
        try:
            count = self._stream.readinto(view)  # type: ignore[attr-defined]
        except (OSError, EOFError, zlib.error) as exc:
            raise ArchiveError(f"{self.source}: corrupt or truncated archive ({exc})") from exc
        count = count or 0
        self.offset += count
        return count

    def read_exact(self, size: int, what: str) -> bytes:
        parts: list[bytes] = []
        have = 0
        while have < size:
            data = self.read_some(min(size - have, CHUNK))
            if not data:
                raise ArchiveError(
                    f"{self.source}: archive is truncated (ends at byte {self.offset}, "
                    f"inside {what})"
                )
            parts.append(data)
            have += len(data)
        return b"".join(parts)

    @property
    def seekable(self) -> bool:
        return self._seekable

    def skip(self, size: int, what: str) -> None:
        if self._seekable:
            if self._stream.seek(size, os.SEEK_CUR) > self._end:
                raise ArchiveError(
                    f"{self.source}: archive is truncated (ends at byte {self._end}, inside {what})"
                )
            self.offset += size
            return
        while size:
            size -= len(self.read_exact(min(size, CHUNK), what))

    def drain_trailer(self) -> None:
        """Read what follows the end marker: zeros only (this checks gzip/zstd trailers)."""
        seen = 0
        while True:
            data = self.read_some(CHUNK)
            if not data:
                return
            seen += len(data)
            if data.strip(b"\0") or seen > MAX_TRAILING_BYTES:
                raise ArchiveError(f"{self.source}: data after the end-of-archive marker")


class MemberData(io.RawIOBase):
    def __init__(self, tar: TarStream, size: int, what: str) -> None:
        self._tar = tar
        self.remaining = size
        self._what = what

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if not self.remaining or not len(view):
            return 0
        count = self._tar.read_into(view[: min(len(view), self.remaining)])
        if not count:
            raise ArchiveError(
                f"{self._tar.source}: archive is truncated (ends at byte {self._tar.offset}, "
                f"inside {self._what})"
            )
        self.remaining -= count
        return count


@dataclass(frozen=True)
class Entry:
    name: str
    typeflag: bytes
    mode: int
    size: int
    linkname: str


def _decode_name(raw: bytes, source: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        shown = raw.decode("utf-8", "backslashreplace")
        raise UnsafeArchiveError(f"{source}: member {shown!r}: name is not UTF-8") from exc


def iter_entries(tar: TarStream) -> Iterator[Entry]:
    """Members of the tar, extended headers folded in.

    Data not read by the consumer is skipped before the next header is read.
    """
    source = tar.source
    while True:
        pax: dict[str, bytes] = {}
        long_name: bytes | None = None
        long_link: bytes | None = None
        extended = 0  # bytes of extended headers for this member, capped
        while True:
            at = tar.offset
            where = f"{source}: header at byte {at}"
            block = tar.read_exact(BLOCK, f"the header at byte {at}")
            if block == tarformat.ZERO_BLOCK:
                if pax or long_name is not None or long_link is not None:
                    raise ArchiveError(f"{where}: extended header without a member")
                second = tar.read_some(BLOCK)
                if second.strip(b"\0"):
                    raise ArchiveError(f"{where}: corrupt archive (a lone zero block)")
                tar.drain_trailer()
                return
            header = tarformat.decode_header(block, where)
            if header.typeflag in (
                tarformat.PAX_TYPE,
                tarformat.GNU_LONGNAME_TYPE,
                tarformat.GNU_LONGLINK_TYPE,
            ):
                extended += header.size
                if extended > MAX_EXTENDED_HEADER:
                    raise UnsafeArchiveError(
                        f"{where}: extended headers of over {MAX_EXTENDED_HEADER} bytes"
                        " for one member"
                    )
                data = tar.read_exact(header.size, "an extended header")
                tar.skip(-header.size % BLOCK, "an extended header")
                if header.typeflag == tarformat.PAX_TYPE:
                    pax.update(tarformat.parse_pax(data, where))
                elif header.typeflag == tarformat.GNU_LONGNAME_TYPE:
                    long_name = data.split(b"\0", 1)[0]
                else:
                    long_link = data.split(b"\0", 1)[0]
                continue
            break
        raw_name = pax.get("path", long_name if long_name is not None else header.name)
        name = _decode_name(raw_name, source)
        if header.typeflag == tarformat.GLOBAL_PAX_TYPE:
            raise UnsafeArchiveError(f"{source}: member {name!r}: global PAX headers are refused")
        if any(key.startswith("GNU.sparse.") for key in pax):
            raise UnsafeArchiveError(f"{source}: member {name!r}: sparse files are refused")
        charset = pax.get("hdrcharset")
        if charset is not None and charset != b"ISO-IR 10646 2000 UTF-8":
            raise UnsafeArchiveError(f"{source}: member {name!r}: names are not UTF-8")
        size = header.size
        if "size" in pax:
            if not pax["size"].isdigit():
                raise ArchiveError(f"{source}: member {name!r}: bad size in PAX header")
            size = int(pax["size"])
        link = pax.get("linkpath", long_link if long_link is not None else header.linkname)
        entry = Entry(
            name, header.typeflag, header.mode, size, link.decode("utf-8", "backslashreplace")
        )
        yield entry
        remaining = size
        if tar.unread is not None:
            remaining = tar.unread.remaining
            tar.unread.remaining = 0  # a stale member stream reads as ended, not as the next
            tar.unread = None
        tar.skip(remaining + (-size % BLOCK), f"member {name!r}")
