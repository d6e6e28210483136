"""Time `repro check` (verify_directory) against `sha256sum -c` on a synthetic tree.

    .venv/bin/python -m bench.bench_check --small 20000 --large 4 --large-mib 64

The tree mimics a venv: many small files plus a few large shared objects.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from repro.bundle.manifest import MANIFEST_NAME
from repro.bundle.manifesttree import verify_directory, write_manifest
from repro.hashing import default_jobs


def build_tree(root: Path, small: int, large: int, large_mib: int) -> int:
    total = 0
    for index in range(small):
        directory = root / "site-packages" / f"pkg{index % 200}"
        directory.mkdir(parents=True, exist_ok=True)
        data = os.urandom(512 + (index * 37) % 8192)
        (directory / f"module{index}.py").write_bytes(data)
        total += len(data)
    chunk = os.urandom(1 << 20)
    for index in range(large):
        with (root / f"lib{index}.so").open("wb") as stream:
            for _ in range(large_mib):
                stream.write(chunk)
        total += large_mib << 20
    return total


def timed(action: Callable[[], object], repeat: int = 3) -> float:
    """Best of `repeat` runs (the page cache is warm after the first)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", type=int, default=20000)
    parser.add_argument("--large", type=int, default=4)
    parser.add_argument("--large-mib", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        total = build_tree(root, args.small, args.large, args.large_mib)
        files = args.small + args.large
        print(f"tree: {files} files, {total / 2**20:.0f} MiB, {default_jobs()} cores")
        results = {
            "write_manifest": timed(lambda: write_manifest(root)),
            "sha256sum -c": timed(
                lambda: subprocess.run(
                    ["sha256sum", "-c", "--quiet", "--strict", MANIFEST_NAME],
                    cwd=root,
                    check=True,
                    timeout=3600,
                )
            ),
            "repro check --jobs 1": timed(
                lambda: verify_directory(root, root / MANIFEST_NAME, jobs=1)
            ),
            f"repro check --jobs {default_jobs()}": timed(
                lambda: verify_directory(root, root / MANIFEST_NAME, jobs=None)
            ),
        }
        for name, seconds in results.items():
            print(f"{name:<24} {seconds:7.2f} s  {total / 2**20 / seconds:8.0f} MiB/s")


if __name__ == "__main__":
    main()
