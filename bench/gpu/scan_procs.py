"""Is the scan bound by the interpreter lock on a many-core host? Hash every file the
venv's RECORDs list (the scan's reads, without its RECORD bookkeeping) with repro's
thread pipeline and with a process pool for the small files, alternated, and run the
whole `scan_environment` for reference.

    python3 bench/gpu/scan_procs.py OUT.json [ROUNDS]
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from repro.bundle.environment import EnvironmentFacts
from repro.hashing import BATCH_BYTES, BATCH_FILES, HashPipeline, _hash_one
from repro.snapshot.facts.modulefiles import probe_target
from repro.snapshot.scan.compare import scan_environment
from repro.wheel.record import join_record_path, read_record


def record_files(site: str) -> list[tuple[str, int]]:
    files: dict[str, int] = {}
    prefix = os.path.normpath(site) + os.sep
    for entry in sorted(os.listdir(site)):
        if not entry.endswith(".dist-info"):
            continue
        record = Path(site, entry, "RECORD")
        if not record.is_file():
            continue
        for row in read_record(record):
            if row.sha256 is None:
                continue
            path = join_record_path(prefix, row.path)
            if os.path.isfile(path):
                files[path] = row.size or 0
    return sorted(files.items())


def batch_digest(paths: list[str]) -> list[tuple[str, str | None, int]]:
    out = []
    for path in paths:
        r = _hash_one(path)
        out.append((r.path, r.digest, r.size))
    return out


def batches(files: list[tuple[str, int]]) -> tuple[list[str], list[list[str]]]:
    large = [p for p, s in files if s >= BATCH_BYTES]
    small: list[list[str]] = [[]]
    size = 0
    for path, s in files:
        if s >= BATCH_BYTES:
            continue
        if len(small[-1]) >= BATCH_FILES or size >= BATCH_BYTES:
            small.append([])
            size = 0
        small[-1].append(path)
        size += s
    return large, small


def threads(files: list[tuple[str, int]], jobs: int) -> int:
    with HashPipeline(jobs) as pipeline:
        for path, size in files:
            pipeline.submit(path, size)
        return len(pipeline.finish())


WORKER_MEMORY: dict[str, list[int]] = {}  # variant -> [RSS, PSS] KiB summed over workers


def memory_kib(pid: int) -> tuple[int, int]:
    rss = pss = 0
    with open(f"/proc/{pid}/smaps_rollup") as stream:
        for line in stream:
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    return rss, pss


def processes(files: list[tuple[str, int]], jobs: int, method: str) -> int:
    large, small = batches(files)
    ctx = multiprocessing.get_context(method)
    count = 0
    with (
        ProcessPoolExecutor(jobs, mp_context=ctx) as procs,
        ThreadPoolExecutor(jobs) as pool,
    ):
        # large files in threads of this process (the lock is free while hashlib hashes)
        big = [pool.submit(_hash_one, p) for p in sorted(large, key=os.path.getsize, reverse=True)]
        for result in procs.map(batch_digest, small):
            count += len(result)
        count += sum(1 for f in big if f.result().digest)
        pids = list(procs._processes or {})
        sizes = [memory_kib(pid) for pid in pids]
        WORKER_MEMORY[f"{jobs} {method}"] = [sum(r for r, _ in sizes), sum(p for _, p in sizes)]
    return count


def scan(facts: EnvironmentFacts, jobs: int, processes: str) -> int:
    os.environ["REPRO_HASH_PROCESSES"] = processes  # "": repro decides
    try:
        return len(scan_environment(facts, jobs=jobs).digests)
    finally:
        del os.environ["REPRO_HASH_PROCESSES"]


def main() -> None:
    out = Path(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    site = sysconfig.get_paths()["purelib"]
    files = record_files(site)
    total = sum(s for _, s in files)
    large, small = batches(files)
    print(f"{len(files)} files, {total / 1e9:.2f} GB; {len(large)} large, {len(small)} batches")
    start = time.perf_counter()
    threads(files, 16)  # warm the page cache
    print(f"warm-up {time.perf_counter() - start:.2f} s")
    facts = probe_target(Path(sys.executable))
    variants: dict[str, Callable[[], int]] = {
        "threads 8": lambda: threads(files, 8),
        "threads 16": lambda: threads(files, 16),
        "processes 2 (forkserver)": lambda: processes(files, 2, "forkserver"),
        "processes 4 (forkserver)": lambda: processes(files, 4, "forkserver"),
        "processes 8 (forkserver)": lambda: processes(files, 8, "forkserver"),
        "processes 8 (spawn)": lambda: processes(files, 8, "spawn"),
        "scan_environment jobs 8, threads": lambda: scan(facts, 8, "0"),
        "scan_environment jobs 8, default": lambda: scan(facts, 8, ""),
        "scan_environment jobs 8, processes 8": lambda: scan(facts, 8, "8"),
    }
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            before = resource.getrusage(resource.RUSAGE_SELF)
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            count = run()
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_SELF)
            kids = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            cpu += (kids.ru_utime - children.ru_utime) + (kids.ru_stime - children.ru_stime)
            runs[name].append({"wall_s": round(wall, 3), "cpu_s": round(cpu, 2), "files": count})
            print(f"{name:36s} {wall:6.2f} s  cpu {cpu:6.2f} s  {count} files", flush=True)
    summary = {
        name: {
            "wall_median_s": statistics.median(r["wall_s"] for r in rs),
            "wall_min_max_s": [min(r["wall_s"] for r in rs), max(r["wall_s"] for r in rs)],
            "cpu_median_s": statistics.median(r["cpu_s"] for r in rs),
        }
        for name, rs in runs.items()
    }
    out.write_text(
        json.dumps(
            {
                "files": len(files),
                "bytes": total,
                "cores": os.cpu_count(),
                "runs": runs,
                "summary": summary,
                "worker_rss_pss_kib": WORKER_MEMORY,
            },
            indent=2,
        )
    )
    for name, s in summary.items():
        print(f"{name:36s} median {s['wall_median_s']:.2f} s  cpu {s['cpu_median_s']:.2f} s")
    for name, (rss, pss) in WORKER_MEMORY.items():
        print(f"workers {name}: RSS {rss / 1024:.0f} MiB, PSS {pss / 1024:.0f} MiB (summed)")


if __name__ == "__main__":
    main()
