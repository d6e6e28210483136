"""Writing a large new file past the page cache (O_DIRECT), for bundle archives (see
`direct_io_setting` for when).

A bundle is gigabytes written once and not read back soon. Through the page cache, every
byte is copied into it and then written back by the kernel; on the machines measured that
cost more system time than the pack's hashing, and it evicts the environment being packed
from the cache. With O_DIRECT the device reads the bytes straight from aligned buffers,
for a small part of that system time (bench/README.md, "Design choices and their
measurements", has the figures).

`DirectWriter` fills page-aligned buffers and hands them to a few threads that write them,
each at its own offset (so the disk works while the caller reads and hashes the next
bytes, with several writes in flight: one synchronous write at a time left a fast NVMe
disk far below its speed). `skip` leaves a hole that other threads fill
(`write_span`, `repro.archive.memberfill`: the vault wheels, written in parallel). Partial pages
(the last one, those at a hole's edges, shared with the thread that fills it) go
through an ordinary descriptor of the same file, whole pages past the cache: no page is
written both ways at once. Bytes are only added at the end, never rewritten.
`preallocate` reserves the file's blocks first, so parallel direct writes do not
serialize on growing it. Where the file system refuses
O_DIRECT (tmpfs, some network file systems), `open_direct` returns None and the caller
writes as usual; a refusal at the first write switches the writer to ordinary writes.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os
import queue
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import cast

ALIGN = 4096  # buffer address, size and file offset of every O_DIRECT write
BUFFER_SIZE = 4 << 20
WRITERS = 4  # writes in flight at once
DEPTH = WRITERS + 2  # buffers in rotation: one filling, the others queued or being written


def direct_io_setting() -> bool | None:
    """REPRO_DIRECT_IO: 1 writes bundles (pack) and extracted members (unpack) past the
    page cache, 0 writes both through it; unset, each takes what measured faster.

    Pack writes past the cache: much faster on a small machine, where a buffered write
    costs more system time than the hashing, and no slower on a large one. Unpack writes
    through it: the installer reads the wheels back right away, from the cache.
    bench/README.md ("Design choices and their measurements") has the figures and runs."""
    value = os.environ.get("REPRO_DIRECT_IO", "")
    return True if value == "1" else False if value == "0" else None


def open_direct(path: Path) -> int | None:
    """An O_DIRECT write descriptor of the existing file `path`, or None where the
    platform or the file system has none."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_WRONLY | flag | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
            return None
        raise


