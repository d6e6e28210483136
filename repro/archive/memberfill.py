"""Writing bundle members in parallel, each at its place in the bundle file, hashed as it
is written: pack's counterpart of `repro.archive.membercopy`.

The tar writer lays a vault wheel out as its header and a hole of the wheel's planned
size (`DeterministicTarWriter.add_hole`); a pool of threads then fills the holes, largest
first. Each thread reads the installed files straight into a page-aligned buffer,
checks each file's CRC-32 against the plan (the ZIP headers state it), hashes the
buffer and writes it at its offset (past the page cache where the bundle is
written so, `repro.archive.directio.write_span`): every byte is read once and hashed once on its
way into the bundle, and the wheels are hashed on as many cores as there are threads
(one SHA-256 stream per wheel, in the tar writer's thread, had bound pack to one core).
hashlib, preadv and pwrite release the interpreter lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import queue
import threading
from collections.abc import Generator, Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from repro.archive.directio import ALIGN, write_span
from repro.crc import crc32
from repro.errors import FillStopped, InputError, NotAsRecorded

# 1 MiB: as fast as 2 and 4 MiB on both machines measured, alternated, and less peak RSS
# (bench/README.md, "Design choices and their measurements")
BUFFER_SIZE = 1 << 20
MAX_THREADS = 4  # threads that read and hash: the writing binds (bench/README.md)
WRITERS = 2  # threads that write


@dataclass(frozen=True)
class FileRun:
    """All `size` bytes of the file `path`. `mtime_ns` and `crc32`, when known, are what
    the pack saw when it planned the member (the ZIP header states the CRC-32): a file
    whose modification time or bytes differ stops the pack."""

    path: str | Path
    size: int
    mtime_ns: int | None = None
    crc32: int | None = None
    sha256: str | None = None  # checked too: the scan took it from RECORD unread


Piece = bytes | FileRun


@dataclass(frozen=True)
class Hole:
    """A member's bytes, `pieces` in order, to be written at `offset` (`size` bytes)."""

    name: str  # for messages: the member's path in the bundle
    offset: int
    size: int
    pieces: Iterable[Piece]


class _Writes:
    """Buffers handed to `WRITERS` threads that write them (`write_span`) and give them
    back: the disk works while the filling threads read and hash the next bytes. Two
    writes in flight reached the disk's speed; more cost system time (bench/README.md)."""

    def __init__(self, fd: int, direct: int | None, buffers: int, stop: threading.Event) -> None:
        self.error: BaseException | None = None
        self._fd = fd
        self._direct = direct
        self._stop = stop
        self._free: queue.SimpleQueue[mmap.mmap] = queue.SimpleQueue()
        self._all = [mmap.mmap(-1, BUFFER_SIZE) for _ in range(buffers)]
        for buffer in self._all:
            self._free.put(buffer)
        self._queue: queue.SimpleQueue[tuple[mmap.mmap, int, int, int] | None]
        self._queue = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._run, name=f"repro-fill-write-{n}", daemon=True)
            for n in range(WRITERS)
        ]
        for thread in self._threads:
            thread.start()

    def buffer(self) -> mmap.mmap:
        buffer = self._free.get()
        if self._stop.is_set():
            self._free.put(buffer)
            raise FillStopped("another writer of this extraction failed")
        return buffer

    def write(self, buffer: mmap.mmap, base: int, start: int, end: int) -> None:
        self._queue.put((buffer, base, start, end))

    def close(self) -> None:
        """Wait for every write; the first error is in `error`."""
        if not self._threads:
            return
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        self._threads = []
        for buffer in self._all:
            # a failed filler's traceback may still hold a view of it: freed with it
            with contextlib.suppress(BufferError):
                buffer.close()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            buffer, base, start, end = item
            try:
                if not self._stop.is_set():
                    view = memoryview(buffer)
                    self._direct = write_span(self._fd, self._direct, view, base, start, end)
                    view.release()
            except BaseException as exc:
                self.error = self.error or exc
                self._stop.set()
            finally:
                self._free.put(buffer)


