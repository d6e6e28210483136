"""Members' bytes read ahead of a tar stream by threads: pack's counterpart of
`repro.archive.memberfill` where the bundle goes to a pipe or through gzip.

A stream has no holes to fill out of order: the tar writer emits each vault wheel's
bytes in order, from one thread. Reading the installed files in that same thread made it
open, read and close every file between two writes, so the pipe stood still while it
read. Here each member's pieces are cut into segments of about `SEGMENT` bytes (a large
file into several), a pool of threads reads the segments into buffers (`os.preadv`
releases the interpreter lock), and the writer takes them in order. At most `window`
segments are read or waiting at any time, so the memory held is bounded by
`window * SEGMENT` (plus a piece of bytes larger than a segment) whatever the size of
the bundle, and the pool reads the next wheels while the current one is written.

Each file is checked as `fill_holes` checks it: its size and modification time when
each of its segments opens it, its CRC-32 (the ZIP headers state it) and, where the
scan took its sha256 from RECORD unread, its sha256, both in order in the writer's
thread, which sees the file's bytes in order.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType

from repro.archive.memberfill import FileRun, Piece, changed, not_as_recorded, open_checked
from repro.crc import crc32
from repro.errors import InputError

SEGMENT = 1 << 20  # as memberfill's buffers: bench/README.md
MAX_THREADS = 4  # as memberfill's fillers: the reader of the stream binds past that
SEGMENTS_PER_THREAD = 4  # read ahead of the writer: enough to keep every thread busy


@dataclass(frozen=True)
class Ahead:
    """A member whose `size` bytes are `pieces`, in order."""

    name: str  # for messages: the member's path in the bundle
    size: int
    pieces: Iterable[Piece]


@dataclass(frozen=True, slots=True)
class _Slice:
    """`length` bytes of the file of `run`, from `offset`."""

    run: FileRun
    offset: int
    length: int


@dataclass(frozen=True)
class _Segment:
    member: int  # index into the members
    parts: tuple[bytes | _Slice, ...]
    size: int
    last: bool  # the member's last segment (perhaps empty)


def _segments(members: Sequence[Ahead]) -> Iterator[_Segment]:
    """Every member's pieces cut into segments of about SEGMENT bytes, in order; each
    member ends with a segment marked `last`. A segment never spans two members."""
    for index, member in enumerate(members):
        parts: list[bytes | _Slice] = []
        size = 0
        for piece in member.pieces:
            if isinstance(piece, bytes):
                parts.append(piece)
                size += len(piece)
            elif piece.size == 0:
                parts.append(_Slice(piece, 0, 0))  # opened all the same: checked
            else:
                offset = 0
                while offset < piece.size:
                    take = min(SEGMENT - size, piece.size - offset)
                    parts.append(_Slice(piece, offset, take))
                    size += take
                    offset += take
                    if size >= SEGMENT:
                        yield _Segment(index, tuple(parts), size, last=False)
                        parts, size = [], 0
            if size >= SEGMENT:
                yield _Segment(index, tuple(parts), size, last=False)
                parts, size = [], 0
        yield _Segment(index, tuple(parts), size, last=True)


def _read(segment: _Segment) -> bytearray:
    """A segment's bytes (a pool thread)."""
    buffer = bytearray(segment.size)
    view = memoryview(buffer)
    at = 0
    for part in segment.parts:
        if isinstance(part, bytes):
            view[at : at + len(part)] = part
            at += len(part)
            continue
        source = open_checked(part.run)
        try:
            done = 0
            while done < part.length:
                try:
                    count = os.preadv(
                        source, [view[at + done : at + part.length]], part.offset + done
                    )
                except OSError as exc:
                    raise InputError(f"cannot read {part.run.path}: {exc.strerror}") from exc
                if count == 0:
                    raise changed(part.run)
                done += count
        finally:
            os.close(source)
        at += part.length
    view.release()
    return buffer


class _FileCheck:
    """The CRC-32 (and the pending sha256) of the file being streamed, over its
    segments in order."""

    def __init__(self) -> None:
        self._crc = 0
        self._sha: hashlib._Hash | None = None

    def take(self, part: _Slice, data: memoryview) -> None:
        run = part.run
        if part.offset == 0:
            self._crc = 0
            self._sha = hashlib.sha256() if run.sha256 is not None else None
        if run.crc32 is not None:
            self._crc = crc32(data, self._crc)
        if self._sha is not None:
            self._sha.update(data)
        if part.offset + part.length < run.size:
            return
        if run.crc32 is not None and self._crc != run.crc32:
            raise changed(run, "its CRC-32 is not the one planned")
        if self._sha is not None and self._sha.hexdigest() != run.sha256:
            raise not_as_recorded(run.path)


class ReadAhead:
    """Reads `members` ahead on up to `jobs` threads (MAX_THREADS at most) from the
    moment it is entered; `chunks` gives each member's bytes, the members asked for in
    their order. The first error of a reading thread is raised by `chunks` when the
    writer reaches the segment it hit; leaving the context stops the threads."""

    def __init__(self, members: Sequence[Ahead], *, jobs: int) -> None:
        self._members = members
        self._threads = max(1, min(jobs, MAX_THREADS))
        self.window = self._threads * SEGMENTS_PER_THREAD
        self._segments = _segments(members)
        self._pending: deque[tuple[_Segment, Future[bytearray]]] = deque()
        self._pool: ThreadPoolExecutor | None = None
        self._next = 0  # the member `chunks` gives next
        self._check = _FileCheck()

    def __enter__(self) -> ReadAhead:
        self._pool = ThreadPoolExecutor(
            max_workers=self._threads, thread_name_prefix="repro-readahead"
        )
        self._top_up()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop reading: what was not started is cancelled, what runs is waited for."""
        for _, future in self._pending:
            future.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    @property
    def in_flight(self) -> int:
        """Segments being read or waiting for the writer (at most `window`)."""
        return len(self._pending)

    def chunks(self, name: str) -> Iterator[bytearray]:
        """The bytes of the member `name`, which must be the next one, in pieces."""
        index = self._next
        if index >= len(self._members) or self._members[index].name != name:
            raise InputError(f"{name}: not the next member read ahead")
        self._next += 1
        while True:
            if not self._pending:
                self._top_up()
            segment, future = self._pending.popleft()
            assert segment.member == index
            data = future.result()
            self._top_up()  # the pool reads on while this one is checked and written
            self._verify(segment, data)
            if data:
                yield data
            if segment.last:
                return

    def _top_up(self) -> None:
        if self._pool is None:
            raise InputError("reading ahead after the read-ahead was closed")
        while len(self._pending) < self.window:
            segment = next(self._segments, None)
            if segment is None:
                return
            self._pending.append((segment, self._pool.submit(_read, segment)))

    def _verify(self, segment: _Segment, data: bytearray) -> None:
        view = memoryview(data)
        at = 0
        for part in segment.parts:
            if isinstance(part, bytes):
                at += len(part)
                continue
            self._check.take(part, view[at : at + part.length])
            at += part.length
