"""Streaming and parallel SHA-256.

Over 400 lines for a reason: the one-file read, the thread pipeline and the worker
processes were tuned and measured together (batch sizes, the rows a worker sends back,
this module preloaded by name in each worker), and read best side by side.

Files are read in fixed-size chunks, so memory does not grow with file size.
hashlib releases the GIL while it hashes a buffer larger than 2 KiB, so a
thread pool scales across cores for large files; for the tens of thousands of
small files of a venv, per-task overhead dominates, so small files are batched
into tasks of roughly equal byte counts. On a host of many cores the batches of small
files go to worker processes: in one process each file's open, fstat, read and close
hand the interpreter lock around, and eight threads took much longer than eight
processes on a many-core host's venv of tens of thousands of files
(bench/gpu/scan_procs.py; figures in bench/README.md).
"""

from __future__ import annotations

import errno
import hashlib
import multiprocessing
import os
import queue
import signal
import stat
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import (
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    as_completed,
)
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from repro.crc import crc32
from repro.errors import UsageError

CHUNK_SIZE = 1 << 20
BATCH_BYTES = 32 << 20
BATCH_FILES = 256
MAX_DEFAULT_JOBS = 8
# Worker processes hash the small files when this many threads are asked for (on two
# cores the hashing, not the lock, binds: processes measured no faster there), once this
# many small files were submitted (a small scan does not pay for starting them); at
# most MAX_PROCESSES of them (each is a whole interpreter's memory: bench/README.md).
PROCESS_MIN_JOBS = 4
PROCESS_AFTER_FILES = 2048
MAX_PROCESSES = 4
PROCESSES_ENV = "REPRO_HASH_PROCESSES"  # 0: never; N: N processes from the first batch

ProgressCallback = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class HashResult:
    """The digest of one file, or why it could not be read."""

    path: str  # as given (a str: a Path per file costs the hashing threads, measured)
    digest: str | None
    size: int
    error: str | None = None
    crc32: int | None = None  # with `crc32=True`: what a stored ZIP member of it needs
    mtime_ns: int = 0
    mode: int = 0
    # `file_identity` of the file as fstat found it before the read
    identity: bytes | None = None
    # read for its CRC-32 only; `digest` is what RECORD says, checked where it is written
    sha_deferred: bool = False


IDENTITY = struct.Struct("<QQqqq")  # dev, ino, size, mtime_ns, ctime_ns


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is: "a FIFO", "a socket", "a symbolic
    link" ...; "not a regular file" for what has no name here."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def not_regular(mode: int) -> str:
    """Why a file of this mode is not read: a FIFO, socket or device is not a file."""
    return f"{file_kind(mode)}, not a regular file: not read"


def link_outside(path: str, root: str) -> str | None:
    """Why the file at `path` is not taken, or None: a symbolic link is taken (as the file
    it names) only when it resolves to a regular file under `root`; FIFOs, sockets and
    devices never. Decided by lstat: nothing is opened."""
    try:
        info = os.lstat(path)
    except OSError:
        return None  # gone: the read reports it
    if stat.S_ISREG(info.st_mode):
        return None
    if not stat.S_ISLNK(info.st_mode):
        return not_regular(info.st_mode)
    target = os.path.realpath(path)
    where = os.readlink(path)
    if os.path.commonpath([target, root]) != root:
        return f"a symbolic link to {where}, outside {root}: not followed, not carried"
    try:
        if not stat.S_ISREG(os.stat(target).st_mode):
            return f"a symbolic link to {where}, not to a regular file: not carried"
    except OSError:
        return f"a symbolic link to {where}, which does not exist: not carried"
    return None


