"""Run contenders alternately and measure wall time and peak RSS of each run.

Peak RSS is GNU time's `%M`: `ru_maxrss` of the contender's process from `wait4`, into
which Linux folds the maximum of every reaped descendant, so it is the largest resident
set of any single process of the contender's tree (not the sum of processes running at
once). The contender runs under /usr/bin/time, not straight from this process, because a
child's ru_maxrss starts at its parent's high-water mark (fork and vfork share the
parent's pages until exec): under Python every contender would read at least the
harness's own ~40 MB.

A contender given `disk` also has the peak disk used on that path's file system sampled
during each run (bench/disk.py).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.disk import DiskPeak


@dataclass(frozen=True)
class Contender:
    """One command to time. `prepare` runs before each run (untimed), `cleanup` after;
    with `disk`, the peak disk used on that path's file system is sampled in each run."""

    name: str
    argv: tuple[str, ...]
    cwd: Path | None = None
    prepare: Callable[[], None] | None = None
    cleanup: Callable[[], None] | None = None
    ok_codes: tuple[int, ...] = (0,)
    env: dict[str, str] | None = None
    disk: Path | None = None


@dataclass(frozen=True)
class Run:
    seconds: float
    max_rss_kib: int
    disk_peak_bytes: int | None = None  # only for a contender given `disk`


@dataclass
class Series:
    """The timed runs of one contender (the warm-up is not among them)."""

    name: str
    argv: tuple[str, ...]
    runs: list[Run] = field(default_factory=list)

    @property
    def seconds(self) -> list[float]:
        return [run.seconds for run in self.runs]

    def summary(self) -> dict[str, object]:
        seconds = self.seconds
        rss = [run.max_rss_kib / 1024 for run in self.runs]
        disk = [run.disk_peak_bytes for run in self.runs if run.disk_peak_bytes is not None]
        summary: dict[str, object] = {
            "name": self.name,
            "argv": list(self.argv),
            "runs_s": [round(s, 3) for s in seconds],
            "median_s": round(statistics.median(seconds), 3),
            "min_s": round(min(seconds), 3),
            "max_s": round(max(seconds), 3),
            "spread_pct": round(
                100 * (max(seconds) - min(seconds)) / statistics.median(seconds), 1
            ),
            "peak_rss_mib_runs": [round(r, 1) for r in rss],
            "peak_rss_mib": round(max(rss), 1),
        }
        if disk:
            summary["disk_peak_bytes_runs"] = disk
        return summary


GNU_TIME = "/usr/bin/time"
# Where GNU time is not installed (the GPU host's image): a bare interpreter (-S -I: no
# site, ~9 MiB) starts the contender and writes the child's ru_maxrss as time's -o does.
# A child's ru_maxrss starts at this wrapper's own peak, so small contenders read its floor
# (`rss_meter()` says which one ran, and the floor).
_WRAPPER = """import os, sys
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
"""


def _meter(rss_path: str) -> list[str]:
    if os.access(GNU_TIME, os.X_OK):
        return [GNU_TIME, "-f", "%M", "-o", rss_path]
    return [sys.executable, "-S", "-I", "-c", _WRAPPER, rss_path]


def rss_meter() -> dict[str, object]:
    """Which peak-RSS meter runs the contenders, and the least it reads (of `true`)."""
    floor = run_once(Contender("true", ("true",))).max_rss_kib / 1024
    name = "GNU time %M" if os.access(GNU_TIME, os.X_OK) else "python -S -I wrapper (wait4)"
    return {"meter": name, "floor_mib": round(floor, 1)}


def _read_rss(path: Path) -> int:
    """KiB from GNU time's -o file (its last line; a killed child adds a status line)."""
    try:
        lines = path.read_text().split()
    finally:
        path.unlink(missing_ok=True)
    return int(lines[-1]) if lines and lines[-1].isdigit() else 0


class BenchFailed(RuntimeError):
    """A contender exited with an unexpected status."""


def run_once(contender: Contender, *, timeout: float = 7200) -> Run:
    if contender.prepare is not None:
        contender.prepare()
    sampler = DiskPeak(contender.disk) if contender.disk is not None else None
    try:
        rss_file = tempfile.NamedTemporaryFile(prefix="bench-rss-", delete=False)  # noqa: SIM115
        rss_file.close()
        if sampler is not None:
            sampler.start()
        started = time.perf_counter()
        process = subprocess.Popen(
            [*_meter(rss_file.name), *contender.argv],
            cwd=contender.cwd,
            env=contender.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        try:
            stderr_thread_output: list[bytes] = []
            reader = threading.Thread(
                target=lambda: stderr_thread_output.append(
                    process.stderr.read() if process.stderr else b""
                )
            )
            reader.start()
            _, status, _ = os.wait4(process.pid, 0)
            elapsed = time.perf_counter() - started
            disk_peak = sampler.stop() if sampler is not None else None
            process.returncode = os.waitstatus_to_exitcode(status)
            reader.join()
        finally:
            timer.cancel()
        if process.stderr is not None:
            process.stderr.close()
        if process.returncode not in contender.ok_codes:
            tail = b"".join(stderr_thread_output)[-3000:].decode(errors="replace")
            raise BenchFailed(
                f"{contender.name}: exit {process.returncode}: {' '.join(contender.argv)}\n{tail}"
            )
        return Run(elapsed, _read_rss(Path(rss_file.name)), disk_peak)
    finally:
        if sampler is not None:
            sampler.close()
        if contender.cleanup is not None:
            contender.cleanup()


def alternate(
    contenders: Sequence[Contender],
    runs: int,
    *,
    warmup: bool = True,
    say: Callable[[str], None] = lambda _: None,
) -> list[Series]:
    """One warm-up of each, then `runs` rounds of A B C ... (every contender once a round)."""
    series = [Series(c.name, c.argv) for c in contenders]
    if warmup:
        for contender in contenders:
            say(f"  warm-up {contender.name}")
            run_once(contender)
    for round_index in range(runs):
        for contender, into in zip(contenders, series, strict=True):
            run = run_once(contender)
            into.runs.append(run)
            say(
                f"  run {round_index + 1}/{runs} {contender.name}: {run.seconds:.2f} s, "
                f"{run.max_rss_kib / 1024:.0f} MiB"
            )
    return series


def paired_ratio(a: Series, b: Series) -> dict[str, float]:
    """Run i of A over run i of B, then the median (and range) of those ratios."""
    return paired_ratios(a.seconds, b.seconds)


def paired_ratios(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Value i of `a` over value i of `b` (runs alternated in pairs), then the median
    (and range) of those ratios."""
    ratios = [x / y for x, y in zip(a, b, strict=True) if y > 0]
    return {
        "median": round(statistics.median(ratios), 3),
        "min": round(min(ratios), 3),
        "max": round(max(ratios), 3),
    }


def say(message: str) -> None:
    """A line of a benchmark's progress, on stderr."""
    print(message, file=sys.stderr, flush=True)


def write_results(path: Path, result: Mapping[str, Any], markdown: str) -> None:
    """A benchmark's results: PATH.json (every figure) and PATH.md (its tables), the
    tables on stderr too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    path.with_suffix(".md").write_text(markdown)
    say(markdown)
