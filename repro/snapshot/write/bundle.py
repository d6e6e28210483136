"""Writing a pack's members into the bundle archive, in canonical order, manifest last.

Into a bundle file, each vault wheel is laid out as its tar header and a hole of its
planned size, and a pool of threads writes the wheels into their holes, largest first,
hashing each as it is written (`repro.archive.memberfill`): every installed file is read once
here. Into a pipe or through gzip, the wheels are streamed in order, hashed as they pass
into the tar; threads read the wheels' bytes ahead of the tar writer, a bounded number
of segments at a time (`repro.archive.readahead`). Either way no wheel is read before
the writing: the lock files that list the wheels' sha256 (env/pylock.toml,
env/vault.toml) are `Generated` members, which sort after every other member (format
5, docs/bundle-format.md section 3.2) and are rendered from the digests the writing
took. Both give the same bytes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

from repro.archive.common import Compression
from repro.archive.directio import (
    DirectWriter,
    direct_io_setting,
    libc_function,
    open_direct,
    preallocate,
)
from repro.archive.memberfill import FileRun, Hole, Piece, fill_holes
from repro.archive.readahead import Ahead, ReadAhead
from repro.archive.writer import DeterministicTarWriter, member_order
from repro.bundle.manifest import MANIFEST_NAME, ProgressSink, format_manifest
from repro.bundle.signing import SIGNATURE_NAME, sign_manifest
from repro.errors import InputError
from repro.hashing import default_jobs
from repro.wheel.zipwriter import ZipPlan


@dataclass(frozen=True)
class Streamed:
    """A vault wheel: a rebuilt wheel's plan (streamed from the installed files), or a
    wheel file. Its sha256 is taken as it is written; `sha256`, where it was taken
    ahead (a delta decides by it what to carry), is what the bytes written must give."""

    plan: ZipPlan | None
    size: int
    sha256: str | None = None
    path: Path | None = None


@dataclass(frozen=True)
class Generated:
    """A member made once the others are written (a trailing member in canonical
    order: the lock files that list the vault wheels' sha256, the SBOM): `render` gets
    the sha256 of every member written (and of those the manifest lists that the
    archive does not carry) and the bytes of the generated members made before it."""

    render: Callable[[Mapping[str, str], Mapping[str, bytes]], bytes]


Content = Path | bytes | Streamed | Generated


def can_leave_holes(output: Path | None, compression: Compression) -> bool:
    """Whether `write_bundle` writes the vault wheels into holes that threads fill
    (`repro.archive.memberfill`, which also checks the files whose sha256 the scan left
    to the writing): a file, not through gzip."""
    return output is not None and compression != "gz"


@dataclass
class Members:
    """Bundle-relative path -> a file to stream, bytes to write or a planned wheel."""

    items: dict[str, Content] = field(default_factory=dict)
    executable: set[str] = field(default_factory=set)

    def add(self, rel: str, content: Content, *, executable: bool = False) -> None:
        if rel in self.items:
            raise InputError(f"two inputs would land at {rel} in the bundle")
        self.items[rel] = content
        if executable:
            self.executable.add(rel)

    def newest_mtime(self, *, generated: Sequence[Path] = ()) -> int:
        """The newest mtime of the source files; files the pack made itself (under
        `generated`) do not count, or every pack would get a new timestamp."""
        times = [
            int(p.stat().st_mtime)
            for p in self.items.values()
            if isinstance(p, Path) and not any(p.is_relative_to(g) for g in generated)
        ]
        return max(times, default=0)


SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h: start writeback of dirty pages, do not wait


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """glibc's sync_file_range (Linux), or None where there is none."""
    return libc_function(
        "sync_file_range", [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    )


class Writeback:
    """While a bundle is written, asks the kernel every `interval` seconds to start writing
    what was added to the file since, so the disk works while the pack still reads and
    hashes, and the fsync at the end finds little left (it took as long as the writing
    itself on a host whose page cache holds a whole bundle: nothing reached the disk
    before it)."""

    def __init__(self, fd: int, interval: float = 0.25) -> None:
        self.started = 0  # bytes handed to the kernel's writeback so far
        self._fd = fd
        self._interval = interval
        self._function = _sync_file_range()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="repro-writeback", daemon=True)
        if self._function is not None:
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        assert self._function is not None
        while not self._stop.wait(self._interval):
            try:
                size = os.fstat(self._fd).st_size
            except OSError:
                return
            if size > self.started:
                if self._function(
                    self._fd, self.started, size - self.started, SYNC_FILE_RANGE_WRITE
                ):
                    return  # not supported here: the fsync at the end does it all
                self.started = size


@contextlib.contextmanager
def partial_output(output: Path) -> Iterator[BinaryIO]:
    """A temp file beside `output`, renamed over it only when everything was written
    (and made durable: fsync before the rename). Written past the page cache
    (`repro.archive.directio`) where the file system allows it, unless REPRO_DIRECT_IO=0; else
    through it, with writeback started as the file grows."""
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".partial", dir=output.parent)
    temp = Path(name)
    try:
        with os.fdopen(fd, "wb") as stream:
            direct = open_direct(temp) if direct_io_setting() is not False else None
            if direct is not None:
                with DirectWriter(stream.fileno(), direct) as writer:
                    yield cast(BinaryIO, writer)
            else:
                writeback = Writeback(stream.fileno())
                try:
                    yield stream
                    stream.flush()
                finally:
                    writeback.close()
            os.fsync(stream.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, output)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise


