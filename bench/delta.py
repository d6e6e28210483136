"""A delta bundle for a one-file patch change, against the full bundle and rsync.

    .venv/bin/python -m bench.delta --size small            # the harness's small venv (VM)
    python3 -m bench.delta --venv /opt/venv --cache /tmp/c  # a copy of a venv of your own

The workspace of the harness (bench/envs.py: built, or adopted from --venv) is packed in
full (version 1); the one file patched inside its site-packages gets one more line;
it is packed again in full (version 2) and as a delta against version 1
(`repro pack --base`). Measured: the delta's size against the full bundle's (the goal of
issue 32: at most 1 MB and 0.05 %), and against what `rsync --stats --no-whole-file`
sends to bring an extracted version 1 to an extracted version 2 (the anchor; rsync is
apt-installable: without it the output says so). The pack times are printed too. The
patched file is put back as it was at the end. Results: bench/results/<date>-<machine>-
delta.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.envs import Workspace, adopt_workspace, build_workspace, default_cache
from repro import _toml

GOAL_BYTES = 1_000_000
GOAL_RATIO = 0.0005  # 0.05 %
CHANGE = "\n# bench.delta: one more line in the patch\n"


def repro(*args: str, wheels: str | None = None, offline: bool = False) -> float:
    """Run `python -m repro ARGS` (pack's `--wheels` and `--offline` added when given);
    its wall time. A failure ends the bench with repro's own message."""
    extra = ("--wheels", wheels, *(("--offline",) if offline else ())) if wheels else ()
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "repro", *args, *extra],
        capture_output=True,
        check=False,
        timeout=3600,
    )
    if result.returncode != 0:
        raise SystemExit(f"repro {' '.join(args)} failed:\n{result.stderr.decode()[-4000:]}")
    return time.perf_counter() - start


def patched_file(bundle: Path, top: str, venv: Path) -> Path:
    """The first modified file of the bundle's patch set, in the workspace's venv."""
    with tarfile.open(bundle) as tar:
        handle = tar.extractfile(f"{top}/patches/patches.toml")
        assert handle is not None
        document = _toml.loads(handle.read().decode())
    entry = next(p for p in document["files"] if p["kind"] == "modified")
    (site,) = venv.glob("lib/python*/site-packages")
    return site / str(entry["path"])


def extract(bundle: Path, into: Path) -> Path:
    into.mkdir(parents=True)
    subprocess.run(["tar", "-xf", str(bundle), "-C", str(into)], check=True)
    (top,) = into.iterdir()
    return top


def rsync_sent(old_dir: Path, new_dir: Path, scratch: Path) -> dict[str, Any]:
    """What rsync sends to turn a copy of `old_dir` into `new_dir` (delta algorithm on)."""
    if shutil.which("rsync") is None:
        return {"available": False, "note": "rsync not installed (apt-get install rsync)"}
    dest = scratch / "rsync-dest"
    subprocess.run(["cp", "-a", f"{old_dir}/.", str(dest)], check=True)
    start = time.perf_counter()
    result = subprocess.run(
        ["rsync", "-a", "--no-whole-file", "--delete", "--stats", f"{new_dir}/", f"{dest}/"],
        capture_output=True,
        check=True,
        text=True,
    )
    seconds = time.perf_counter() - start

    def number(label: str) -> int:
        match = re.search(rf"^{label}: ([\d,]+)", result.stdout, re.MULTILINE)
        return int(match.group(1).replace(",", "")) if match else -1

    shutil.rmtree(dest)
    return {
        "available": True,
        "bytes_sent": number("Total bytes sent"),
        "literal_data": number("Literal data"),
        "files_transferred": number("Number of regular files transferred"),
        "seconds": round(seconds, 2),
    }


@dataclass(frozen=True)
class PatchChange:
    """The workspace packed before and after a one-line change of its patched file:
    version 1 in full, version 2 in full and as a delta against version 1."""

    name: str
    v1: Path
    full2: Path
    delta: Path
    patched: Path  # the patched file in the workspace's venv, put back as it was
    seconds: dict[str, float]
    delta_zst: Path | None = None


