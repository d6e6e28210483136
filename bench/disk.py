"""Disk a contender takes while it runs, and what unpack's preflight says it will take.

The peak is sampled, not traced: `os.statvfs` of the file system that holds a path, every
50 ms in a background thread from just before the process starts to just after it exits,
the highest used-bytes value minus the value just before. It sees the whole file system:
what other processes write or delete meanwhile is in it too (bench/README.md, "unpack's
disk"). Sizes are allocated bytes (st_blocks x 512), the unit statvfs counts in.
"""

from __future__ import annotations

import os
import re
import statistics
import threading
from pathlib import Path
from typing import Any

from repro.errors import ReproError

INTERVAL_S = 0.05
# repro/install/preflight.py check_disk: "X GiB free at PATH, about N GiB needed"
_NEED = re.compile(r"about (\d+(?:\.\d+)?) GiB needed")


def used_bytes(path: Path) -> int:
    """Bytes in use on the file system holding `path` (blocks less free blocks)."""
    stat = os.statvfs(path)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


class DiskPeak:
    """Samples `used_bytes(path)` every `interval` seconds between `start()` and `stop()`;
    `stop()` takes one last sample and returns the peak less the value at `start()`."""

    def __init__(self, path: Path, interval: float = INTERVAL_S) -> None:
        self.path = path
        self.interval = interval
        self.before = 0
        self.peak = 0
        self.samples = 0
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.before = self.peak = used_bytes(self.path)
        self._done.clear()
        self._thread = threading.Thread(target=self._sample, name="disk-peak", daemon=True)
        self._thread.start()

    def _take(self) -> None:
        self.peak = max(self.peak, used_bytes(self.path))
        self.samples += 1

    def _sample(self) -> None:
        while not self._done.wait(self.interval):
            self._take()

    def close(self) -> None:
        """Ends the sampling thread (if running); nothing is sampled."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def stop(self) -> int:
        self.close()
        self._take()
        return self.peak - self.before


def allocated_bytes(root: Path) -> int:
    """What `du -s --block-size=1 root` counts: st_blocks x 512 of root and of every file,
    directory and symbolic link under it (links not followed), each hard-linked inode once."""
    seen: set[tuple[int, int]] = set()
    total = 0

    def add(path: Path) -> None:
        nonlocal total
        stat = path.lstat()
        key = (stat.st_dev, stat.st_ino)
        if key not in seen:
            seen.add(key)
            total += stat.st_blocks * 512

    add(root)
    for directory, dirs, names in os.walk(root):
        for name in (*dirs, *names):
            add(Path(directory) / name)
    return total


def preflight_need(report: dict[str, Any], *, source: str) -> tuple[int, str]:
    """(bytes, detail) of the disk check in an unpack `--json` report: preflight's stated
    need, which the detail gives in GiB to one decimal (so to within 0.05 GiB)."""
    preflight = report.get("preflight") or {}
    for check in preflight.get("checks", []):
        if check.get("name") == "disk":
            detail = str(check.get("detail", ""))
            found = _NEED.search(detail)
            if found is None:
                raise ReproError(
                    f"{source}: preflight's disk check says no 'about N GiB needed': {detail!r}"
                )
            return round(float(found.group(1)) * 2**30), detail
    raise ReproError(f"{source}: the report has no preflight check named 'disk'")


def disk_facts(
    contender: str,
    peaks: list[int],
    venv_bytes: int,
    need_bytes: int,
    need_detail: str,
    file_system: Path,
) -> dict[str, Any]:
    """The disk section of the unpack group: the peaks of each run, preflight's need and
    both against the venv's allocated size."""
    median = statistics.median(peaks)
    return {
        "contender": contender,
        "file_system": str(file_system),
        "sample_interval_s": INTERVAL_S,
        "venv_allocated_bytes": venv_bytes,
        "peak_bytes_runs": peaks,
        "peak_bytes": round(median),
        "preflight_need_bytes": need_bytes,
        "preflight_detail": need_detail,
        "peak_over_venv": {
            "median": round(median / venv_bytes, 3),
            "min": round(min(peaks) / venv_bytes, 3),
            "max": round(max(peaks) / venv_bytes, 3),
        },
        "preflight_need_over_venv": round(need_bytes / venv_bytes, 3),
    }