def fill_holes(
    fd: int, direct: int | None, holes: Sequence[Hole], *, jobs: int
) -> Generator[tuple[str, str], None, None]:
    """Write every hole (largest first, `jobs` threads at most) and yield (name, sha256)
    as each is written. The first error stops the others at their next buffer and is
    raised; the file is then half written, and the caller throws it away."""
    if not holes:
        return
    threads = max(1, min(jobs, MAX_THREADS, len(holes)))
    stop = threading.Event()
    writes = _Writes(fd, direct, threads + WRITERS, stop)
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="repro-fill")
    try:
        futures: dict[Future[str], Hole] = {
            pool.submit(_fill, hole, writes): hole
            for hole in sorted(holes, key=lambda h: (-h.size, h.offset))
        }
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            errors = [e for e in (f.exception() for f in done) if e is not None]
            if errors:
                stop.set()
                for error in errors:
                    if not isinstance(error, FillStopped):
                        raise error
                # only stopped fillers: a write failed (the disk, the descriptor)
                writes.close()
                raise writes.error or errors[0]
            for future in done:
                yield futures[future].name, future.result()
        writes.close()
        if writes.error is not None:
            raise writes.error
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        writes.close()


def _fill(hole: Hole, writes: _Writes) -> str:
    buffer = writes.buffer()
    view = memoryview(buffer)
    digest = hashlib.sha256()
    end = hole.offset + hole.size
    base = hole.offset - hole.offset % ALIGN  # file offset of view[0]
    lead = used = hole.offset - base  # view[lead:used] holds bytes not yet written
    written = 0  # bytes of the member handed to the buffer

    def flush(last: bool = False) -> None:
        nonlocal buffer, view, base, lead, used
        if base + used > end:
            raise InputError(f"{hole.name}: more bytes produced than the {hole.size} planned")
        digest.update(view[lead:used])
        view.release()
        writes.write(buffer, base, lead, used)
        base += used
        lead = used = 0
        if not last:
            buffer = writes.buffer()
            view = memoryview(buffer)

    for piece in hole.pieces:
        if isinstance(piece, bytes):
            data = memoryview(piece)
            while data:
                room = min(len(data), len(view) - used)
                view[used : used + room] = data[:room]
                used += room
                data = data[room:]
                if used == len(view):
                    flush()
            written += len(piece)
            continue
        source = open_checked(piece)
        checksum = 0
        own = hashlib.sha256() if piece.sha256 is not None else None
        try:
            remaining = piece.size
            while remaining:
                want = min(remaining, len(view) - used)
                try:
                    count = os.readv(source, [view[used : used + want]])
                except OSError as exc:
                    raise InputError(f"cannot read {piece.path}: {exc.strerror}") from exc
                if count == 0:
                    raise changed(piece)
                if piece.crc32 is not None:
                    checksum = crc32(view[used : used + count], checksum)
                if own is not None:
                    own.update(view[used : used + count])
                used += count
                remaining -= count
                if used == len(view):
                    flush()
        finally:
            os.close(source)
        if piece.crc32 is not None and checksum != piece.crc32:
            raise changed(piece, "its CRC-32 is not the one planned")
        if own is not None and own.hexdigest() != piece.sha256:
            raise not_as_recorded(piece.path)
        written += piece.size
    if written != hole.size:
        raise InputError(f"{hole.name}: {written} bytes produced where {hole.size} were planned")
    flush(last=True)
    return digest.hexdigest()


def open_checked(piece: FileRun) -> int:
    """The file of `piece`, opened; refused if its size or modification time is not the
    planned one."""
    try:
        source = os.open(piece.path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(f"cannot read {piece.path}: {exc.strerror}") from exc
    info = os.fstat(source)
    if info.st_size != piece.size or (
        piece.mtime_ns is not None and info.st_mtime_ns != piece.mtime_ns
    ):
        os.close(source)
        raise changed(piece)
    return source


def not_as_recorded(path: Path | str) -> NotAsRecorded:
    return NotAsRecorded(f"{path} differs from its RECORD hash (its size is the recorded one)")


def changed(piece: FileRun, how: str = "") -> InputError:
    return InputError(
        f"{piece.path} changed while it was packed ({how or f'planned {piece.size} bytes'})",
        hint="stop whatever writes into the environment and pack again",
    )