def stream_members(
    members: Members,
    out: BinaryIO,
    *,
    top: str,
    mtime: int,
    compression: Compression,
    sign: Path | None,
    jobs: int | None = None,
    progress: ProgressSink | None = None,
    listed: Mapping[str, str] | None = None,
) -> None:
    """Write `members` as the archive `top` into `out`; `progress` is told the files
    and bytes to come, then each member's size once its bytes are written (the
    manifest and signature, made at the end, count as they are added). `listed`: the
    digests of members the manifest lists and the archive does not carry (a delta's
    members taken from its base)."""
    sizes: dict[str, int] = {}
    if progress is not None:
        sizes = {rel: content_size(content) for rel, content in members.items.items()}
        progress.start(sum(sizes.values()), len(sizes))

    def advance(nbytes: int) -> None:
        if progress is not None:
            progress.advance(nbytes)

    with (
        DeterministicTarWriter(out, top=top, mtime=mtime, compression=compression) as writer,
        contextlib.ExitStack() as stack,
    ):
        target = writer.hole_target()
        ahead: ReadAhead | None = None
        if target is None:
            # no holes: the rebuilt wheels are read ahead of the writer, in its order
            ahead = stack.enter_context(
                ReadAhead(_read_ahead(members), jobs=jobs or default_jobs())
            )
        holes: list[Hole] = []
        generated: list[tuple[str, Generated]] = []
        for rel in sorted(members.items, key=member_order):
            content = members.items[rel]
            if isinstance(content, Generated):
                generated.append((rel, content))
                continue  # made from the others' digests once they are all written
            executable = rel in members.executable
            if isinstance(content, Path):
                writer.add_file(rel, content, executable=executable or None)
            elif isinstance(content, Streamed) and target is not None:
                offset = writer.add_hole(rel, content.size)
                holes.append(Hole(rel, offset, content.size, _pieces(content)))
                continue  # its bytes count once written into the hole
            elif isinstance(content, Streamed):
                _add_streamed(writer, rel, content, ahead)
            else:
                writer.add_bytes(rel, content, executable=executable)
            advance(sizes.get(rel, 0))
        if target is not None:
            fd, direct = target
            try:
                preallocate(fd, writer.tell())
            except OSError as exc:
                raise InputError(
                    f"cannot write archive {top}: {exc.strerror} ({writer.tell()} bytes)"
                ) from exc
            if isinstance(out, DirectWriter):
                out.trim()  # its spare buffers are idle from here to the end of the holes
            # closed before the writer: no hole is written once the file is thrown away
            filled = fill_holes(fd, direct, holes, jobs=jobs or default_jobs())
            try:
                with contextlib.closing(filled):
                    for rel, digest in filled:
                        content = members.items[rel]
                        assert isinstance(content, Streamed)
                        if content.sha256 is not None and digest != content.sha256:
                            raise _changed_wheel(content, rel)
                        writer.settle(rel, digest)
                        advance(content.size)
            except OSError as exc:
                raise InputError(f"cannot write archive {top}: {exc.strerror or exc}") from exc
        made: dict[str, bytes] = {}
        for rel, content in generated:
            data = content.render({**writer.digests, **(listed or {})}, made)
            writer.add_bytes(rel, data, executable=rel in members.executable)
            made[rel] = data
            advance(len(data))
        manifest = format_manifest({**writer.digests, **(listed or {})}.items())
        writer.add_bytes(MANIFEST_NAME, manifest)
        advance(len(manifest))
        if sign is not None:
            signature = sign_manifest(manifest, sign)
            writer.add_bytes(SIGNATURE_NAME, signature)
            advance(len(signature))