def pack_patch_change(
    workspace: Workspace, work: Path, *, wheels: str, offline: bool = False, zst: bool = False
) -> PatchChange:
    """Pack version 1, change the patched file by one line, pack version 2 in full and
    as a delta against version 1 (and as a .tar.zst delta with `zst`); the file is put
    back as it was, whatever happens."""
    name = "bench"
    v1 = work / f"{name}-1.tar"
    ws = str(workspace.root)
    common = ("--name", name, "--version")
    times = {
        "full_1": repro("pack", ws, *common, "1", "-o", str(v1), wheels=wheels, offline=offline)
    }
    target = patched_file(v1, f"{name}-1", workspace.venv)
    original = target.read_bytes()
    full2 = work / "full" / f"{name}-2.tar"
    delta = work / f"{name}-2.delta.tar"
    zst_path = work / f"{name}-2.delta.tar.zst" if zst else None
    try:
        target.write_bytes(original + CHANGE.encode())
        times["full_2"] = repro(
            "pack", ws, *common, "2", "-o", str(full2), wheels=wheels, offline=offline
        )
        times["delta_2"] = repro(
            "pack", ws, *common, "2", "-o", str(delta), "--base", str(v1),
            wheels=wheels, offline=offline,
        )  # fmt: skip
        if zst_path is not None:
            times["delta_2_zst"] = repro(
                "pack", ws, *common, "2", "-o", str(zst_path), "--base", str(v1),
                wheels=wheels, offline=offline,
            )  # fmt: skip
    finally:
        target.write_bytes(original)
    return PatchChange(name, v1, full2, delta, target, times, zst_path)


def delta_sizes(full: Path, delta: Path) -> dict[str, Any]:
    """The delta's size against the full bundle's, and the goal of issue 32."""
    full_bytes = full.stat().st_size
    delta_bytes = delta.stat().st_size
    return {
        "full_bundle_bytes": full_bytes,
        "delta_bytes": delta_bytes,
        "delta_ratio": delta_bytes / full_bytes,
        "goal_met": delta_bytes <= GOAL_BYTES and delta_bytes / full_bytes <= GOAL_RATIO,
    }


def rsync_anchor(old: Path, new: Path, work: Path, *, delta_bytes: int) -> dict[str, Any]:
    """`rsync --stats` of the two bundles extracted (the bundles themselves are removed
    first, for room on the disk: call it last)."""
    old_dir = extract(old, work / "x1")
    new_dir = extract(new, work / "x2")
    for bundle in (old, new):
        bundle.unlink()
    anchor = rsync_sent(old_dir, new_dir, work)
    if anchor.get("available"):
        anchor["delta_vs_rsync_sent"] = delta_bytes / max(anchor["bytes_sent"], 1)
    shutil.rmtree(work / "x1")
    shutil.rmtree(work / "x2")
    return anchor


def measure(
    workspace: Workspace, work: Path, *, rsync: bool, wheels: str, offline: bool = False
) -> dict[str, Any]:
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    change = pack_patch_change(workspace, work, wheels=wheels, offline=offline, zst=True)
    assert change.delta_zst is not None
    change.seconds["check_delta_with_base"] = repro(
        "check", str(change.delta), "--base", str(change.v1), "-q"
    )
    sizes = delta_sizes(change.full2, change.delta)
    zst = delta_sizes(change.full2, change.delta_zst)
    with tarfile.open(change.delta) as tar:
        carried = sorted(m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile())
    result: dict[str, Any] = {
        "workspace": str(workspace.root),
        "wheels": wheels,
        "patched_file": str(change.patched),
        "full_bundle_bytes": sizes["full_bundle_bytes"],
        "delta_bytes": sizes["delta_bytes"],
        "delta_ratio": sizes["delta_ratio"],
        "delta_zst_bytes": zst["delta_bytes"],
        "delta_zst_ratio": zst["delta_ratio"],
        "delta_members": carried,
        "seconds": {key: round(value, 2) for key, value in change.seconds.items()},
        "goal": {
            "delta_at_most_bytes": GOAL_BYTES,
            "delta_at_most_ratio": GOAL_RATIO,
            "met": sizes["goal_met"],
            "met_zst": zst["goal_met"],
        },
    }
    if rsync:
        result["rsync"] = rsync_anchor(
            change.v1, change.full2, work, delta_bytes=sizes["delta_bytes"]
        )
    else:
        result["rsync"] = {"available": False, "note": "--no-rsync"}
    shutil.rmtree(work)
    return result


