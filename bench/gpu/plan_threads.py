"""Do the interpreter-bound stages of a pack gain from threads? Plan every
distribution of this interpreter's venv (its files' digests from one scan), and scan it
with the scan cache warm (no file read: a stat each), with 1, 2, 4 and 8 threads,
alternated, three rounds.

    python3 bench/gpu/plan_threads.py [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from repro.errors import PatchedFilesError
from repro.snapshot.facts.installed import InstalledDist, list_installed
from repro.snapshot.facts.modulefiles import probe_target
from repro.snapshot.scan.cache import ScanCache
from repro.snapshot.scan.compare import scan_environment
from repro.wheel.rebuild import plan_rebuild


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    facts = probe_target(Path(sys.executable))
    dists = [d for d in list_installed(Path(facts.python.purelib)) if not d.editable]
    scan = scan_environment(facts, crc_for=[d.canonical_name for d in dists])
    patched = {p.dist.lower().replace("_", "-") for p in scan.patched}
    dists = [d for d in dists if d.canonical_name not in patched]

    def one(dist: InstalledDist) -> int:
        try:
            return len(plan_rebuild(dist, digests=scan.digests).zip.members)
        except PatchedFilesError:
            return 0

    times: dict[int, list[float]] = {n: [] for n in (1, 2, 4, 8)}
    members = 0
    for _ in range(rounds):
        for threads in times:
            start = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                members = sum(pool.map(one, dists))
            times[threads].append(time.perf_counter() - start)
    print(f"planning: {len(dists)} distributions, {members} members")
    report(times)

    cache_dir = Path(tempfile.mkdtemp(prefix="scan-cache-"))
    cache = ScanCache(cache_dir, facts.python.prefix, racy_ns=0)
    cache.stage(scan.digests.values())
    cache.commit()
    warm: dict[int, list[float]] = {n: [] for n in (1, 2, 4, 8)}
    hits = 0
    for _ in range(rounds):
        for threads in warm:
            known = ScanCache(cache_dir, facts.python.prefix, racy_ns=0)
            start = time.perf_counter()
            scan_environment(facts, jobs=threads, known=known)
            warm[threads].append(time.perf_counter() - start)
            hits = known.hits
    print(f"scan with the cache warm: {hits} files unchanged")
    report(warm)


def report(times: dict[int, list[float]]) -> None:
    for threads, runs in times.items():
        print(
            f"{threads} thread(s): median {statistics.median(runs):.2f} s, runs "
            + ", ".join(f"{r:.2f}" for r in runs)
        )


if __name__ == "__main__":
    main()
