"""Copying members out of an uncompressed archive file (or files out of a bundle
directory), several at a time, hashing them.

An unpack extracts the bundle into staging and then checks every file against the
manifest. Extracting with copy_file_range and hashing afterwards read each byte twice.
Here each member is read once with `preadv` into a page-aligned buffer, hashed from it,
and written from the same buffer (with REPRO_DIRECT_IO=1 past the page cache: O_DIRECT,
switched on and off on the member's own descriptor with fcntl, the unaligned last block
through the cache). Members are spread over a few threads: hashlib, `preadv` and
`pwrite` release the GIL. The digests of the bytes written are handed to the manifest
check, which then need not read them back.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import mmap
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType

from repro.archive.directio import ALIGN, direct_io_setting, pwrite_all
from repro.errors import ArchiveError, VerificationError
from repro.hashing import default_jobs

COPY_BUFFER = 4 << 20
MAX_JOBS = 8  # buffers are per thread: at most MAX_JOBS * COPY_BUFFER of memory
DIRECT_MIN = 1 << 20  # smaller members are written through the page cache
_O_DIRECT = getattr(os, "O_DIRECT", 0)


def direct_io_enabled() -> bool:
    return bool(_O_DIRECT) and direct_io_setting() is True


class MemberCopier:
    """Copies (offset, size) ranges of the archive file `source_fd` (or of a file of the
    member's own, `submit(source_fd=...)`) into member files opened by the caller, `jobs`
    at a time; `finish` returns name -> sha256 of what was written. Use as a context
    manager: leaving it on an error waits for the copies in flight and closes every
    descriptor it was given."""

    def __init__(
        self,
        source_fd: int,
        source: str,
        jobs: int | None = None,
        *,
        on_copied: Callable[[int], None] | None = None,
    ) -> None:
        self._source_fd = source_fd
        self._on_copied = on_copied
        self._source = source
        self._jobs = max(1, min(jobs or default_jobs(), MAX_JOBS))
        self._pool = ThreadPoolExecutor(self._jobs, thread_name_prefix="repro-extract")
        self._pending: list[tuple[str, tuple[int, ...], int, Future[str]]] = []
        self._digests: dict[str, str] = {}
        self._local = threading.local()
        self._direct = direct_io_enabled()

    def __enter__(self) -> MemberCopier:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._abort()
        self._pool.shutdown(wait=True)

    def submit(
        self, name: str, out_fd: int, offset: int, size: int, *, source_fd: int | None = None
    ) -> None:
        """Copy `size` bytes at `offset` of the archive, or of `source_fd` when given,
        into `out_fd`; this copier closes `out_fd` and `source_fd`."""
        fds = (out_fd,) if source_fd is None else (out_fd, source_fd)
        future = self._pool.submit(self._copy, name, fds, offset, size)
        self._pending.append((name, fds, size, future))
        # bounded: at most a few members (and their descriptors) wait
        while len(self._pending) > 2 * self._jobs:
            self._collect(self._pending.pop(0))

    def finish(self) -> dict[str, str]:
        while self._pending:
            self._collect(self._pending.pop(0))
        return self._digests

    def _collect(self, item: tuple[str, tuple[int, ...], int, Future[str]]) -> None:
        name, _fd, size, future = item
        self._digests[name] = future.result()
        if self._on_copied is not None:
            self._on_copied(size)

    def _abort(self) -> None:
        for _name, fds, _size, future in self._pending:
            if future.cancel():
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
        for _name, _fd, _size, future in self._pending:
            if not future.cancelled():
                with contextlib.suppress(BaseException):
                    future.result()
        self._pending.clear()

    def _buffer(self) -> mmap.mmap:
        buffer: mmap.mmap | None = getattr(self._local, "buffer", None)
        if buffer is None:
            buffer = mmap.mmap(-1, COPY_BUFFER)
            self._local.buffer = buffer
        return buffer

    def _copy(self, name: str, fds: tuple[int, ...], offset: int, size: int) -> str:
        try:
            return self._copy_open(name, fds, offset, size)
        finally:
            for fd in fds:
                os.close(fd)

    def _copy_open(self, name: str, fds: tuple[int, ...], offset: int, size: int) -> str:
        out_fd, source_fd = fds[0], fds[1] if len(fds) > 1 else self._source_fd
        digest = hashlib.sha256()
        view = memoryview(self._buffer())
        direct = self._direct and size >= DIRECT_MIN and _set_direct(out_fd, True)
        done = 0
        while done < size:
            count = os.preadv(source_fd, [view[: min(len(view), size - done)]], offset)
            if not count and len(fds) > 1:
                raise VerificationError(
                    f"{self._source}/{name}: the file became shorter while it was copied "
                    "(something is changing it)"
                )
            if not count:
                raise ArchiveError(
                    f"{self._source}: archive is truncated: it ends inside member {name!r}"
                )
            data = view[:count]
            digest.update(data)
            if direct and count % ALIGN:
                # the last, unaligned block (or a short read): through the cache
                direct = _set_direct(out_fd, False)
            try:
                pwrite_all(out_fd, data, done)
            except OSError as exc:
                if not direct or exc.errno != errno.EINVAL:
                    raise
                # O_DIRECT taken by fcntl, refused by the write: through the cache
                direct = _set_direct(out_fd, False)
                pwrite_all(out_fd, data, done)
            offset += count
            done += count
        return digest.hexdigest()


def _set_direct(fd: int, on: bool) -> bool:
    """Switch O_DIRECT on or off for `fd`; return whether it is on now (False also where
    the file system refuses it)."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | _O_DIRECT if on else flags & ~_O_DIRECT)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
            return False
        raise
    return on
