"""Deterministic tar writing and safe tar reading for bundles.

The rules both sides follow are in docs/bundle-format.md. In short: one top-level
directory; members in canonical order (sorted by path components compared as UTF-8
bytes, parents before children, `env/sbom.cdx.json` after them and `MANIFEST.sha256`
and its `.sig` last); PAX format,
fixed mtime, uid/gid 0, no user names, modes 0644/0755; gzip and zstd by content.

The reader never trusts `tarfile`'s extraction filters alone (some Python 3.10/3.11
releases ship a broken one and Debian's 3.11.2 has none): it decodes headers itself,
checks every member against its own rules before anything is written, and then asks
`tarfile.data_filter`, where it exists, as a second opinion.

Imports only the standard library; `zstandard` is imported when a .zst is met.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import secrets
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import IO, TYPE_CHECKING, Any, BinaryIO, Literal, cast

from repro.archive import tarformat
from repro.archive.membercopy import MemberCopier
from repro.archive.tarformat import BLOCK, name_problem
from repro.bundle.layout import MANIFEST_NAMES, TRAILING_MEMBERS
from repro.errors import ArchiveError, InputError, UnsafeArchiveError, UsageError
from repro.hashing import BackgroundSha256

if TYPE_CHECKING:
    from repro.bundle.manifest import ProgressSink

Compression = Literal["none", "gz", "zst"]
Kind = Literal["file", "dir"]

FILE_MODE = 0o644
EXEC_MODE = 0o755
DIR_MODE = 0o755
CHUNK = 1 << 20
ZSTD_INPUT_CHUNK = 4096  # bounds the output of one zstd call (ratio <= 32768) to 128 MiB
MAX_EXTENDED_HEADER = 1 << 20
MAX_TRAILING_BYTES = 1 << 20
DEFAULT_GZ_LEVEL = 6
DEFAULT_ZST_LEVEL = 3
FILTER_DEST = "/nonexistent/repro-extract"


def source_date_epoch(default: int) -> int:
    """SOURCE_DATE_EPOCH from the environment if set, else `default`."""
    value = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) >= tarformat.MAX_OCTAL_11:
        raise UsageError(
            f"SOURCE_DATE_EPOCH={value!r} is not a valid timestamp",
            hint="set it to a whole number of seconds since 1970, or unset it",
        )
    return int(value)


def detect_compression(head: bytes, *, source: str = "<stream>") -> Compression:
    """The compression of an archive, from its first bytes (at least 262 for plain tar)."""
    if head[:2] == b"\x1f\x8b":
        return "gz"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zst"
    if head[257:262] == b"ustar":
        return "none"
    raise ArchiveError(
        f"{source}: not a tar archive (neither gzip, zstd nor ustar/pax tar)",
        hint="a bundle is a .tar, .tar.gz or .tar.zst made by `repro pack`",
    )


def _sort_key(rel: str) -> tuple[int, tuple[bytes, ...]]:
    rank = 2 if rel in MANIFEST_NAMES else 1 if rel in TRAILING_MEMBERS else 0
    return rank, tuple(part.encode("utf-8") for part in rel.split("/"))


def _import_zstandard() -> Any:
    try:
        import zstandard
    except ImportError as exc:
        raise UsageError(
            "zstd compression needs the 'zstandard' package", hint="pip install zstandard"
        ) from exc
    return zstandard


# --- writer --------------------------------------------------------------------------


def member_order(rel: str) -> tuple[int, tuple[bytes, ...]]:
    """The canonical order of members: by path components, then the members made from
    all the others (the SBOM), the manifest last."""
    return _sort_key(rel)


# Members at least this large are hashed by a second thread while they are written.
BACKGROUND_HASH_BYTES = 4 << 20


def _hasher(size: int) -> BackgroundSha256 | hashlib._Hash:
    return BackgroundSha256() if size >= BACKGROUND_HASH_BYTES else hashlib.sha256()


class DeterministicTarWriter:
    """Writes a bundle archive whose bytes depend only on the members added.

    Members must be added in canonical order (see `_sort_key`); parent directories are
    emitted automatically. An add out of order, a duplicate or a case-fold collision
    raises InputError, so no caller can make the output depend on its own ordering.
    """

    def __init__(
        self,
        out: BinaryIO,
        *,
        top: str,
        mtime: int,
        compression: Compression = "none",
        level: int | None = None,
    ) -> None:
        problem = name_problem(top)
        if problem is None and "/" in top:
            problem = "it holds a '/'"
        if problem is not None:
            raise InputError(f"bad top-level directory name {top!r} for an archive: {problem}")
        if not 0 <= mtime < tarformat.MAX_OCTAL_11:
            raise InputError(f"archive mtime {mtime} is out of range")
        self._out = out
        self._top = top
        self._mtime = mtime
        self._compression = compression
        self._level = level
        self._gzip: gzip.GzipFile | None = None
        self._spool: IO[bytes] | None = None
        self._sink: IO[bytes]
        if compression == "none":
            self._sink = out
        elif compression == "gz":
            self._gzip = gzip.GzipFile(
                filename="",
                mode="wb",
                fileobj=out,
                compresslevel=DEFAULT_GZ_LEVEL if level is None else level,
                mtime=0,
            )
            self._sink = cast(IO[bytes], self._gzip)
        elif compression == "zst":
            _import_zstandard()
            # A zstd frame states its content size up front, which is only known at the
            # end: the tar goes to a temporary file first and is compressed on close.
            self._spool = tempfile.TemporaryFile(prefix="repro-tar-")  # noqa: SIM115
            self._sink = self._spool
        else:
            raise UsageError(f"unknown compression {compression!r}; use none, gz or zst")
        self._written = 0
        self._last: tuple[int, tuple[bytes, ...]] | None = None
        self._kinds: dict[str, Kind] = {}
        self._folded: dict[str, str] = {}
        self._digests: dict[str, str] = {}
        self._reserved: dict[str, tuple[int, int]] = {}  # rel -> data offset, size
        self._unsettled: set[str] = set()  # holes whose digest did not come yet
        self._state: Literal["open", "closed", "failed"] = "open"
        self._emit_header(top, directory=True, mode=DIR_MODE, size=0)

    def __enter__(self) -> DeterministicTarWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self._abort()

    @property
    def digests(self) -> Mapping[str, str]:
        """sha256 of every file added so far, by path relative to the top directory."""
        return MappingProxyType(self._digests)

    def add_file(self, rel: str, source: Path, *, executable: bool | None = None) -> str:
        """Stream `source` into the archive as `rel` while hashing it; return its sha256."""
        self._check_open()
        try:
            fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise InputError(f"cannot read {source}: {exc.strerror}") from exc
        with os.fdopen(fd, "rb", buffering=0) as stream:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InputError(f"cannot pack {source}: not a regular file")
            if executable is None:
                executable = bool(info.st_mode & 0o111)
            parents = self._admit(rel, "file")
            self._start(rel, parents, "file", EXEC_MODE if executable else FILE_MODE, info.st_size)
            digest = _hasher(info.st_size)
            remaining = info.st_size
            try:
                if isinstance(digest, BackgroundSha256):
                    # fresh bytes per chunk: the hashing thread still reads the last one
                    while remaining and (chunk := stream.read(min(CHUNK, remaining))):
                        digest.update(chunk)
                        self._write(chunk)
                        remaining -= len(chunk)
                else:
                    buffer = bytearray(CHUNK)
                    view = memoryview(buffer)
                    while remaining and (count := stream.readinto(view[: min(CHUNK, remaining)])):
                        digest.update(view[:count])
                        self._write(view[:count])
                        remaining -= count
                grew = bool(stream.read(1))
                hexdigest = digest.hexdigest()
            except OSError as exc:
                self._state = "failed"
                raise InputError(f"error reading {source}: {exc.strerror}") from exc
            finally:
                if isinstance(digest, BackgroundSha256):
                    digest.close()
            if remaining or grew:
                self._state = "failed"
                raise InputError(
                    f"{source} changed size while it was packed (was {info.st_size} bytes)",
                    hint="stop whatever writes to it and pack again",
                )
        self._write(tarformat.padding(info.st_size))
        self._digests[rel] = hexdigest
        return hexdigest

    def add_stream(
        self,
        rel: str,
        size: int,
        pieces: Iterable[bytes],
        *,
        digest: str | None = None,
        executable: bool = False,
    ) -> str:
        """Add `size` bytes that `pieces` yields as the file `rel`; return its sha256.

        A `digest` computed ahead (a rebuilt wheel hashed in parallel) is taken as it is
        and the bytes are not hashed again; without one they are hashed as they pass.
        Pieces that add up to more or less than `size` stop the archive.
        """
        self._check_open()
        parents = self._admit(rel, "file")
        self._start(rel, parents, "file", EXEC_MODE if executable else FILE_MODE, size)
        hasher = None if digest is not None else _hasher(size)
        written = 0
        try:
            for piece in pieces:
                written += len(piece)
                if written > size:
                    break
                if hasher is not None:
                    hasher.update(piece)
                self._write(piece)
            final = hasher.hexdigest() if hasher is not None else digest
        except BaseException:
            self._state = "failed"
            raise
        finally:
            if isinstance(hasher, BackgroundSha256):
                hasher.close()
        if written != size:
            self._state = "failed"
            raise InputError(f"{rel}: {written} bytes produced where {size} were planned")
        self._write(tarformat.padding(size))
        assert final is not None
        self._digests[rel] = final
        return final

    def tell(self) -> int:
        """Where the next byte goes in the output file (the archive's size so far when
        it starts at the file's beginning)."""
        return self._sink.tell()

    def hole_target(self) -> tuple[int, int | None] | None:
        """Where `add_hole` leaves its holes: the descriptor of the file the tar bytes go
        to and, when that file is written past the page cache, its O_DIRECT descriptor;
        None where there is no such file (gzip, a pipe, memory)."""
        if self._gzip is not None:
            return None
        if self._spool is not None:
            return self._spool.fileno(), None
        if not _is_seekable(self._out):
            return None
        try:
            fd = self._out.fileno()
        except (OSError, ValueError):
            return None
        return fd, getattr(self._out, "direct_fd", None)

    def add_hole(self, rel: str, size: int, *, executable: bool = False) -> int:
        """Add the file `rel` of `size` bytes without writing them: return the offset in
        the `hole_target` file where another thread writes them (`repro.archive.memberfill`);
        its sha256 comes later through `settle`, before `close`."""
        if self.hole_target() is None:
            raise UsageError(f"archive {self._top}: cannot leave a hole: output not a file")
        self._check_open()
        parents = self._admit(rel, "file")
        self._start(rel, parents, "file", EXEC_MODE if executable else FILE_MODE, size)
        offset = self._sink.tell()
        try:
            skip = getattr(self._sink, "skip", None)
            if skip is not None:
                skip(size)
            else:
                self._sink.seek(offset + size)
        except OSError as exc:
            self._state = "failed"
            raise InputError(f"cannot write archive {self._top}: {exc.strerror}") from exc
        self._written += size
        self._write(tarformat.padding(size))
        self._unsettled.add(rel)
        self._digests[rel] = ""
        return offset

    def add_bytes(self, rel: str, data: bytes, *, executable: bool = False) -> str:
        """Add `data` as the file `rel`; return its sha256."""
        self._check_open()
        parents = self._admit(rel, "file")
        self._start(rel, parents, "file", EXEC_MODE if executable else FILE_MODE, len(data))
        self._write(data)
        self._write(tarformat.padding(len(data)))
        self._digests[rel] = hashlib.sha256(data).hexdigest()
        return self._digests[rel]

    @property
    def can_fill_later(self) -> bool:
        """Whether `reserve` works: the tar bytes go to a seekable file (an uncompressed
        archive written to a file, or the spool of a zstd one), not through gzip or a pipe."""
        if self._gzip is not None:
            return False
        return self._spool is not None or _is_seekable(self._out)

    def reserve(self, rel: str, placeholder: bytes, *, executable: bool = False) -> None:
        """Add the file `rel` with `placeholder` as its content, to be replaced by `fill`
        with bytes of the same length once they are known (lock files that list the
        sha256 of wheels written after them). Only where `can_fill_later`."""
        if not self.can_fill_later:
            raise UsageError(f"archive {self._top}: cannot reserve {rel}: output not seekable")
        self._check_open()
        parents = self._admit(rel, "file")
        size = len(placeholder)
        self._start(rel, parents, "file", EXEC_MODE if executable else FILE_MODE, size)
        self._reserved[rel] = (self._sink.tell(), size)
        self._write(placeholder)
        self._write(tarformat.padding(size))

    def fill(self, rel: str, data: bytes) -> str:
        """Write the final content of a reserved file in its place; return its sha256."""
        self._check_open()
        if rel not in self._reserved:
            raise InputError(f"archive {self._top}: {rel} was not reserved")
        offset, size = self._reserved[rel]
        if len(data) != size:
            self._state = "failed"
            raise InputError(
                f"archive {self._top}: {rel} is {len(data)} bytes, {size} were reserved"
            )
        try:
            end = self._sink.tell()
            self._sink.seek(offset)
            self._sink.write(data)
            self._sink.seek(end)
        except OSError as exc:
            self._state = "failed"
            raise InputError(f"cannot write archive {self._top}: {exc.strerror}") from exc
        del self._reserved[rel]
        self._digests[rel] = hashlib.sha256(data).hexdigest()
        return self._digests[rel]

    def settle(self, rel: str, digest: str) -> None:
        """The sha256 of a member added with `add_hole`, once it was written."""
        if rel not in self._unsettled:
            raise InputError(f"archive {self._top}: {rel} is not waiting for its digest")
        self._unsettled.discard(rel)
        self._digests[rel] = digest

    def add_directory(self, rel: str) -> None:
        """Add an (empty, or not yet filled) directory `rel`."""
        self._check_open()
        parents = self._admit(rel, "dir")
        self._start(rel, parents, "dir", DIR_MODE, 0)

    def close(self) -> None:
        """Write the end-of-archive marker and finish compression; `out` stays open."""
        if self._state != "open":
            return
        if self._reserved or self._unsettled:
            self._abort()
            unfilled = ", ".join(sorted([*self._reserved, *self._unsettled]))
            raise InputError(
                f"archive {self._top}: reserved but never filled, or never given its "
                f"digest: {unfilled}"
            )
        self._write(tarformat.end_of_archive(self._written))
        if self._gzip is not None:
            self._gzip.close()
        if self._spool is not None:
            zstandard = _import_zstandard()
            compressor = zstandard.ZstdCompressor(
                level=DEFAULT_ZST_LEVEL if self._level is None else self._level,
                write_checksum=True,
                write_content_size=True,
            )
            self._spool.seek(0)
            compressor.copy_stream(
                self._spool, self._out, size=self._written, read_size=CHUNK, write_size=CHUNK
            )
            self._spool.close()
        self._out.flush()
        self._state = "closed"

    def _abort(self) -> None:
        """Release resources without an end marker, so the output reads as truncated."""
        self._state = "failed"
        if self._spool is not None:
            self._spool.close()

    def _check_open(self) -> None:
        if self._state != "open":
            raise InputError(f"archive {self._top}: writer is {self._state}, cannot add")

    def _admit(self, rel: str, kind: Kind) -> list[str]:
        """Check that `rel` may come next; return the parent directories to emit first."""
        problem = name_problem(rel)
        if problem is not None:
            raise InputError(f"cannot add {rel!r} to archive {self._top}: {problem}")
        if rel in self._kinds:
            raise InputError(f"cannot add {rel!r} to archive {self._top}: added twice")
        parts = rel.split("/")
        parents: list[str] = []
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if self._kinds.get(parent) == "file":
                raise InputError(f"cannot add {rel!r} to archive {self._top}: {parent!r} is a file")
            if parent not in self._kinds:
                parents.append(parent)
        first = _sort_key(parents[0] if parents else rel)
        if self._last is not None and first <= self._last:
            raise InputError(
                f"cannot add {rel!r} to archive {self._top}: out of canonical order",
                hint="add members sorted by path components (UTF-8 bytes), then "
                f"{', '.join(TRAILING_MEMBERS)}, MANIFEST.sha256 and MANIFEST.sha256.sig last",
            )
        for name in [*parents, rel]:
            other = self._folded.get(name.casefold())
            if other is not None:
                raise InputError(
                    f"cannot add {rel!r} to archive {self._top}: "
                    f"{name!r} and {other!r} differ only in case"
                )
        return parents

    def _start(self, rel: str, parents: list[str], kind: Kind, mode: int, size: int) -> None:
        for parent in parents:
            self._record(parent, "dir")
            self._emit_header(f"{self._top}/{parent}", directory=True, mode=DIR_MODE, size=0)
        self._record(rel, kind)
        self._emit_header(f"{self._top}/{rel}", directory=kind == "dir", mode=mode, size=size)

    def _record(self, rel: str, kind: Kind) -> None:
        self._kinds[rel] = kind
        self._folded[rel.casefold()] = rel
        self._last = _sort_key(rel)

    def _emit_header(self, path: str, *, directory: bool, mode: int, size: int) -> None:
        self._write(
            tarformat.encode_entry(
                path, directory=directory, mode=mode, size=size, mtime=self._mtime
            )
        )

    def _write(self, data: bytes | memoryview) -> None:
        try:
            self._sink.write(data)
        except OSError as exc:
            self._state = "failed"
            raise InputError(f"cannot write archive {self._top}: {exc.strerror}") from exc
        self._written += len(data)


# --- reader --------------------------------------------------------------------------


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
        self._zstandard = _import_zstandard()
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


def _is_seekable(stream: BinaryIO) -> bool:
    try:
        return stream.seekable()
    except (AttributeError, OSError, ValueError):
        return False


class _TarStream:
    """Blocks of the (decompressed) tar, with the byte offset for messages."""

    def __init__(self, stream: BinaryIO, source: str) -> None:
        self.source = source
        self.offset = 0
        self.base = 0  # where the tar starts in `stream` (seekable, uncompressed)
        self.unread: _MemberData | None = None  # data of the member last yielded
        self._seekable = False
        self._end = 0
        raw: BinaryIO
        try:
            if _is_seekable(stream):
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
        try:
            data = self._stream.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise ArchiveError(f"{self.source}: corrupt or truncated archive ({exc})") from exc
        self.offset += len(data)
        return data

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


class _MemberData(io.RawIOBase):
    def __init__(self, tar: _TarStream, size: int, what: str) -> None:
        self._tar = tar
        self.remaining = size
        self._what = what

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if not self.remaining or not len(view):
            return 0
        data = self._tar.read_some(min(len(view), self.remaining))
        if not data:
            raise ArchiveError(
                f"{self._tar.source}: archive is truncated (ends at byte {self._tar.offset}, "
                f"inside {self._what})"
            )
        view[: len(data)] = data
        self.remaining -= len(data)
        return len(data)


@dataclass(frozen=True)
class _Entry:
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


def _iter_entries(tar: _TarStream) -> Iterator[_Entry]:
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
        entry = _Entry(
            name, header.typeflag, header.mode, size, link.decode("utf-8", "backslashreplace")
        )
        yield entry
        remaining = size
        if tar.unread is not None:
            remaining = tar.unread.remaining
            tar.unread.remaining = 0  # a stale member stream reads as ended, not as the next
            tar.unread = None
        tar.skip(remaining + (-size % BLOCK), f"member {name!r}")


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

    def admit(self, entry: _Entry) -> SafeMember | None:
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
    tar = _TarStream(stream, source)
    validator = _Validator(source, limits)
    for entry in _iter_entries(tar):
        member = validator.admit(entry)
        if member is None:
            continue
        if member.kind == "dir":
            yield member, None, None
            continue
        position = tar.base + tar.offset if tar.seekable else None
        data = _MemberData(tar, member.size, f"member {entry.name!r}")
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


# --- extraction ----------------------------------------------------------------------


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

    def __init__(self, root_fd: int) -> None:
        self._root_fd = root_fd
        self._cached: tuple[tuple[str, ...], int] | None = None

    def open(self, parts: tuple[str, ...]) -> int:
        if self._cached is not None and self._cached[0] == parts:
            return self._cached[1]
        fd = os.dup(self._root_fd)
        try:
            for part in parts:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                    created = True
                except FileExistsError:
                    created = False
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
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
) -> Path:
    advance = progress.advance if progress is not None else None
    root_fd = os.open(staging, DIR_FLAGS)
    walker = DirWalker(root_fd)
    top: str | None = None
    source_fd = _fileno(stream)
    try:
        with contextlib.ExitStack() as stack:
            copier: MemberCopier | None = None
            for member, data, position in _iter_safe(stream, source, limits):
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
                cast(BinaryIO, stream), dest, source_name, limits, verify, digests, progress
            )
    return _extract(source, dest, source_name, limits, verify, digests, progress)


def _extract(
    stream: BinaryIO,
    dest: Path,
    source_name: str,
    limits: ArchiveLimits,
    verify: Callable[[Path], None] | None,
    digests: dict[str, str] | None,
    progress: ProgressSink | None = None,
) -> Path:
    total_bytes = total_files = 0
    if _is_seekable(stream):
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
        top = _extract_into(stream, staging, source_name, limits, written, progress)
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


def write_directory(
    root: Path,
    out: BinaryIO,
    *,
    top: str,
    mtime: int,
    compression: Compression = "none",
) -> Mapping[str, str]:
    """Archive every regular file under `root` (an unpacked bundle) in canonical order."""
    files: list[str] = []
    for directory, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(directory)
        for filename in filenames:
            path = base / filename
            if path.is_symlink() or not path.is_file():
                raise InputError(f"{path}: not a regular file; a bundle holds only files")
            files.append(path.relative_to(root).as_posix())
    with DeterministicTarWriter(out, top=top, mtime=mtime, compression=compression) as writer:
        for rel in sorted(files, key=member_order):
            writer.add_file(rel, root / rel)
        return dict(writer.digests)
