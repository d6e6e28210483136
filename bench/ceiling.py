"""The least a Python program does to read and sha256 every byte of a file list: a thread
per core takes the largest file left, reads it in 1 MiB pieces into one buffer and hashes
it. No RECORD, no results kept. `repro scan` and `repro check` do this and more, so this
is their ceiling on a machine where reading through the page cache costs CPU too (the
issue's limit counts hashing and reading as if they overlapped for free).

    python -m bench.ceiling FILELIST [--jobs N]      (FILELIST: NUL-separated paths)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import threading
from pathlib import Path

from repro.hashing import default_jobs

CHUNK = 1 << 20


def hash_all(paths: list[str], jobs: int) -> int:
    """Hash every file; return the bytes read."""
    order = sorted(paths, key=lambda p: os.stat(p).st_size)  # popped from the end: largest first
    lock = threading.Lock()
    totals = [0] * jobs

    def work(index: int) -> None:
        buffer = bytearray(CHUNK)
        view = memoryview(buffer)
        while True:
            with lock:
                if not order:
                    return
                path = order.pop()
            digest = hashlib.sha256()
            fd = os.open(path, os.O_RDONLY)
            try:
                while count := os.readv(fd, [buffer]):
                    digest.update(view[:count])
                    totals[index] += count
            finally:
                os.close(fd)
            digest.hexdigest()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("filelist", type=Path)
    parser.add_argument("--jobs", type=int, default=default_jobs())
    args = parser.parse_args()
    paths = [p for p in args.filelist.read_bytes().decode().split("\0") if p]
    print(hash_all(paths, args.jobs))


if __name__ == "__main__":
    main()