def render(result: dict[str, Any]) -> str:
    rows = [
        ("full bundle (v2)", f"{result['full_bundle_bytes']:,} B"),
        ("delta (v2 against v1)", f"{result['delta_bytes']:,} B"),
        ("delta / full", f"{100 * result['delta_ratio']:.4f} %"),
        ("delta, zstd (.tar.zst)", f"{result['delta_zst_bytes']:,} B"),
        ("delta zstd / full", f"{100 * result['delta_zst_ratio']:.4f} %"),
    ]
    anchor = result["rsync"]
    if anchor.get("available"):
        rows += [
            ("rsync bytes sent (v1 -> v2 extracted)", f"{anchor['bytes_sent']:,} B"),
            ("rsync literal data", f"{anchor['literal_data']:,} B"),
            ("delta / rsync sent", f"{anchor['delta_vs_rsync_sent']:.3f}"),
        ]
    else:
        rows.append(("rsync", anchor["note"]))
    rows += [(f"seconds: {k}", f"{v}") for k, v in result["seconds"].items()]
    goal = result["goal"]
    rows.append(("goal: <= 1 MB and <= 0.05 % (tar)", "met" if goal["met"] else "NOT met"))
    rows.append(("goal, the delta as .tar.zst", "met" if goal["met_zst"] else "NOT met"))
    width = max(len(label) for label, _ in rows)
    lines = [f"| {'measure':<{width}} | value |", f"|{'-' * (width + 2)}|-------|"]
    lines += [f"| {label:<{width}} | {value} |" for label, value in rows]
    lines.append("")
    lines.append("carried: " + ", ".join(result["delta_members"]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.delta", description=__doc__)
    parser.add_argument("--size", choices=("small", "full"), default="small")
    parser.add_argument("--venv", type=Path, help="measure a copy of this venv instead")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--results", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--machine-name", default=socket.gethostname().split(".")[0])
    parser.add_argument(
        "--wheels",
        choices=("auto", "all", "none"),
        default="all",
        help="pack's --wheels for every pack [all: the bundle carries the whole venv, as "
        "the GPU host's 7.77 GB bundle does]",
    )
    parser.add_argument("--offline", action="store_true", help="pack --offline (no index)")
    parser.add_argument("--no-rsync", action="store_true", help="leave the rsync anchor out")
    args = parser.parse_args(argv)
    cache = args.cache or default_cache()
    say = lambda message: print(message, file=sys.stderr)  # noqa: E731
    if args.venv is not None:
        workspace = adopt_workspace(args.venv, cache, say=say)
    else:
        workspace = build_workspace(args.size, cache, say=say)
    result = measure(
        workspace,
        cache / f"work-delta-{workspace.size}",
        rsync=not args.no_rsync,
        wheels=args.wheels,
        offline=args.offline,
    )
    result["machine"] = args.machine_name
    result["environment"] = "venv" if args.venv is not None else args.size
    result["cores"] = os.cpu_count()
    table = render(result)
    print(table)
    args.results.mkdir(parents=True, exist_ok=True)
    stem = f"{datetime.date.today().isoformat()}-{args.machine_name}-delta"
    (args.results / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.results / f"{stem}.md").write_text(
        f"# bench.delta on {args.machine_name} ({result['environment']})\n\n{table}"
    )
    return 0 if result["goal"]["met"] or result["goal"]["met_zst"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
