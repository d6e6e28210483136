"""`python -m bench.weights`: hashing a model's weight set, repro against sha256sum.

    python -m bench.weights --shards 4 --shard-mb 512 --runs 5   # the VM: 2 GB
    python -m bench.weights --shards 16 --shard-mb 1024          # the GPU host: 16 GB

Writes `--shards` synthetic .safetensors shards (a real header: two F32 tensors tiling
the data) under `--dir`, then times, alternated round by round after one warm-up each:
repro's parallel hashing (`repro.hashing.hash_files`, what `repro pack` pins weights with
and `repro unpack --verify-weights` / `repro verify --weights` check them with) in its own
process, `sha256sum` of the same files, and `cat` of them to /dev/null: the read limit.
Two settings: `warm`, every file in the page cache (the hashing is measured: cat is a
memory copy there, a limit no hash reaches) and `cold`, each file's cached pages dropped
before every run (posix_fadvise DONTNEED of the shards alone: no root, nothing else on
the machine touched), where cat is the disk's read limit that --verify-weights of a
600 GB model meets. The digests of repro and sha256sum are compared once. Medians,
their ratios (goal: at least 2x sha256sum on 16 cores, at least 0.8 of the cold read
limit) and the runs go to `OUT.json` and `OUT.md`. See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.measure import Contender, alternate, paired_ratio, say, write_results
from repro.hashing import available_cores, default_jobs, hash_files

BLOCK = 64 << 20


def write_shard(path: Path, size: int, seed: int) -> None:
    """A .safetensors file of about `size` bytes: two F32 tensors, pseudo-random data."""
    elements = max(2, (size // 4) // 2 * 2)
    half = elements // 2
    header = json.dumps(
        {
            "__metadata__": {"format": "pt"},
            "a.weight": {"dtype": "F32", "shape": [half], "data_offsets": [0, 4 * half]},
            "b.weight": {
                "dtype": "F32",
                "shape": [elements - half],
                "data_offsets": [4 * half, 4 * elements],
            },
        },
        separators=(",", ":"),
    ).encode()
    header += b" " * (-len(header) % 8)
    block = bytearray(os.urandom(BLOCK))
    left = 4 * elements
    with open(path, "wb") as stream:
        stream.write(len(header).to_bytes(8, "little") + header)
        while left:
            block[:8] = (seed * 1_000_003 + left).to_bytes(8, "little")  # no two blocks alike
            piece = memoryview(block)[: min(left, BLOCK)]
            stream.write(piece)
            left -= len(piece)


def drop_cached(paths: list[str]) -> None:
    """Drop the page cache's pages of these files (dirty ones written first)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _child(paths: list[str], jobs: int | None) -> int:
    """The repro contender: hash the files in parallel, print `digest  path` lines."""
    for result in hash_files([Path(p) for p in paths], jobs=jobs):
        if result.digest is None:
            print(f"{result.path}: {result.error}", file=sys.stderr)
            return 1
        print(f"{result.digest}  {result.path}")
    return 0


def _digests(argv: list[str]) -> dict[str, str]:
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return {line.split("  ", 1)[1]: line.split("  ", 1)[0] for line in out.splitlines()}


