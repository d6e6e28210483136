"""Small files hashed by worker processes (the default on hosts of 4 cores or more; these
machines have 2, so the tests ask for processes through REPRO_HASH_PROCESSES): the same
results as threads, files the scan cache vouches for are not read, a worker that dies
leaves the work to the threads, and the setting is checked."""

from __future__ import annotations

import hashlib
import os
import signal
import zlib
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from repro import hashing
from repro.errors import UsageError


def _tree(root: Path) -> list[tuple[str, int]]:
    """Files of many sizes (empty, one read, several chunks, a batch of its own), an
    executable, a missing path and a directory where a file was expected."""
    files: list[tuple[str, int]] = []
    for index in range(700):
        size = (0, 1, 2047, 4096, 70_000)[index % 5]
        path = root / f"d{index % 7}" / f"f{index}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(os.urandom(size))
        files.append((str(path), size))
    chunked = root / "chunked.so"
    chunked.write_bytes(os.urandom(hashing.CHUNK_SIZE * 2 + 3))
    chunked.chmod(0o755)
    files.append((str(chunked), chunked.stat().st_size))
    large = root / "large.bin"
    large.write_bytes(os.urandom(hashing.BATCH_BYTES + 5))
    files.append((str(large), large.stat().st_size))
    (root / "a-dir.py").mkdir()
    files += [(str(root / "gone.py"), 10), (str(root / "a-dir.py"), 10)]
    return files


def _hash_files(
    files: list[tuple[str, int]], known: hashing.KnownFiles | None = None
) -> tuple[dict[str, hashing.HashResult], int]:
    with hashing.HashPipeline(jobs=2, known=known) as pipeline:
        for index, (path, size) in enumerate(files):
            # every third file with its CRC-32, every fifth for the CRC-32 only
            pipeline.submit(path, size, crc32=index % 3 == 0, sha=index % 5 != 4)
        return pipeline.finish(), pipeline.process_batches


