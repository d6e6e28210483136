"""Run a shell command, and sample the used bytes of a file system while it runs.

    python3 diskpeak.py LABEL PATH 'COMMAND'

Prints one JSON line: the label, exit code, wall seconds, and the peak of the file
system's used bytes (statvfs, every 20 ms) above its value just before the command:
the disk the command took at its fullest. The whole file system is sampled, so another
writer on it adds to the figure; the bench scripts run one command at a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time


def used(path: str) -> int:
    stats = os.statvfs(path)
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize


def main() -> None:
    label, path, command = sys.argv[1:4]
    before = used(path)
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], used(path))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    rc = subprocess.run(["bash", "-o", "pipefail", "-c", command], check=False).returncode
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    peak[0] = max(peak[0], used(path))
    print(
        json.dumps(
            {
                "label": label,
                "rc": rc,
                "wall_s": round(wall, 2),
                "disk_peak_bytes": peak[0] - before,
                "disk_after_bytes": used(path) - before,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