def _markdown(result: dict[str, Any]) -> str:
    rows = [
        f"# Weights hashing: {result['machine']}, {result['date']}",
        "",
        f"{result['shards']} shards x {result['shard_mb']} MB = "
        f"{result['total_bytes'] / 1e9:.2f} GB; {result['cores']} cores, repro at "
        f"{result['jobs']} threads; {result['runs']} runs each, alternated, after one warm-up. "
        f"`python -m bench.weights`. Digests of repro and sha256sum agree: "
        f"{result['digests_agree']}.",
    ]
    for setting, group in result["settings"].items():
        rows += [
            "",
            f"## {setting} page cache",
            "",
            "| contender | median s | GB/s | runs s |",
            "| --- | --- | --- | --- |",
        ]
        for item in group["series"]:
            rate = result["total_bytes"] / item["median_s"] / 1e9
            runs = ", ".join(f"{s:.2f}" for s in item["runs_s"])
            rows.append(f"| {item['name']} | {item['median_s']:.3f} | {rate:.2f} | {runs} |")
        ratios = group["ratios"]
        rows += [
            "",
            f"- sha256sum / repro (paired, median): "
            f"{ratios['sha256sum_over_repro']['median']:.2f}x (goal on the GPU host: >= 2x)",
            f"- cat / repro, the share of the read limit repro reaches: "
            f"{ratios['cat_over_repro']['median']:.2f} (goal, cold: >= 0.8)",
        ]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.weights",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--shards", type=int, default=4, help="shards to write [4]")
    parser.add_argument("--shard-mb", type=int, default=512, help="MB per shard [512]")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per contender [5]")
    parser.add_argument("--jobs", type=int, default=None, help="repro's threads [its default]")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-weights"), help="shards")
    parser.add_argument("--machine", default="vm", help="the machine, in the file name [vm]")
    parser.add_argument("--out", type=Path, help="OUT.json and OUT.md [bench/results/...]")
    parser.add_argument("--keep", action="store_true", help="leave the shards in --dir")
    parser.add_argument(
        "--cache", choices=("warm", "cold", "both"), default="both", help="page cache [both]"
    )
    parser.add_argument("--hash", nargs="+", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hash:
        return _child(args.hash, args.jobs)
    if shutil.which("sha256sum") is None:
        parser.error("sha256sum is not on PATH")
    args.dir.mkdir(parents=True, exist_ok=True)
    size = args.shard_mb * 1_000_000
    paths = []
    for index in range(args.shards):
        path = args.dir / f"model-{index + 1:05d}-of-{args.shards:05d}.safetensors"
        if not path.exists() or abs(path.stat().st_size - size) > 64:
            say(f"writing {path} ({args.shard_mb} MB)")
            write_shard(path, size, index)
        paths.append(str(path))
    total = sum(Path(p).stat().st_size for p in paths)
    root = Path(__file__).resolve().parent.parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    jobs = ["--jobs", str(args.jobs)] if args.jobs else []
    repro = [sys.executable, "-m", "bench.weights", *jobs, "--hash", *paths]
    agree = _digests(repro) == _digests(["sha256sum", *paths])
    settings: dict[str, Any] = {}
    for setting in ("warm", "cold") if args.cache == "both" else (args.cache,):
        drop = (lambda: drop_cached(paths)) if setting == "cold" else None
        contenders = [
            Contender("repro", tuple(repro), cwd=root, env=env, prepare=drop),
            Contender("sha256sum", ("sha256sum", *paths), prepare=drop),
            Contender("cat", ("cat", *paths), prepare=drop),
        ]
        say(f"{setting} page cache")
        series = alternate(contenders, args.runs, warmup=setting == "warm", say=say)
        by_name = {s.name: s for s in series}
        settings[setting] = {
            "series": [s.summary() for s in series],
            "ratios": {
                "sha256sum_over_repro": paired_ratio(by_name["sha256sum"], by_name["repro"]),
                "cat_over_repro": paired_ratio(by_name["cat"], by_name["repro"]),
            },
            "medians_s": {s.name: statistics.median(s.seconds) for s in series},
        }
    date = datetime.date.today().isoformat()
    result: dict[str, Any] = {
        "date": date,
        "machine": args.machine,
        "platform": platform.platform(),
        "cores": available_cores(),
        "jobs": args.jobs or default_jobs(),
        "shards": args.shards,
        "shard_mb": args.shard_mb,
        "total_bytes": total,
        "runs": args.runs,
        "digests_agree": agree,
        "settings": settings,
    }
    out = args.out or root / "bench" / "results" / f"{date}-{args.machine}-weights"
    write_results(out, result, _markdown(result))
    if not args.keep:
        for path in paths:
            os.unlink(path)
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
