"""Run a command and print each of its progress lines (stderr) with the seconds since it
started: where a repro command spends its time, stage by stage.

    python3 bench/gpu/stamps.py python3 -m repro pack WORKSPACE ...
"""

from __future__ import annotations

import subprocess
import sys
import time

# rich's table borders and wrapped lines say nothing about time
SKIP = ("│", "┃", "┌", "└", "├", "┏", "┡", "┗", " ")


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert process.stderr is not None
    for line in process.stderr:
        if line.strip() and not line.startswith(SKIP):
            print(f"{time.perf_counter() - started:6.2f} {line.rstrip()[:100]}")
    code = process.wait()
    print(f"{time.perf_counter() - started:6.2f} exit {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