def file_identity(info: os.stat_result) -> bytes:
    """Device, inode, size, mtime and ctime (ns) of a file, packed: 40 bytes where a
    tuple of five ints costs ~240 (the scan keeps one per installed file)."""
    return IDENTITY.pack(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def available_cores() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def default_jobs() -> int:
    """Threads for hashing and planning when --jobs is not given: the cores available, at
    most `MAX_DEFAULT_JOBS`. On a 16-core host, scan and check took no less time at 16
    threads than at 8 (reads and the interpreter bound them there) while each thread
    holds a 1 MiB buffer: more threads on a larger host buy memory, not speed."""
    return min(available_cores(), MAX_DEFAULT_JOBS)


def sha256_stream(stream: BinaryIO, chunk_size: int = CHUNK_SIZE) -> tuple[str, int]:
    """Hash a binary stream to its end; return (hex digest, bytes read)."""
    digest = hashlib.sha256()
    size = 0
    buffer = bytearray(chunk_size)
    view = memoryview(buffer)
    while True:
        count = stream.readinto(view)  # type: ignore[attr-defined]
        if not count:
            break
        digest.update(view[:count])
        size += count
    return digest.hexdigest(), size


def sha256_file(path: Path, chunk_size: int = CHUNK_SIZE) -> str:
    with open(path, "rb", buffering=0) as stream:
        return sha256_stream(stream, chunk_size)[0]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class KnownFiles(Protocol):
    """Results of earlier reads, trusted while a file is unchanged (the scan cache)."""

    def lookup(self, path: str, crc: bool) -> HashResult | None: ...


def _hash_one(
    path: Path | str, crc: bool = False, known: KnownFiles | None = None, sha: bool = True
) -> HashResult:
    # os-level calls, not open(): a venv is mostly small files, and each io object and
    # extra fstat is a GIL hand-off that two hashing threads queue on (bench/, issue 8)
    if known is not None:
        found = known.lookup(os.fspath(path), crc)
        if found is not None:
            return found
    crc = crc or not sha  # a read without the sha256 is for the CRC-32
    try:
        # O_NONBLOCK: opening a FIFO for reading would wait for a writer forever
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        return HashResult(os.fspath(path), None, 0, exc.strerror or str(exc))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return HashResult(
                os.fspath(path), None, 0, not_regular(info.st_mode), mode=info.st_mode
            )
        if info.st_size <= CHUNK_SIZE:
            # Most files of a venv are small: one read of the whole file (to its end,
            # even if it grew since the fstat).
            data = os.read(fd, info.st_size + 1)
            if len(data) > info.st_size:
                data += b"".join(iter(lambda: os.read(fd, CHUNK_SIZE), b""))
            digest = hashlib.sha256(data).hexdigest() if sha else None
            size = len(data)
            checksum = crc32(data) if crc else None
        else:
            with open(fd, "rb", buffering=0, closefd=False) as stream:
                digest, size, checksum = _hash_stream_crc(stream, crc, sha)
    except OSError as exc:
        return HashResult(os.fspath(path), None, 0, exc.strerror or str(exc))
    finally:
        os.close(fd)
    return HashResult(
        os.fspath(path),
        digest,
        size,
        None,
        checksum,
        info.st_mtime_ns,
        info.st_mode,
        file_identity(info),
        not sha,
    )


def _hash_stream_crc(
    stream: BinaryIO, crc: bool, with_sha: bool = True
) -> tuple[str | None, int, int | None]:
    if not crc:
        digest, size = sha256_stream(stream)
        return digest, size, None
    sha = hashlib.sha256() if with_sha else None
    checksum = 0
    size = 0
    buffer = bytearray(CHUNK_SIZE)
    view = memoryview(buffer)
    while True:
        count = stream.readinto(view)  # type: ignore[attr-defined]
        if not count:
            break
        if sha is not None:
            sha.update(view[:count])
        checksum = crc32(view[:count], checksum)
        size += count
    return (sha.hexdigest() if sha is not None else None), size, checksum


def file_digest(path: Path) -> HashResult:
    """sha256, CRC-32, size, mtime and mode of one file (error set when unreadable)."""
    return _hash_one(path, crc=True)


# (priority, sequence, files with their crc and sha flags); None is a worker's stop mark
_Task = tuple[int, int, list[tuple[str, bool, bool]] | None]


class HashPipeline:
    """Hash files while their list is still being made.

    `submit` hands a file to a pool of worker threads at once; the caller goes on finding
    the next ones (reading RECORDs, walking directories) while the pool hashes. The pool
    takes the largest work first: each file of `BATCH_BYTES` or more is a task of its own,
    smaller files are batched up to `BATCH_BYTES` or `BATCH_FILES`, and a priority queue
    hands out the biggest task waiting, so a large file found last does not keep one thread
    hashing after the others ran out of work. Sizes are the caller's hints (RECORD sizes,
    a stat); a wrong hint only changes the order.

    Use as a context manager; `finish` returns the results. Leaving the block without
    `finish` (an error while finding files) cancels the tasks not yet started. With
    `known`, a file it vouches for is not read.
    """

    def __init__(self, jobs: int | None = None, known: KnownFiles | None = None) -> None:
        workers = max(1, jobs or default_jobs())
        self._known = known
        # (worker processes for the small files, started after this many of them) or None
        self._plan = process_plan(workers)
        # set once enough small files came: the size of the pool the first batch that
        # needs reading starts (a scan the cache answers starts none: not even the
        # semaphores' tracker process)
        self._pool_size: int | None = None
        self._pool_lock = threading.Lock()
        self._processes: ProcessPoolExecutor | None = None
        self._broken: list[ProcessPoolExecutor] = []
        self._small_files = 0
        self.process_batches = 0  # batches hashed by worker processes (a count to report)
        self._queue: queue.PriorityQueue[_Task] = queue.PriorityQueue()
        self._done: queue.SimpleQueue[list[HashResult] | BaseException] = queue.SimpleQueue()
        self._batch: list[tuple[str, bool, bool]] = []
        self._batch_bytes = 0
        self._sequence = 0
        self._tasks = 0
        self._cancelled = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, name=f"repro-hash-{index}", daemon=True)
            for index in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def __enter__(self) -> HashPipeline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def submit(self, path: str, size: int, crc32: bool = False, sha: bool = True) -> None:
        """Queue `path` (expected to be `size` bytes; CRC-32 too when `crc32`; only the
        CRC-32, the sha256 deferred to whoever reads the file next, without `sha`)."""
        if size >= BATCH_BYTES:
            self._put([(path, crc32, sha)], size)
            return
        self._batch.append((path, crc32, sha))
        self._batch_bytes += size
        self._small_files += 1
        if self._batch_bytes >= BATCH_BYTES or len(self._batch) >= BATCH_FILES:
            self._flush()

    def finish(
        self,
        on_progress: ProgressCallback | None = None,
        on_result: Callable[[HashResult], HashResult] | None = None,
    ) -> dict[str, HashResult]:
        """Wait for every submitted file; results by the path as submitted. `on_progress`
        gets each file's byte count, and `on_result` each result (what it returns is kept
        instead), in the calling thread, as tasks complete."""
        self._flush()
        results: dict[str, HashResult] = {}
        try:
            for _ in range(self._tasks):
                done = self._done.get()
                if isinstance(done, BaseException):
                    raise done
                for result in done:
                    if on_result is not None:
                        result = on_result(result)
                    results[result.path] = result
                    if on_progress is not None:
                        on_progress(result.size)
        finally:
            self.close()
        return results

    def close(self) -> None:
        """Cancel what has not started, stop the workers and wait for them."""
        if not self._threads:
            return
        self._cancelled.set()
        for _ in self._threads:
            self._put(None, -1)
        for thread in self._threads:
            thread.join()
        self._threads = []
        for pool in [*self._broken, *([self._processes] if self._processes else [])]:
            pool.shutdown(wait=True, cancel_futures=True)
        self._processes, self._broken = None, []

    def _flush(self) -> None:
        if self._batch:
            if self._plan is not None and self._small_files >= self._plan[1]:
                self._pool_size = self._plan[0]
                self._plan = None
            self._put(self._batch, self._batch_bytes)
            self._batch, self._batch_bytes = [], 0

    def _put(self, items: list[tuple[str, bool, bool]] | None, size: int) -> None:
        self._sequence += 1
        if items is not None:
            self._tasks += 1
        # smallest first out: the largest task (most negative) first, the stop marks last
        self._queue.put((-size if items is not None else 1, self._sequence, items))

    def _work(self) -> None:
        while True:
            _, _, items = self._queue.get()
            if items is None:
                return
            if self._cancelled.is_set():
                continue
            try:
                self._done.put(self._hash(items))
            except BaseException as exc:  # handed to the waiting thread, raised there
                self._done.put(exc)

    def _hash(self, items: list[tuple[str, bool, bool]]) -> list[HashResult]:
        if self._pool_size is None or len(items) < 2:  # a large file: hashlib lets the lock go
            return [_hash_one(path, crc, self._known, sha) for path, crc, sha in items]
        results: list[HashResult] = []
        rest = items
        if self._known is not None:
            rest = []
            for item in items:
                found = self._known.lookup(item[0], item[1])
                if found is None:
                    rest.append(item)
                else:
                    results.append(found)
        if not rest:
            return results
        pool = self._pool()
        rows: list[_Row] | None = None
        if pool is not None:
            try:
                future: Future[list[_Row]] = pool.submit(_hash_rows, rest)
                rows = future.result()
                with self._pool_lock:
                    self.process_batches += 1
            except Exception:
                # a worker died (killed, out of memory), the pool could not start one, or
                # a worker could not import this module: this batch and the rest are
                # hashed in threads (where an error of the files themselves shows again)
                with self._pool_lock:
                    self._pool_size = None
                    if self._processes is pool:
                        self._processes = None
                        self._broken.append(pool)
        if rows is None:
            rows = _hash_rows(rest)
        results.extend(HashResult(*row) for row in rows)
        return results

    def _pool(self) -> ProcessPoolExecutor | None:
        """The worker processes, started by the first batch that needs them."""
        with self._pool_lock:
            if self._processes is None and self._pool_size is not None:
                self._processes = start_processes(self._pool_size)
                if self._processes is None:
                    self._pool_size = None  # none can be made here: threads from now on
            return self._processes