def test_processes_give_what_threads_give(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _tree(tmp_path)
    monkeypatch.setenv(hashing.PROCESSES_ENV, "0")
    threads, none = _hash_files(files)
    monkeypatch.setenv(hashing.PROCESSES_ENV, "2")
    processes, batches = _hash_files(files)
    assert none == 0
    assert batches >= 3  # 700 small files in batches of at most BATCH_FILES, not in threads
    assert processes == threads
    for index, (path, _) in enumerate(files[:-2]):
        data = Path(path).read_bytes()
        result = processes[path]
        assert result.size == len(data) and result.error is None
        sha = index % 5 != 4
        assert result.digest == (hashlib.sha256(data).hexdigest() if sha else None)
        assert result.sha_deferred is not sha
        wants_crc = index % 3 == 0 or not sha
        assert result.crc32 == (zlib.crc32(data) if wants_crc else None)
        assert result.identity == hashing.file_identity(os.stat(path))
    assert processes[str(tmp_path / "chunked.so")].mode & 0o777 == 0o755
    assert "No such file" in (processes[str(tmp_path / "gone.py")].error or "")
    assert processes[str(tmp_path / "a-dir.py")].digest is None
    assert processes[str(tmp_path / "a-dir.py")].error


class _Vouch:
    """Vouches for the files named (as the scan cache does for files unchanged)."""

    def __init__(self, paths: set[str]) -> None:
        self.paths = paths

    def lookup(self, path: str, crc: bool) -> hashing.HashResult | None:
        if path not in self.paths:
            return None
        return hashing.HashResult(path, "0" * 64, 1, crc32=7 if crc else None)


def test_files_vouched_for_are_not_sent_to_the_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _tree(tmp_path)[:300]
    vouched = {path for path, _ in files[::2]}
    monkeypatch.setenv(hashing.PROCESSES_ENV, "2")
    results, batches = _hash_files(files, known=_Vouch(vouched))
    assert batches >= 1
    for path, _ in files:
        if path in vouched:
            assert results[path].digest == "0" * 64
        else:
            assert results[path].size == Path(path).stat().st_size
            assert results[path].digest in (
                None,
                hashlib.sha256(Path(path).read_bytes()).hexdigest(),
            )


def test_a_worker_that_dies_leaves_the_batches_to_the_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real worker processes that exit as they start (as one killed for memory would):
    the pool breaks, every batch is hashed in threads, and the results are complete."""
    files = _tree(tmp_path)[:400]
    pools: list[ProcessPoolExecutor] = []

    def dying(workers: int) -> ProcessPoolExecutor:
        pool = ProcessPoolExecutor(
            workers, mp_context=get_context("forkserver"), initializer=os._exit, initargs=(3,)
        )
        pools.append(pool)
        return pool

    monkeypatch.setattr(hashing, "start_processes", dying)
    monkeypatch.setenv(hashing.PROCESSES_ENV, "2")
    results, batches = _hash_files(files)
    assert pools and batches == 0
    assert len(results) == len(files)
    for index, (path, _) in enumerate(files):
        if index % 5 != 4:
            assert results[path].digest == hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_the_process_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(hashing.PROCESSES_ENV, raising=False)
    assert hashing.process_plan(1) is None
    assert hashing.process_plan(2) is None  # two cores: the hashing binds, not the lock
    assert hashing.process_plan(4) == (4, hashing.PROCESS_AFTER_FILES)
    assert hashing.process_plan(16) == (hashing.MAX_PROCESSES, hashing.PROCESS_AFTER_FILES)
    assert hashing.process_plan(16, {hashing.PROCESSES_ENV: "0"}) is None
    assert hashing.process_plan(1, {hashing.PROCESSES_ENV: "3"}) == (3, 0)
    for bad in ("x", "-1", "2.5"):
        with pytest.raises(UsageError, match=hashing.PROCESSES_ENV):
            hashing.process_plan(8, {hashing.PROCESSES_ENV: bad})


def test_a_small_scan_starts_no_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """By default (8 threads asked for here, as on a large host) processes start only
    after PROCESS_AFTER_FILES small files: a few hundred stay in the threads."""
    monkeypatch.delenv(hashing.PROCESSES_ENV, raising=False)
    started: list[int] = []
    real = hashing.start_processes

    def counted(workers: int) -> ProcessPoolExecutor | None:
        started.append(workers)
        return real(workers)

    monkeypatch.setattr(hashing, "start_processes", counted)
    files = _tree(tmp_path)[:300]
    with hashing.HashPipeline(jobs=8) as pipeline:
        for path, size in files:
            pipeline.submit(path, size)
        assert len(pipeline.finish()) == len(files)
    assert started == []
    many = [(path, size) for path, size in files for _ in range(8)]  # 2400 submissions
    with hashing.HashPipeline(jobs=8) as pipeline:
        for path, size in many:
            pipeline.submit(path, size)
        pipeline.finish()
        assert pipeline.process_batches >= 1
    assert started == [hashing.MAX_PROCESSES]


def test_workers_leave_ctrl_c_to_repro() -> None:
    """A terminal's Ctrl-C reaches the whole process group: the workers ignore it, so
    repro's own process cancels what has not started and shuts the pool down instead of
    each worker printing a traceback."""
    pool = hashing.start_processes(1)
    assert pool is not None
    with pool:
        assert pool.submit(signal.getsignal, signal.SIGINT).result() == signal.SIG_IGN


def test_no_processes_start_when_the_cache_answers_for_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pack again: every file unchanged since the last one. No worker processes, not
    even the tracker process their semaphores would start."""
    files = _tree(tmp_path)[:300]
    started: list[int] = []
    monkeypatch.setattr(hashing, "start_processes", lambda workers: started.append(workers))
    monkeypatch.setenv(hashing.PROCESSES_ENV, "2")
    results, batches = _hash_files(files, known=_Vouch({path for path, _ in files}))
    assert len(results) == len(files) and batches == 0
    assert started == []
    _hash_files(files[:50])  # a file to read: the pool is asked for
    assert started == [2]
