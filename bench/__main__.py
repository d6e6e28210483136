"""`python -m bench`: repro against sha256sum, tar, venv-pack and pip on a real environment.

    python -m bench --size small            # ~200 MB venv: numpy, pandas, scipy
    python -m bench --size full --runs 3    # torch 2.14.1 with its CUDA 13 wheels, ~5.5 GB
    python -m bench --venv /opt/torch/.venv # a copy of a venv of your own

See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any

from bench import report, suite
from bench.envs import adopt_workspace, build_workspace, default_cache
from bench.measure import rss_meter, say
from repro.hashing import default_jobs

GROUPS = ("check", "scan", "pack", "unpack", "roundtrip", "scaling-pack", "scaling")
SCALING = ("scaling-pack", "scaling")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--size", choices=("small", "full"), help="which environment to build [small]"
    )
    parser.add_argument(
        "--venv",
        type=Path,
        metavar="PATH",
        help="measure a copy of this existing venv instead of a built size (it is only read)",
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs per contender [5]")
    parser.add_argument(
        "--warmup",
        type=int,
        choices=(0, 1),
        default=1,
        help="1: one untimed warm-up run of each contender first [1]",
    )
    parser.add_argument(
        "--scaling",
        type=int,
        default=0,
        metavar="N",
        help="also check a synthetic bundle N times larger (copies) [off]",
    )
    parser.add_argument(
        "--only", action="append", choices=GROUPS, help="run only these groups (repeatable) [all]"
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=default_cache(),
        help="where environments are built once [~/.cache/repro-bench]",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=Path(__file__).parent / "results",
        help="where <date>-<machine>.json/.md go [bench/results]",
    )
    parser.add_argument(
        "--work",
        type=Path,
        help="scratch for bundles and fresh targets [CACHE/work-<environment>]",
    )
    parser.add_argument(
        "--machine-name",
        default=os.uname().nodename,
        help="the machine's part of the results' names [the host name]",
    )
    parser.add_argument("--no-venv-pack", action="store_true", help="leave venv-pack out")
    parser.add_argument(
        "--table",
        type=Path,
        metavar="JSON",
        help="measure nothing: recompute limits and goals of a results file, rewrite it "
        "and its .md, print the table",
    )
    args = parser.parse_args(argv)
    if args.table is not None:
        return _retable(args.table)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.venv is not None and args.size is not None:
        parser.error("--venv and --size: give one (--venv measures that venv's copy)")
    groups = tuple(args.only or [g for g in GROUPS if g not in SCALING or args.scaling > 1])
    warmup = bool(args.warmup)

    if args.venv is not None:
        workspace = adopt_workspace(args.venv, args.cache, say=say)
    else:
        workspace = build_workspace(args.size or "small", args.cache, say=say)
    work = args.work or args.cache / f"work-{workspace.root.name}"
    setup = suite.prepare(workspace, work, say, groups)
    result: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": suite.machine(),
        "rss_meter": rss_meter(),
        "runs": args.runs,
        "warmup": warmup,
        "facts": suite.facts(setup),
        "hashlib_bytes_per_s": suite.hashlib_throughput(),
        "hashlib_parallel_bytes_per_s": suite.hashlib_parallel_throughput(default_jobs()),
        "groups": {},
        "left_out": [],
    }
    venv_pack = None
    if "pack" in groups and not args.no_venv_pack:
        venv_pack = suite.tool_venv(args.cache, say)
        if venv_pack is None:
            result["left_out"].append("venv-pack: could not be installed into the tool venv")
    for name in groups:
        if name == "check":
            result["groups"]["check"] = suite.group_check(setup, args.runs, warmup, say)
        elif name == "scan":
            result["groups"]["scan"] = suite.group_scan(setup, args.runs, warmup, say)
        elif name == "pack":
            result["groups"]["pack"] = suite.group_pack(setup, args.runs, warmup, say, venv_pack)
        elif name == "unpack":
            result["groups"]["unpack"] = suite.group_unpack(setup, args.runs, warmup, say)
        elif name == "roundtrip":
            result["groups"]["roundtrip"] = suite.group_roundtrip(setup, args.runs, warmup, say)
        elif name == "scaling-pack":
            result["groups"][name] = suite.group_scaling_pack(
                setup, args.runs, warmup, say, max(args.scaling, 2)
            )
        elif name == "scaling":
            result["groups"][name] = suite.group_scaling(
                setup, args.runs, warmup, say, max(args.scaling, 2)
            )
    for group in result["groups"].values():
        group["hashlib"] = {
            "bytes_per_s": result["hashlib_bytes_per_s"],
            "parallel_bytes_per_s": result["hashlib_parallel_bytes_per_s"],
        }
    result["group_runs"] = {
        name: {"runs": args.runs, "warmup": warmup, "date": result["date"]}
        for name in result["groups"]
    }
    report.limits(result)
    result["goals"] = report.goals(result)
    args.results.mkdir(parents=True, exist_ok=True)
    stem = f"{datetime.date.today().isoformat()}-{args.machine_name}"
    path = args.results / f"{stem}.json"
    document = report.merge(path, workspace.size, result)
    path.write_text(json.dumps(document, indent=2) + "\n")
    markdown = report.table(document)
    (args.results / f"{stem}.md").write_text(markdown)
    say(f"wrote {path} and {path.with_suffix('.md')}")
    print(markdown)
    return 0


def _retable(path: Path) -> int:
    document = json.loads(path.read_text())
    for result in document["sizes"].values():
        report.limits(result)
        result["goals"] = report.goals(result)
    path.write_text(json.dumps(document, indent=2) + "\n")
    markdown = report.table(document)
    path.with_suffix(".md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