def content_size(content: Content) -> int:
    """A member's size before it is written (a file's as it is now)."""
    if isinstance(content, Path):
        return content.stat().st_size
    if isinstance(content, Streamed):
        return content.size
    if isinstance(content, Generated):
        return 0  # counted once made, as the manifest is
    return len(content)


def _read_ahead(members: Members) -> list[Ahead]:
    """The rebuilt wheels among `members`, in the order they are written."""
    return [
        Ahead(rel, content.size, _pieces(content))
        for rel in sorted(members.items, key=member_order)
        if isinstance(content := members.items[rel], Streamed) and content.plan is not None
    ]


def _pieces(content: Streamed) -> Iterator[Piece]:
    """A vault wheel's bytes for `fill_holes`: its plan's, or its file's."""
    if content.plan is None:
        assert content.path is not None
        yield FileRun(content.path, content.size)
        return
    for piece in content.plan.pieces():
        if isinstance(piece, bytes):
            yield piece
        else:
            assert piece.source is not None
            pending = piece.sha256 if piece.sha256_pending else None
            yield FileRun(piece.source, piece.size, piece.mtime_ns, piece.crc32, pending)


def _changed_wheel(content: Streamed, rel: str) -> InputError:
    return InputError(
        f"{content.path or rel} changed while it was packed (its sha256 is not the one "
        "taken before the writing)",
        hint="stop whatever writes to it and pack again",
    )


def _add_streamed(
    writer: DeterministicTarWriter, rel: str, content: Streamed, ahead: ReadAhead | None
) -> str:
    """Add a vault wheel through the tar stream (a pipe or gzip), hashed as it passes;
    return its sha256."""
    if content.plan is not None:
        assert ahead is not None
        digest = writer.add_stream(rel, content.size, ahead.chunks(rel))
    else:
        assert content.path is not None
        digest = writer.add_file(rel, content.path)
    if content.sha256 is not None and digest != content.sha256:
        raise _changed_wheel(content, rel)
    return digest


def write_bundle(
    members: Members,
    output: Path | None,
    *,
    top: str,
    mtime: int,
    compression: Compression,
    sign: Path | None = None,
    jobs: int | None = None,
    progress: ProgressSink | None = None,
    listed: Mapping[str, str] | None = None,
) -> int:
    """Write the archive to `output` (stdout when None); return its size in bytes.
    `listed`: see `stream_members`."""

    def write(out: BinaryIO) -> None:
        stream_members(
            members,
            out,
            top=top,
            mtime=mtime,
            compression=compression,
            sign=sign,
            jobs=jobs,
            progress=progress,
            listed=listed,
        )

    if output is None:
        write(sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return 0
    with partial_output(output) as stream:
        write(stream)
    return output.stat().st_size
