"""Deterministic tar writing for bundles.

Over 400 lines for a reason: it is one class, DeterministicTarWriter, whose state (the
canonical order, case folds, the holes other threads fill, the compression sink) has to
stay in one place to be checked on every add; the module holds little besides it.

The rules are in docs/bundle-format.md. In short: one top-level directory; members in
canonical order (sorted by path components compared as UTF-8 bytes, parents before
children; then the trailing members, made from the digests of the others: from format 5
on `env/pylock.toml`, `env/vault.toml`, then `env/sbom.cdx.json`; `MANIFEST.sha256` and
its `.sig` last);
PAX format, fixed mtime, uid/gid 0, no user names, modes 0644/0755; gzip or zstd.

Imports only the standard library; `zstandard` is imported when a .zst is written.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import IO, BinaryIO, Literal, cast

from repro.archive import tarformat
from repro.archive.common import (
    CHUNK,
    DIR_MODE,
    EXEC_MODE,
    FILE_MODE,
    Compression,
    Kind,
    import_zstandard,
    is_seekable,
)
from repro.archive.tarformat import name_problem
from repro.bundle.layout import MANIFEST_NAMES, TRAILING_MEMBERS
from repro.errors import InputError, UsageError
from repro.hashing import BackgroundSha256

DEFAULT_GZ_LEVEL = 6
DEFAULT_ZST_LEVEL = 3


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


SortKey = tuple[int, tuple[bytes, ...]]


def member_order(rel: str, trailing: Sequence[str] = TRAILING_MEMBERS) -> SortKey:
    """The canonical order of members: by path components, then the `trailing` members
    (made from the digests of the others: the lock files that list the vault wheels',
    the SBOM) in their order, the manifest last. `trailing` is the current format's;
    `repro.bundle.layout.trailing_members` gives an older format's."""
    parts = tuple(part.encode("utf-8") for part in rel.split("/"))
    if rel in MANIFEST_NAMES:
        return len(trailing) + 1, parts
    if rel in trailing:
        return 1 + trailing.index(rel), ()
    return 0, parts


# Members at least this large are hashed by a second thread while they are written.
BACKGROUND_HASH_BYTES = 4 << 20


def _hasher(size: int) -> BackgroundSha256 | hashlib._Hash:
    return BackgroundSha256() if size >= BACKGROUND_HASH_BYTES else hashlib.sha256()


class DeterministicTarWriter:
    """Writes a bundle archive whose bytes depend only on the members added.

    Members must be added in canonical order (`member_order` with `trailing`: the
    current format's unless an older one is written); parent directories are
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
        trailing: Sequence[str] = TRAILING_MEMBERS,
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
            import_zstandard()
            # A zstd frame states its content size up front, which is only known at the
            # end: the tar goes to a temporary file first and is compressed on close.
            self._spool = tempfile.TemporaryFile(prefix="repro-tar-")  # noqa: SIM115
            self._sink = self._spool
        else:
            raise UsageError(f"unknown compression {compression!r}; use none, gz or zst")
        self._trailing = tuple(trailing)
        self._written = 0
        self._last: SortKey | None = None
        self._kinds: dict[str, Kind] = {}
        self._folded: dict[str, str] = {}
        self._digests: dict[str, str] = {}
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
        pieces: Iterable[bytes | bytearray],
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
        if not is_seekable(self._out):
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
        if self._unsettled:
            self._abort()
            unsettled = ", ".join(sorted(self._unsettled))
            raise InputError(f"archive {self._top}: never given its digest: {unsettled}")
        self._write(tarformat.end_of_archive(self._written))
        if self._gzip is not None:
            self._gzip.close()
        if self._spool is not None:
            zstandard = import_zstandard()
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
        # a trailing member's place is its rank, whether its parent came before or not
        key = self._sort_key(rel)
        first = key if key[0] else self._sort_key(parents[0] if parents else rel)
        if self._last is not None and first <= self._last:
            raise InputError(
                f"cannot add {rel!r} to archive {self._top}: out of canonical order",
                hint="add members sorted by path components (UTF-8 bytes), then "
                f"{', '.join(self._trailing)}, MANIFEST.sha256 and MANIFEST.sha256.sig last",
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
        self._last = self._sort_key(rel)

    def _sort_key(self, rel: str) -> SortKey:
        return member_order(rel, self._trailing)

    def _emit_header(self, path: str, *, directory: bool, mode: int, size: int) -> None:
        self._write(
            tarformat.encode_entry(
                path, directory=directory, mode=mode, size=size, mtime=self._mtime
            )
        )

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        try:
            self._sink.write(data)
        except OSError as exc:
            self._state = "failed"
            raise InputError(f"cannot write archive {self._top}: {exc.strerror}") from exc
        self._written += len(data)


def write_directory(
    root: Path,
    out: BinaryIO,
    *,
    top: str,
    mtime: int,
    compression: Compression = "none",
    trailing: Sequence[str] = TRAILING_MEMBERS,
) -> Mapping[str, str]:
    """Archive every regular file under `root` (an unpacked bundle) in canonical order;
    `trailing` as for `member_order` (an older format's for a bundle of that format)."""
    files: list[str] = []
    for directory, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(directory)
        for filename in filenames:
            path = base / filename
            if path.is_symlink() or not path.is_file():
                raise InputError(f"{path}: not a regular file; a bundle holds only files")
            files.append(path.relative_to(root).as_posix())
    with DeterministicTarWriter(
        out, top=top, mtime=mtime, compression=compression, trailing=trailing
    ) as writer:
        for rel in sorted(files, key=lambda rel: member_order(rel, trailing)):
            writer.add_file(rel, root / rel)
        return dict(writer.digests)
