"""`python -m bench.upgrade`: an upgrade in place against a full unpack, and rollback.

    .venv/bin/python -m bench.upgrade --size small --runs 3 --unpack-arg=--cpu   # the VM
    python3 -m bench.upgrade --venv /opt/venv --offline --runs 3                 # GPU host

The harness's workspace (bench/envs.py: built, or a copy of `--venv`) is packed as
bench/delta.py packs it: version 1 in full; its patched file changed by one line,
version 2 in full and as a delta against 1. Then, untimed, one pure-Python distribution
that no patch touches (six, packaging, ... or `--wheel-dist`) is given another version
in the workspace's venv (its dist-info renamed, METADATA's Version and one module
changed, RECORD rewritten to match: what installing a rebuilt or newer wheel of it
leaves), and version 3 is packed as a delta against 1; the venv is put back as it was.

One group, alternated after a warm-up, on one target T that cycles 1 -> 2 -> 1 -> 3 -> 1:

- `apply delta (patch)`: `repro unpack bench-2.delta.tar --target T` over T at 1;
- `rollback (patch)`: `repro rollback T`, back to 1;
- `upgrade one wheel (delta)`: `repro unpack bench-3.delta.tar --target T`; every file of
  T (`.repro/` and bytecode caches aside) is stat'ed before and after it, untimed: the
  files rewritten (another inode or mtime), added and removed, against the files of the
  distribution that changed (its RECORD, before and after);
- `rollback (one wheel)`: back to 1;
- `full unpack of NEW`: `repro unpack bench-2.tar --target FRESH`, a path removed before
  each run: the baseline.

Ratios are paired against the full unpack. Sizes: the delta against the full bundle
and, last (the bundles are removed first, for room), against `rsync --stats` of the two
extracted bundles (bench/delta.py's functions). Goals of issue 32: the delta at most
1 MB and 0.05 % of the full bundle; applying it and rolling back at most 5 s each on the
GPU host; the one-wheel upgrade rewrites no file outside that distribution. Results:
bench/results/<date>-<machine>-upgrade.json and .md (bench/README.md).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import hashlib
import io
import json
import os
import platform
import shutil
import socket
import stat
import statistics
import sys
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import Version

from bench.delta import delta_sizes, pack_patch_change, repro, rsync_anchor
from bench.envs import (
    Workspace,
    adopt_workspace,
    build_workspace,
    default_cache,
    site_packages,
    tree_bytes,
)
from bench.measure import Contender, alternate, paired_ratio
from repro import _toml
from repro.install.state import load_state
from repro.wheel.record import record_hash

GOAL_SECONDS = 5.0  # applying the delta, and rolling back, on the GPU host
# distributions the one-wheel upgrade prefers (pure Python, in most serving venvs)
WHEEL_CANDIDATES = ("six", "packaging", "certifi", "idna", "urllib3", "requests", "filelock")
NEVER_BUMPED = {"torch", "pip", "setuptools", "wheel"}

APPLY = "apply delta (patch)"
ROLLBACK = "rollback (patch)"
ONE_WHEEL = "upgrade one wheel (delta)"
ROLLBACK_ONE = "rollback (one wheel)"
FULL = "full unpack of NEW"

Identity = tuple[int, int]  # (inode, mtime_ns)


# --- the one-wheel change --------------------------------------------------------------


@dataclass(frozen=True)
class Bumped:
    """A distribution given another version in place; `restore` puts it back."""

    name: str
    old_version: str
    new_version: str
    old_info: Path  # the dist-info it had (moved to `backup`)
    new_info: Path
    module: Path  # the module whose text changed
    backup: Path

    def restore(self) -> None:
        shutil.rmtree(self.new_info, ignore_errors=True)
        os.rename(self.backup / self.old_info.name, self.old_info)
        shutil.copy2(self.backup / "module", self.module)
        shutil.rmtree(self.backup)


def _dist_infos(site: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for info in site.glob("*.dist-info"):
        dist = info.name.removesuffix(".dist-info").rsplit("-", 1)[0]
        found[canonicalize_name(dist)] = info
    return found


def _purelib(info: Path) -> bool:
    wheel = info / "WHEEL"
    return wheel.is_file() and "Root-Is-Purelib: true" in wheel.read_text(errors="replace")


def pick_distribution(site: Path, patched: set[str], wanted: str | None = None) -> str:
    """The distribution the one-wheel upgrade changes: `wanted`, else the first of
    WHEEL_CANDIDATES installed, pure Python and not patched, else the pure-Python one
    with the fewest RECORD rows."""
    infos = _dist_infos(site)
    if wanted is not None:
        if canonicalize_name(wanted) not in infos:
            raise SystemExit(f"--wheel-dist {wanted}: not installed in {site}")
        return canonicalize_name(wanted)
    usable = {
        name: info
        for name, info in infos.items()
        if name not in patched
        and name not in NEVER_BUMPED
        and _purelib(info)
        and (info / "RECORD").is_file()
    }
    for name in WHEEL_CANDIDATES:
        if name in usable:
            return name
    if not usable:
        raise SystemExit(f"{site}: no pure-Python distribution without a patch to upgrade")
    return min(usable, key=lambda n: (len((usable[n] / "RECORD").read_bytes().split(b"\n")), n))


def _next_version(version: str) -> str:
    """Another version, newer than `version`: a local label (+bench, or .bench after
    one)."""
    parsed = Version(version)
    return f"{version}.bench" if parsed.local else f"{version}+bench"


def _record_field(data: bytes) -> tuple[str, str]:
    return record_hash(hashlib.sha256(data).digest()), str(len(data))


def bump_distribution(site: Path, name: str, backup: Path) -> Bumped:
    """Give the installed distribution `name` another version, as installing another
    wheel of it would: its dist-info under the new name with METADATA's Version
    changed, one module of it changed by a line, RECORD rewritten to match. What it
    changes is kept under `backup` for `Bumped.restore`."""
    info = _dist_infos(site)[canonicalize_name(name)]
    prefix, old = info.name.removesuffix(".dist-info").rsplit("-", 1)
    new = _next_version(old)
    new_info = site / f"{prefix}-{new}.dist-info"
    rows = list(csv.reader(io.StringIO((info / "RECORD").read_text(encoding="utf-8"))))
    modules = [
        r[0]
        for r in rows
        if r and r[0].endswith(".py") and not r[0].startswith(("../", info.name + "/"))
    ]
    if not modules:
        raise SystemExit(f"{info}: no module of its own to change")
    module = site / modules[0]
    backup.mkdir(parents=True)
    shutil.copy2(module, backup / "module")
    shutil.copytree(info, new_info, symlinks=True)
    os.rename(info, backup / info.name)

    metadata = (new_info / "METADATA").read_text(encoding="utf-8")
    metadata = metadata.replace(f"\nVersion: {old}\n", f"\nVersion: {new}\n", 1)
    (new_info / "METADATA").write_text(metadata, encoding="utf-8")
    module.write_bytes(module.read_bytes() + f"\n# bench.upgrade: {name} {new}\n".encode())

    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        if not row:
            continue
        path = row[0]
        if path.startswith(info.name + "/"):
            path = new_info.name + path[len(info.name) :]
        if path == f"{new_info.name}/METADATA":
            row = [path, *_record_field((new_info / "METADATA").read_bytes())]
        elif path == modules[0]:
            row = [path, *_record_field(module.read_bytes())]
        else:
            row = [path, *row[1:]]
        writer.writerow(row)
    (new_info / "RECORD").write_text(out.getvalue(), encoding="utf-8")
    return Bumped(canonicalize_name(name), old, new, info, new_info, module, backup)


# --- what an upgrade rewrote -----------------------------------------------------------


def identities(root: Path) -> dict[str, Identity]:
    """(inode, mtime) of every file and link under `root`, by path relative to it;
    `.repro/` at the top and bytecode caches left out."""
    found: dict[str, Identity] = {}
    for directory, dirs, files in os.walk(root):
        here = Path(directory)
        dirs[:] = [d for d in dirs if d != "__pycache__" and not (here == root and d == ".repro")]
        for name in files:
            info = (here / name).lstat()
            if stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
                found[(here / name).relative_to(root).as_posix()] = (info.st_ino, info.st_mtime_ns)
    return found


def dist_files(root: Path, site: Path, name: str) -> set[str]:
    """The files the installed distribution `name` owns (its RECORD), relative to
    `root`; empty when it is not installed."""
    info = _dist_infos(site).get(canonicalize_name(name))
    if info is None:
        return set()
    rows = csv.reader(io.StringIO((info / "RECORD").read_text(encoding="utf-8")))
    return {
        Path(os.path.normpath(site / row[0])).relative_to(root).as_posix()
        for row in rows
        if row and "__pycache__" not in row[0].split("/")
    }


def rewritten(
    before: Mapping[str, Identity], after: Mapping[str, Identity], owned: set[str]
) -> dict[str, Any]:
    """Files rewritten (same path, another inode or mtime), added and removed between two
    `identities` of a tree; `outside`: those not among the changed distribution's files
    (`owned`, before and after), which an upgrade of that one wheel should never touch."""
    changed = sorted(p for p in before.keys() & after.keys() if before[p] != after[p])
    added = sorted(after.keys() - before.keys())
    removed = sorted(before.keys() - after.keys())
    outside = sorted(p for p in (*changed, *added, *removed) if p not in owned)
    return {
        "rewritten": len(changed),
        "added": len(added),
        "removed": len(removed),
        "touched": len(changed) + len(added) + len(removed),
        "outside": outside,
    }


# --- the group ------------------------------------------------------------------------


@dataclass(frozen=True)
class Bundles:
    v1: Path
    full2: Path
    delta2: Path
    delta3: Path


class Target:
    """The target T the contenders cycle through versions, each run finding it where it
    needs it (an untimed unpack or upgrade otherwise)."""

    def __init__(self, path: Path, bundles: Bundles, unpack_args: Sequence[str]) -> None:
        self.path = path
        self.bundles = bundles
        self.unpack_args = tuple(unpack_args)

    def version(self) -> str | None:
        state = load_state(self.path) if self.path.is_dir() else None
        return state.bundle.version if state is not None else None

    def unpack(self, bundle: Path, at: Path | None = None) -> tuple[str, ...]:
        """`repro unpack BUNDLE` into T (or `at`), as every contender runs it."""
        where = str(at or self.path)
        args = ("unpack", str(bundle), "--target", where, "--offline", "--no-smoke")
        return (sys.executable, "-m", "repro", *args, *self.unpack_args)

    def hold(self, version: str) -> None:
        """T at `version` ("1", "2" or "3"): unpacked afresh at 1, upgraded from it."""
        if self.version() == version:
            return
        if version != "1":
            self.hold("1")
            bundle = self.bundles.delta2 if version == "2" else self.bundles.delta3
            repro(*self.unpack(bundle)[3:])
            return
        shutil.rmtree(self.path, ignore_errors=True)
        repro(*self.unpack(self.bundles.v1)[3:])


def _fresh(path: Path) -> Callable[[], None]:
    return lambda: shutil.rmtree(path, ignore_errors=True)


def run_group(
    target: Target,
    fresh: Path,
    site: Path,
    bumped: str,
    runs: int,
    warmup: bool,
    say: Callable[[str], None],
) -> dict[str, Any]:
    counts: list[dict[str, Any]] = []
    snapshot: dict[str, Any] = {}

    def before_one_wheel() -> None:
        target.hold("1")
        snapshot["ids"] = identities(target.path)
        snapshot["owned"] = dist_files(target.path, site, bumped)

    def after_one_wheel() -> None:
        owned = snapshot["owned"] | dist_files(target.path, site, bumped)
        counts.append(
            {
                **rewritten(snapshot["ids"], identities(target.path), owned),
                "distribution_files": len(dist_files(target.path, site, bumped)),
                "files": len(snapshot["ids"]),
            }
        )

    rollback = (sys.executable, "-m", "repro", "rollback", str(target.path))
    contenders = [
        Contender(APPLY, target.unpack(target.bundles.delta2), prepare=lambda: target.hold("1")),
        Contender(ROLLBACK, rollback, prepare=lambda: target.hold("2")),
        Contender(
            ONE_WHEEL,
            target.unpack(target.bundles.delta3),
            prepare=before_one_wheel,
            cleanup=after_one_wheel,
        ),
        Contender(ROLLBACK_ONE, rollback, prepare=lambda: target.hold("3")),
        Contender(
            FULL,
            target.unpack(target.bundles.full2, at=fresh),
            prepare=_fresh(fresh),
            cleanup=_fresh(fresh),
        ),
    ]
    series = alternate(contenders, runs, warmup=warmup, say=say)
    by = {s.name: s for s in series}
    return {
        "series": [s.summary() for s in series],
        "ratios": {
            f"{name} / {FULL}": paired_ratio(by[name], by[FULL])
            for name in (APPLY, ROLLBACK, ONE_WHEEL, ROLLBACK_ONE)
        },
        "medians_s": {s.name: round(statistics.median(s.seconds), 3) for s in series},
        "one_wheel": counts[-runs:] if runs else counts,
    }


# --- the whole run ---------------------------------------------------------------------


def _patched_dists(bundle: Path, top: str) -> set[str]:
    with tarfile.open(bundle) as tar:
        handle = tar.extractfile(f"{top}/patches/patches.toml")
        assert handle is not None
        document = _toml.loads(handle.read().decode())
    return {canonicalize_name(str(p["dist"])) for p in document.get("files", [])}


def _members(bundle: Path) -> dict[str, int]:
    """The files a bundle carries and their sizes."""
    with tarfile.open(bundle) as tar:
        return {m.name.split("/", 1)[1]: m.size for m in tar.getmembers() if m.isfile()}


def goals(result: Mapping[str, Any]) -> dict[str, Any]:
    """Each goal of issue 32 with its measured value (seconds: the GPU host's goal)."""
    medians = result["group"]["medians_s"]
    counts = result["group"]["one_wheel"]
    outside = max((len(c["outside"]) for c in counts), default=0)
    return {
        "delta <= 1 MB and <= 0.05 % of the full bundle": {
            "value": f"{result['sizes']['delta_bytes']:,} B, "
            f"{100 * result['sizes']['delta_ratio']:.4f} %",
            "met": result["sizes"]["goal_met"],
        },
        "apply the delta <= 5 s (GPU host)": {
            "value": f"{medians[APPLY]:.2f} s",
            "met": medians[APPLY] <= GOAL_SECONDS,
        },
        "rollback <= 5 s (GPU host)": {
            "value": f"{medians[ROLLBACK]:.2f} s",
            "met": medians[ROLLBACK] <= GOAL_SECONDS,
        },
        "one-wheel upgrade rewrites only that distribution's files": {
            "value": f"{outside} file(s) outside it",
            "met": bool(counts) and outside == 0,
        },
    }


def render(result: Mapping[str, Any]) -> str:
    sizes, group = result["sizes"], result["group"]
    lines = [
        f"# bench.upgrade on {result['machine']} ({result['environment']}), {result['date']}",
        "",
        f"{result['venv_files']:,} files, {result['venv_bytes'] / 1e9:.2f} GB in the venv; "
        f"{result['cores']} cores; {result['runs']} runs, alternated, after "
        f"{'one warm-up' if result['warmup'] else 'no warm-up'}. One wheel changed: "
        f"{result['one_wheel']['name']} {result['one_wheel']['old']} -> "
        f"{result['one_wheel']['new']}. Load average at the end: "
        f"{', '.join(f'{x:.1f}' for x in result['load_average'])}. `python -m bench.upgrade`.",
        "",
        "| size | bytes | of the full bundle |",
        "| --- | --- | --- |",
        f"| full bundle (v2) | {sizes['full_bundle_bytes']:,} | 1 |",
        f"| delta v2 against v1 (a one-line patch change) | {sizes['delta_bytes']:,} | "
        f"{100 * sizes['delta_ratio']:.4f} % |",
        f"| delta v3 against v1 (one wheel changed) | {sizes['delta3_bytes']:,} | "
        f"{100 * sizes['delta3_bytes'] / sizes['full_bundle_bytes']:.4f} % |",
    ]
    anchor = result["rsync"]
    if anchor.get("available"):
        lines.append(
            f"| rsync --stats, v1 -> v2 extracted: bytes sent | {anchor['bytes_sent']:,} | "
            f"delta / rsync sent {anchor['delta_vs_rsync_sent']:.3f} |"
        )
    else:
        lines.append(f"| rsync | {anchor.get('note', 'not run')} | |")
    lines += ["", "| contender | median s | min-max s | runs s |", "| --- | --- | --- | --- |"]
    for item in group["series"]:
        runs = ", ".join(f"{s:.2f}" for s in item["runs_s"])
        lines.append(
            f"| {item['name']} | {item['median_s']:.2f} | {item['min_s']:.2f}-"
            f"{item['max_s']:.2f} | {runs} |"
        )
    lines += ["", "| ratio (paired, median) | value | min-max |", "| --- | --- | --- |"]
    for name, ratio in group["ratios"].items():
        lines.append(f"| {name} | {ratio['median']:.3f} | {ratio['min']:.3f}-{ratio['max']:.3f} |")
    lines += [
        "",
        "| one-wheel upgrade, run | files of T | of the distribution | rewritten | added | "
        "removed | outside it |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for index, count in enumerate(group["one_wheel"], 1):
        lines.append(
            f"| {index} | {count['files']:,} | {count['distribution_files']} | "
            f"{count['rewritten']} | {count['added']} | {count['removed']} | "
            f"{len(count['outside'])} |"
        )
    lines += ["", "| goal | measured | met |", "| --- | --- | --- |"]
    for name, goal in result["goals"].items():
        lines.append(f"| {name} | {goal['value']} | {'yes' if goal['met'] else 'NO'} |")
    packs = ", ".join(f"{k} {v:.1f} s" for k, v in result["pack_seconds"].items())
    lines += ["", f"Packs (untimed inputs, one run each): {packs}."]
    for key, label in (("delta2", "v2"), ("delta3", "v3")):
        members = result["carried"][key]
        lines.append(
            f"The delta {label} carries {len(members)} files: "
            + ", ".join(f"{m} ({size:,} B)" for m, size in sorted(members.items()))
            + "."
        )
    return "\n".join(lines) + "\n"


def measure(
    workspace: Workspace,
    work: Path,
    *,
    runs: int,
    warmup: bool,
    wheels: str,
    offline: bool,
    rsync: bool,
    unpack_args: Sequence[str],
    wheel_dist: str | None,
    say: Callable[[str], None],
) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    bundles_dir = work / "bundles"
    bundles_dir.mkdir()
    say("packing versions 1 and 2 (a one-line patch change), in full and as a delta")
    change = pack_patch_change(workspace, bundles_dir, wheels=wheels, offline=offline)
    site = site_packages(workspace.python)
    name = pick_distribution(site, _patched_dists(change.v1, f"{change.name}-1"), wanted=wheel_dist)
    bumped = bump_distribution(site, name, work / "bump-backup")
    say(f"packing version 3 ({name} {bumped.old_version} -> {bumped.new_version}) as a delta")
    delta3 = bundles_dir / f"{change.name}-3.delta.tar"
    try:
        change.seconds["delta_3"] = repro(
            "pack", str(workspace.root), "--name", change.name, "--version", "3",
            "-o", str(delta3), "--base", str(change.v1), wheels=wheels, offline=offline,
        )  # fmt: skip
    finally:
        bumped.restore()
    bundles = Bundles(change.v1, change.full2, change.delta, delta3)
    target = Target(work / "t", bundles, unpack_args)
    say("unpacking version 1 at the target (untimed)")
    target.hold("1")
    target_site = site_packages(target.path / "venv" / "bin" / "python")
    group = run_group(target, work / "fresh", target_site, name, runs, warmup, say)
    sizes = delta_sizes(change.full2, change.delta)
    sizes["delta3_bytes"] = delta3.stat().st_size
    carried = {"delta2": _members(change.delta), "delta3": _members(delta3)}
    files, size = tree_bytes(workspace.venv)
    shutil.rmtree(target.path)
    if rsync:
        say("rsync of the two bundles, extracted")
        anchor = rsync_anchor(change.v1, change.full2, work, delta_bytes=sizes["delta_bytes"])
    else:
        anchor = {"available": False, "note": "--no-rsync"}
    shutil.rmtree(work)
    return {
        "workspace": str(workspace.root),
        "venv_files": files,
        "venv_bytes": size,
        "wheels": wheels,
        "unpack_args": list(unpack_args),
        "runs": runs,
        "warmup": warmup,
        "sizes": sizes,
        "carried": carried,
        "rsync": anchor,
        "pack_seconds": {k: round(v, 2) for k, v in change.seconds.items()},
        "one_wheel": {"name": name, "old": bumped.old_version, "new": bumped.new_version},
        "group": group,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.upgrade",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--size", choices=("small", "full"), default="small")
    parser.add_argument("--venv", type=Path, help="measure a copy of this venv instead")
    parser.add_argument("--cache", type=Path, default=None, help="[~/.cache/repro-bench]")
    parser.add_argument("--work", type=Path, help="bundles and targets [CACHE/work-upgrade-*]")
    parser.add_argument("--results", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--machine-name", default=socket.gethostname().split(".")[0])
    parser.add_argument("--runs", type=int, default=3, help="timed runs per contender [3]")
    parser.add_argument("--warmup", type=int, choices=(0, 1), default=1)
    parser.add_argument("--wheels", choices=("auto", "all", "none"), default="all")
    parser.add_argument("--offline", action="store_true", help="pack --offline (no index)")
    parser.add_argument("--no-rsync", action="store_true", help="leave the rsync anchor out")
    parser.add_argument("--wheel-dist", help="the distribution the one-wheel upgrade changes")
    parser.add_argument(
        "--unpack-arg",
        action="append",
        default=[],
        help="one more argument of every unpack (repeatable), e.g. --unpack-arg=--cpu",
    )
    parser.add_argument(
        "--table", type=Path, help="measure nothing: rewrite the .md of this results file"
    )
    args = parser.parse_args(argv)
    if args.table is not None:
        loaded = json.loads(args.table.read_text())
        args.table.with_suffix(".md").write_text(render(loaded))
        print(render(loaded))
        return 0
    cache = args.cache or default_cache()
    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    if args.venv is not None:
        workspace = adopt_workspace(args.venv, cache, say=say)
    else:
        workspace = build_workspace(args.size, cache, say=say)
    result = measure(
        workspace,
        args.work or cache / f"work-upgrade-{workspace.size}",
        runs=args.runs,
        warmup=bool(args.warmup),
        wheels=args.wheels,
        offline=args.offline,
        rsync=not args.no_rsync,
        unpack_args=args.unpack_arg,
        wheel_dist=args.wheel_dist,
        say=say,
    )
    result.update(
        machine=args.machine_name,
        environment="venv" if args.venv is not None else args.size,
        date=datetime.date.today().isoformat(),
        cores=os.cpu_count(),
        platform=platform.platform(),
        load_average=list(os.getloadavg()),
    )
    result["goals"] = goals(result)
    table = render(result)
    print(table)
    args.results.mkdir(parents=True, exist_ok=True)
    stem = f"{result['date']}-{args.machine_name}-upgrade"
    (args.results / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.results / f"{stem}.md").write_text(table)
    outside = any(c["outside"] for c in result["group"]["one_wheel"])
    return 1 if outside else 0


if __name__ == "__main__":
    raise SystemExit(main())
