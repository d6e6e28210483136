from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest

from repro import hashing


@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_hash_files_matches_hashlib_in_order(tmp_path: Path, jobs: int) -> None:
    paths = []
    for index, size in enumerate([0, 1, 2047, 2048, 5 << 20, 3, 1 << 20]):
        path = tmp_path / f"f{index}"
        path.write_bytes(bytes([index % 256]) * size)
        paths.append(path)
    missing = tmp_path / "missing"
    paths.append(missing)
    seen: list[int] = []
    results = hashing.hash_files(paths, jobs=jobs, on_progress=seen.append)
    assert [r.path for r in results] == [str(p) for p in paths]
    for result in results[:-1]:
        assert result.digest == hashlib.sha256(Path(result.path).read_bytes()).hexdigest()
        assert result.size == Path(result.path).stat().st_size
    assert results[-1].digest is None
    assert results[-1].error is not None
    assert sum(seen) == sum(p.stat().st_size for p in paths[:-1])


def test_sha256_stream_reports_size() -> None:
    data = b"x" * (hashing.CHUNK_SIZE * 2 + 5)
    digest, size = hashing.sha256_stream(io.BytesIO(data))
    assert size == len(data)
    assert digest == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("jobs", [1, 2])
def test_hash_files_crc32_for_the_paths_asked(tmp_path: Path, jobs: int) -> None:
    import zlib

    small, large = tmp_path / "small", tmp_path / "large"
    small.write_bytes(b"abc" * 1000)
    large.write_bytes(bytes(range(256)) * ((3 << 20) // 256 + 7))  # several chunks
    large.chmod(0o755)
    both = hashing.hash_files([small, large], jobs=jobs, crc32=True)
    assert [r.crc32 for r in both] == [
        zlib.crc32(small.read_bytes()),
        zlib.crc32(large.read_bytes()),
    ]
    assert [r.digest for r in both] == [
        hashlib.sha256(p.read_bytes()).hexdigest() for p in (small, large)
    ]
    assert both[1].mode & 0o777 == 0o755
    assert both[1].mtime_ns == large.stat().st_mtime_ns
    only_large = hashing.hash_files([small, large], jobs=jobs, crc32={large})
    assert only_large[0].crc32 is None
    assert only_large[1].crc32 == both[1].crc32
    assert hashing.hash_files([small], jobs=jobs)[0].crc32 is None
    assert hashing.file_digest(large).crc32 == both[1].crc32


class _Gate:
    """A file a hashing worker waits at: the pipeline asks its `known` files (the scan
    cache's place) before it reads a file, and for the gate file this waits until the
    release thread lets it go. `entered` is set once the worker is inside the gate."""

    def __init__(self, path: Path) -> None:
        path.write_bytes(b"open")
        self.path = str(path)
        self.entered = threading.Event()
        self.go = threading.Event()

    def lookup(self, path: str, crc: bool) -> hashing.HashResult | None:
        if path == self.path:
            self.entered.set()
            assert self.go.wait(timeout=120), "the gate was never released"
        return None  # read the file

    def release(self, after: threading.Event | None = None) -> threading.Thread:
        """A thread that opens the gate (with `after`, once that event is set)."""

        def run() -> None:
            if after is not None:
                after.wait(timeout=120)
            self.go.set()

        return threading.Thread(target=run, daemon=True)


def test_pipeline_hashes_the_largest_waiting_task_first(tmp_path: Path) -> None:
    """One worker held on a named pipe while files are submitted smallest first: once
    released it takes the large files largest first, then the batch of small ones."""
    gate = _Gate(tmp_path / "gate")
    fifo, release = Path(gate.path), gate.release()
    big = hashing.BATCH_BYTES
    sizes = {"s1.py": 10, "l1.bin": big, "s2.py": 20, "l2.bin": big + 4096, "l3.bin": big + 1}
    order: list[int] = []
    with hashing.HashPipeline(jobs=1, known=gate) as pipeline:
        pipeline.submit(str(fifo), 1 << 40)  # the worker takes this first and waits
        for name, size in sizes.items():
            path = tmp_path / name
            path.write_bytes(b"x" * size)
            pipeline.submit(str(path), size)
        release.start()
        results = pipeline.finish(on_progress=order.append)
    release.join()
    assert order == [4, big + 4096, big + 1, big, 10, 20]
    for name in sizes:
        path = tmp_path / name
        assert results[str(path)].digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert results[str(fifo)].digest == hashlib.sha256(b"open").hexdigest()


def test_pipeline_left_without_finish_cancels_what_has_not_started(tmp_path: Path) -> None:
    """An error while files are still being found: leaving the block stops the workers
    without hashing the rest of the queue."""
    gate = _Gate(tmp_path / "gate")
    pipeline = hashing.HashPipeline(jobs=1, known=gate)
    fifo, release, entered = Path(gate.path), gate.release(pipeline._cancelled), gate.entered
    files = []
    for index in range(3):
        path = tmp_path / f"f{index}.bin"
        path.write_bytes(b"y" * hashing.BATCH_BYTES)
        files.append(path)
    with pytest.raises(RuntimeError, match="found a bad RECORD"), pipeline:
        pipeline.submit(str(fifo), 1 << 40)
        for path in files:
            pipeline.submit(str(path), hashing.BATCH_BYTES)
        release.start()
        # the worker holds the gate: the files are still queued when the error comes
        assert entered.wait(timeout=60)
        raise RuntimeError("found a bad RECORD")
    release.join(timeout=60)
    assert not release.is_alive()
    assert pipeline._done.qsize() <= 1  # the gate only; the queued files were dropped
    assert not any(t.is_alive() for t in threading.enumerate() if t.name.startswith("repro-hash"))


def test_pipeline_reports_unreadable_files_and_computes_crc(tmp_path: Path) -> None:
    data = os.urandom(3 << 20)
    present = tmp_path / "data.bin"
    present.write_bytes(data)
    with hashing.HashPipeline(jobs=2) as pipeline:
        pipeline.submit(str(present), len(data), crc32=True)
        pipeline.submit(str(tmp_path / "gone"), 0)
        results = pipeline.finish()
    assert results[str(present)].crc32 == zlib.crc32(data)
    assert results[str(present)].digest == hashlib.sha256(data).hexdigest()
    assert results[str(tmp_path / "gone")].digest is None
    assert "No such file" in (results[str(tmp_path / "gone")].error or "")


def test_hash_files_with_size_hints_keeps_the_order_of_paths(tmp_path: Path) -> None:
    paths = []
    for index, size in enumerate([hashing.BATCH_BYTES + 1, 5, 0, 70000]):
        path = tmp_path / f"h{index}"
        path.write_bytes(bytes([index]) * size)
        paths.append(path)
    sizes = [p.stat().st_size for p in paths]
    results = hashing.hash_files(paths, jobs=2, sizes=sizes)
    assert [r.path for r in results] == [str(p) for p in paths]
    assert [r.digest for r in results] == [hashing.sha256_file(p) for p in paths]


def test_background_sha256_equals_hashlib_over_pieces_of_every_size() -> None:
    batch = hashing.BackgroundSha256.BATCH
    pieces = [os.urandom(n) for n in (0, 1, 100, batch - 1, batch, 3, batch * 2 + 5, 7)]
    pieces += [os.urandom(4096) for _ in range(600)]  # many small ones, gathered in batches
    background = hashing.BackgroundSha256(depth=2)
    for piece in pieces:
        background.update(piece)
    assert background.hexdigest() == hashlib.sha256(b"".join(pieces)).hexdigest()
    background.close()  # twice is harmless
    assert not any(t.name == "repro-sha256" and t.is_alive() for t in threading.enumerate())


def test_default_jobs_follow_the_cores_up_to_a_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 64-CPU affinity mask (a stand-in: these machines have 2 cores) gets the cap, one
    CPU gets one thread; --jobs still sets any count."""
    from repro import hashing

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    assert hashing.available_cores() == 64
    assert hashing.default_jobs() == hashing.MAX_DEFAULT_JOBS == 8
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert hashing.default_jobs() == 1


def test_the_jobs_help_names_the_default_cap() -> None:
    from repro.cli._common import JOBS_DEFAULT

    assert f"the cores, at most {hashing.MAX_DEFAULT_JOBS}" == JOBS_DEFAULT


def test_finish_hands_each_result_to_on_result_and_keeps_what_it_returns(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    paths = []
    for index in range(300):  # more than a batch: results come back in several tasks
        path = tmp_path / f"f{index}"
        path.write_bytes(b"x" * index)
        paths.append(str(path))
    seen: list[str] = []

    def judge(result: hashing.HashResult) -> hashing.HashResult:
        seen.append(result.path)
        return replace(result, error="judged") if result.size % 2 else result

    with hashing.HashPipeline(jobs=2) as pipeline:
        for name in paths:
            pipeline.submit(name, os.path.getsize(name))
        results = pipeline.finish(on_result=judge)
    assert sorted(seen) == sorted(paths)
    assert {p for p, r in results.items() if r.error == "judged"} == {
        p for p in paths if os.path.getsize(p) % 2
    }
    assert results[paths[2]].digest == hashlib.sha256(b"xx").hexdigest()


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    """In a subprocess under a timeout: a blocking open would wait for ever."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code = (
        "import sys; from pathlib import Path; from repro import hashing; "
        "r = hashing.file_digest(Path(sys.argv[1])); print(r.digest, r.error, sep='|')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(fifo)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.stdout.strip() == "None|a FIFO, not a regular file: not read", proc.stderr