# HashResult's fields in order: what a worker process sends back (plain tuples pickle
# on every Python this runs on)
_Row = tuple[str, str | None, int, str | None, int | None, int, int, bytes | None, bool]


def _hash_rows(items: list[tuple[str, bool, bool]]) -> list[_Row]:
    """Hash a batch of files (in a worker process): each result as a row."""
    rows: list[_Row] = []
    for path, crc, sha in items:
        r = _hash_one(path, crc, None, sha)
        rows.append(
            (
                r.path,
                r.digest,
                r.size,
                r.error,
                r.crc32,
                r.mtime_ns,
                r.mode,
                r.identity,
                r.sha_deferred,
            )
        )
    return rows


def process_plan(jobs: int, environ: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """How many worker processes a pipeline of `jobs` threads starts for its small files,
    and after how many of them; None: it hashes them in its threads. `REPRO_HASH_PROCESSES`
    set to 0 turns processes off; set to N, N processes start at the first batch."""
    setting = (os.environ if environ is None else environ).get(PROCESSES_ENV, "").strip()
    if setting:
        try:
            count = int(setting)
        except ValueError:
            count = -1
        if count < 0:
            raise UsageError(
                f"{PROCESSES_ENV}={setting!r}: not a number of processes",
                hint=f"{PROCESSES_ENV}=0 hashes in threads only; unset, repro decides",
            )
        return (count, 0) if count else None
    if jobs < PROCESS_MIN_JOBS:
        return None
    return min(jobs, MAX_PROCESSES), PROCESS_AFTER_FILES


def _worker_start() -> None:
    """In each worker: leave Ctrl-C to repro's own process, which cancels the batches not
    started and shuts the pool down; a worker interrupted mid-batch would only print a
    traceback and break the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_processes(workers: int) -> ProcessPoolExecutor | None:
    """A pool of `workers` hashing processes forked from a fresh server process (this one
    has threads, and a fork of it could inherit a lock held); None where none can be made.
    The pool starts its processes as batches come."""
    try:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["repro.hashing"])
        return ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_start)
    except (ValueError, OSError, ImportError, NotImplementedError):
        return None


def hash_spans(
    fd: int,
    spans: Sequence[tuple[int, int]],
    *,
    jobs: int | None = None,
    on_progress: ProgressCallback | None = None,
) -> list[str]:
    """sha256 of each (offset, size) byte range of the open file `fd`, read with pread by a
    pool of threads, largest first; digests in the order of `spans`. A range that ends
    before its size raises OSError (the file is shorter than its index said)."""

    def one(span: tuple[int, int]) -> str:
        offset, size = span
        digest = hashlib.sha256()
        buffer = bytearray(min(CHUNK_SIZE, max(size, 1)))
        view = memoryview(buffer)
        while size:
            count = os.preadv(fd, [view[: min(len(buffer), size)]], offset)
            if not count:
                raise OSError(errno.EIO, f"file ends inside bytes {offset}..{offset + size}")
            digest.update(view[:count])
            offset += count
            size -= count
        return digest.hexdigest()

    order = sorted(range(len(spans)), key=lambda i: spans[i][1], reverse=True)
    found: dict[int, str] = {}
    workers = max(1, jobs or default_jobs())
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="repro-span") as pool:
        futures = {pool.submit(one, spans[i]): i for i in order}
        try:
            for future in as_completed(futures):
                index = futures[future]
                found[index] = future.result()
                if on_progress is not None:
                    on_progress(spans[index][1])
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return [found[i] for i in range(len(spans))]


class BackgroundSha256:
    """sha256 of a sequence of pieces, taken by a second thread while the caller goes on
    (writes them): hashing and writing then each take a core instead of adding up, which
    is what a bundle writer on a fast disk waits for. Small pieces are gathered into
    batches so hand-offs stay few; at most `depth` batches wait, so memory stays bounded
    when hashing is the slower side. Pieces must not change after `update` (bytes, or
    a bytearray nobody writes again)."""

    BATCH = 1 << 20

    def __init__(self, depth: int = 8) -> None:
        self._digest = hashlib.sha256()
        self._queue: queue.Queue[bytes | bytearray | None] = queue.Queue(maxsize=depth)
        self._pending: list[bytes | bytearray] = []
        self._pending_size = 0
        self._thread = threading.Thread(target=self._run, name="repro-sha256", daemon=True)
        self._thread.start()

    def update(self, piece: bytes | bytearray) -> None:
        if len(piece) >= self.BATCH:
            self._flush()
            self._queue.put(piece)
            return
        self._pending.append(piece)
        self._pending_size += len(piece)
        if self._pending_size >= self.BATCH:
            self._flush()

    def hexdigest(self) -> str:
        """Wait for every piece to be hashed; the digest."""
        self.close()
        return self._digest.hexdigest()

    def close(self) -> None:
        """Stop the thread (after the pieces given so far); safe to call twice."""
        if self._thread.is_alive():
            self._flush()
            self._queue.put(None)
            self._thread.join()

    def _flush(self) -> None:
        if self._pending:
            joined = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
            self._queue.put(joined)
            self._pending, self._pending_size = [], 0

    def _run(self) -> None:
        while (piece := self._queue.get()) is not None:
            self._digest.update(piece)


def hash_files(
    paths: Sequence[Path],
    *,
    jobs: int | None = None,
    on_progress: ProgressCallback | None = None,
    crc32: AbstractSet[Path] | bool = False,
    sizes: Sequence[int] | None = None,
) -> list[HashResult]:
    """Hash many files in parallel; results come back in the order of `paths`.

    `sizes` (the expected size of each path, from a manifest or RECORD) spares a stat
    per file for scheduling.

    `on_progress` is called with the byte count of each finished file, from the
    calling thread. `crc32` (True, or the paths that need it) also computes each
    file's CRC-32 in the same read.
    """
    workers = jobs or default_jobs()
    if workers <= 1:
        results: list[HashResult] = []
        for path in paths:
            result = _hash_one(path, crc32 is True or (crc32 is not False and path in crc32))
            results.append(result)
            if on_progress is not None:
                on_progress(result.size)
        return results
    with HashPipeline(workers) as pipeline:
        for index, path in enumerate(paths):
            size = sizes[index] if sizes is not None else _size_hint(path)
            pipeline.submit(
                str(path), size, crc32 is True or (crc32 is not False and path in crc32)
            )
        by_path = pipeline.finish(on_progress)
    return [by_path[str(path)] for path in paths]


def _size_hint(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