class DirectWriter:
    """A write-only, seekable stream onto a new, empty file.

    `fd` is an ordinary descriptor of the file (kept open by the caller, who also makes
    the file durable with fsync after `close`); `direct` an O_DIRECT one from
    `open_direct`, which this writer closes. Seeking back and writing over bytes already
    written is allowed (it cannot grow the file); writing at the end appends.
    """

    def __init__(self, fd: int, direct: int, *, buffer_size: int = BUFFER_SIZE) -> None:
        if buffer_size % ALIGN:
            raise ValueError(f"buffer size {buffer_size} is not a multiple of {ALIGN}")
        self._fd = fd
        self._direct: int | None = direct
        self._size = buffer_size
        self._free: queue.Queue[mmap.mmap] = queue.Queue()
        self._spare = DEPTH - 1  # buffers not allocated yet: made when first needed
        # (buffer, file offset of its first byte, first and end index to write)
        self._full: queue.Queue[tuple[mmap.mmap, int, int, int] | None] = queue.Queue()
        self._buffer = mmap.mmap(-1, buffer_size)
        self._used = 0  # bytes in the current buffer
        self._base = 0  # file offset of the current buffer's first byte (aligned)
        self._lead = 0  # leading bytes of the current buffer that belong to a hole
        self._error: OSError | None = None
        self._refused = False  # the file system refused an O_DIRECT write: use the cache
        self._closed = False
        self._threads = [
            threading.Thread(target=self._drain, name=f"repro-direct-{n}", daemon=True)
            for n in range(WRITERS)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def direct(self) -> bool:
        """Whether writes still bypass the page cache (False after a refusal)."""
        return self._direct is not None and not self._refused

    # -- the stream interface the tar writer uses ------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self._check()
        view = memoryview(data).cast("B")
        count = len(view)
        while view:
            room = self._size - self._used
            piece = view[:room]
            self._buffer[self._used : self._used + len(piece)] = piece
            self._used += len(piece)
            view = view[len(piece) :]
            if self._used == self._size:
                self._hand_off()
        return count

    def tell(self) -> int:
        return self._base + self._used

    def skip(self, count: int) -> None:
        """Leave the next `count` bytes at the end to another writer (`write_span` from
        another thread, with `fd` and `direct_fd`): a member written in parallel. The
        partial pages at the hole's edges are written through the ordinary descriptor
        by both sides, so no page is written both ways."""
        self._check()
        end = self._base + self._used
        if count < 0:
            raise OSError(errno.EINVAL, f"cannot leave a hole of {count} bytes")
        if count == 0:
            return
        if self._used > self._lead:
            self._full.put((self._buffer, self._base, self._lead, self._used))
            self._buffer = self._next_buffer()
        target = end + count
        self._base = target - target % ALIGN
        self._lead = self._used = target - self._base

    def trim(self) -> None:
        """Wait for the buffers handed off and unmap them (the current one stays): the
        stream goes idle while other writers fill its holes, which bring their own
        buffers. A later write maps new ones again as it needs them."""
        self._full.join()
        self._check()
        while True:
            try:
                buffer = self._free.get_nowait()
            except queue.Empty:
                return
            buffer.close()
            self._spare += 1

    @property
    def direct_fd(self) -> int | None:
        """The O_DIRECT descriptor, for writers of holes; None after a refusal."""
        return self._direct if self.direct else None

    def seekable(self) -> bool:
        """A file: holes can be left in it (it never seeks back)."""
        return True

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        self._check()

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        """Write what is buffered and wait for it; raise the first write error."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._error is None and self._used > self._lead:
                # the unaligned tail goes through the ordinary descriptor (write_span)
                self._full.put((self._buffer, self._base, self._lead, self._used))
        finally:
            self._release()
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """Stop without writing what is still buffered (the file is being thrown away)."""
        if self._closed:
            return
        self._closed = True
        self._release()

    def __enter__(self) -> DirectWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.abort()

    # -- internals -------------------------------------------------------------------

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise ValueError("write to a closed DirectWriter")

    def _hand_off(self) -> None:
        self._full.put((self._buffer, self._base, self._lead, self._used))
        self._base += self._used
        self._used = self._lead = 0
        self._buffer = self._next_buffer()

    def _next_buffer(self) -> mmap.mmap:
        """A free buffer; a new one while fewer than DEPTH exist and none is free (a
        pack whose wheels go into holes writes little here: two or three suffice)."""
        try:
            buffer = self._free.get_nowait()
        except queue.Empty:
            if self._spare:
                self._spare -= 1
                return mmap.mmap(-1, self._size)
            buffer = self._free.get()
        self._check()
        return buffer

    def _release(self) -> None:
        """Wait for the writer threads and close the O_DIRECT descriptor."""
        self._finish_thread()
        if self._direct is not None:
            os.close(self._direct)
            self._direct = None

    def _finish_thread(self) -> None:
        alive = [thread for thread in self._threads if thread.is_alive()]
        for _ in alive:
            self._full.put(None)
        for thread in alive:
            thread.join()

    def _drain(self) -> None:
        while True:
            item = self._full.get()
            try:
                if item is None:
                    return
                buffer, base, start, end = item
                if self._error is None:
                    try:
                        direct = write_span(
                            self._fd, self.direct_fd, memoryview(buffer), base, start, end
                        )
                        if direct is None and self._direct is not None:
                            # accepted at open, refused at a write: the cache from now on
                            self._refused = True
                    except OSError as exc:
                        self._error = exc
                self._free.put(buffer)
            finally:
                self._full.task_done()


def write_span(
    fd: int, direct: int | None, buffer: memoryview, base: int, start: int, end: int
) -> int | None:
    """Write `buffer[start:end]` at file offset `base + start`; `buffer` is page-aligned
    and its first byte belongs at the aligned offset `base`. The whole pages go through
    `direct` when there is one, the partial pages at either edge through `fd`: a partial
    page is shared with whoever writes the bytes beside it (the next member, a hole's
    writer, the unaligned end of the file), and a page written both ways could lose one
    side's bytes. Returns `direct`, or None once the file system refused an O_DIRECT
    write (everything went through `fd` then)."""
    if start >= end:
        return direct
    head = min(end, -(-start // ALIGN) * ALIGN)
    tail = max(head, end - end % ALIGN)
    if head > start:
        pwrite_all(fd, buffer[start:head], base + start)
    if tail > head:
        if direct is not None:
            try:
                pwrite_all(direct, buffer[head:tail], base + head)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                direct = None
        if direct is None:
            pwrite_all(fd, buffer[head:tail], base + head)
    if end > tail:
        pwrite_all(fd, buffer[tail:end], base + tail)
    return direct


def preallocate(fd: int, size: int) -> None:
    """Reserve the first `size` bytes of the file on disk (fallocate, Linux): parallel
    O_DIRECT writes into allocated blocks do not serialize on growing the file (measured
    faster: bench/README.md), and a disk too small is found
    before gigabytes were written. Nothing where the platform or file system has no
    fallocate; ENOSPC is raised."""
    function = _fallocate()
    if function is None or size <= 0:
        return
    if function(fd, 0, 0, size) != 0:
        err = ctypes.get_errno()
        if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return
        raise OSError(err, os.strerror(err))


def libc_function(
    name: str, argtypes: list[type[ctypes._SimpleCData[int]]]
) -> Callable[[int, int, int, int], int] | None:
    """glibc's `name` (a Linux file call of four integer arguments returning an int, errno
    kept), or None where the platform or the C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return cast(Callable[[int, int, int, int], int], function)


@functools.cache
def _fallocate() -> Callable[[int, int, int, int], int] | None:
    return libc_function("fallocate", [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64])


def pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while view:
        done = os.pwrite(fd, view, offset)
        if done <= 0:
            raise OSError(errno.EIO, "the file system wrote nothing")
        view = view[done:]
        offset += done
