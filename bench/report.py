"""Goals of issue 8 held against the measurements, the results file and the Markdown table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# bench/ceiling.py: threads that only read and sha256 the files, what any Python hasher
# pays here (reading through the page cache costs CPU that the limit leaves out)
READ_HASH = "read+sha256 ceiling (bench/ceiling.py)"
WRITE_CEILING = "write ceiling: cat | dd oflag=direct, sync"
# results files written before 2026-12-01 wrote through the page cache
OLD_WRITE_CEILING = "write ceiling: cat > file, fsync"
PACK_PAGE_CACHE = "repro pack --wheels all, REPRO_DIRECT_IO=0"
PACK_REHASH = "repro pack --wheels all --rehash"  # a first pack: no scan cache
PACK_NONE = "repro pack --wheels none --rehash"
OLD_PACK_NONE = "repro pack --wheels none"  # results files before 2026-12-01 (evening)
UNPACK_COLD_DIRECT = "repro unpack --offline, cold uv cache, REPRO_DIRECT_IO=1"
UNPACK_WARM_UV = "repro unpack --offline --installer uv, its cache as it is"
# no "|" in the names: they are cells of the Markdown table
ROUNDTRIP = "repro pack -o - piped into repro unpack -"
TAR_ROUNDTRIP = "tar cf - piped into tar xf -"
ROUNDTRIP_STAGED = "the same, up to the install (unpack - --dry-run)"
# the two sides of the round trip timed apart: which one sets its pace
STREAM_PACK = "repro pack -o - into /dev/null"
STREAM_UNPACK = "cat bundle piped into repro unpack -"

RSS_GOAL_MIB = 150.0


def _series(group: dict[str, Any], name: str) -> dict[str, Any] | None:
    for item in group.get("contenders", []):
        if item["name"] == name:
            return dict(item)
    return None


def _ratio(group: dict[str, Any], a: str, b: str) -> float | None:
    for item in group.get("ratios", []):
        if item["a"] == a and item["b"] == b:
            return float(item["median"])
    return None


def limits(size_result: dict[str, Any]) -> None:
    """Add to check and scan the machine's limit: max(hash time at hashlib x cores, cat)."""
    parallel_default = (
        size_result.get("hashlib_parallel_bytes_per_s") or size_result["hashlib_bytes_per_s"]
    )
    cores = size_result["machine"]["cores"]
    for group_name, payload_key in (("check", "bundle_payload_bytes"), ("scan", "venv_bytes")):
        group = size_result["groups"].get(group_name)
        if not group:
            continue
        payload = size_result["facts"][payload_key]
        # the throughputs of the run that measured this group (--only runs merge)
        own = group.get("hashlib", {})
        per_core = own.get("bytes_per_s", size_result["hashlib_bytes_per_s"])
        parallel = own.get("parallel_bytes_per_s") or parallel_default
        read = _series(group, "cat (read ceiling)")
        hash_s = payload / (per_core * cores)
        limit_s = max(hash_s, read["median_s"] if read else 0.0)
        available_s = max(payload / parallel, read["median_s"] if read else 0.0)
        repro = _series(group, f"repro {group_name}")
        group["limit"] = {
            "payload_bytes": payload,
            "hash_limit_s": round(hash_s, 3),
            "read_s": read["median_s"] if read else None,
            "limit_s": round(limit_s, 3),
            "repro_fraction_of_limit": round(limit_s / repro["median_s"], 3) if repro else None,
            "repro_gb_per_s": round(payload / repro["median_s"] / 1e9, 3) if repro else None,
            # what the cores gave during the run (a shared machine gives less than x cores)
            "available_limit_s": round(available_s, 3),
            "repro_fraction_of_available": (
                round(available_s / repro["median_s"], 3) if repro else None
            ),
        }


def _at_least(value: float | None, goal: float) -> bool | None:
    return None if value is None else value >= goal


def _at_most(value: float | None, goal: float) -> bool | None:
    return None if value is None else value <= goal


def goals(size_result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal of the issue: the measured value, the goal, met or not."""
    groups = size_result["groups"]
    found: list[dict[str, Any]] = []

    def add(what: str, value: float | None, goal: str, met: bool | None) -> None:
        found.append(_goal(what, value, goal, met))

    if "check" in groups:
        r = _ratio(groups["check"], "repro check", "sha256sum -c")
        speedup = 1 / r if r else None
        add("check: speed-up over sha256sum -c", speedup, ">= 6x", _at_least(speedup, 6))
        frac = groups["check"].get("limit", {}).get("repro_fraction_of_limit")
        add("check: fraction of limit", frac, ">= 0.8", None if frac is None else frac >= 0.8)
        frac = groups["check"].get("limit", {}).get("repro_fraction_of_available")
        add("check: fraction of available limit (info)", frac, ">= 0.8", _at_least(frac, 0.8))
        r = _ratio(groups["check"], "repro check", READ_HASH)
        add("check / read+sha256 ceiling (info)", r, "-", None)
    if "scan" in groups:
        frac = groups["scan"].get("limit", {}).get("repro_fraction_of_limit")
        add("scan: fraction of limit", frac, ">= 0.8", None if frac is None else frac >= 0.8)
        frac = groups["scan"].get("limit", {}).get("repro_fraction_of_available")
        add("scan: fraction of available limit (info)", frac, ">= 0.8", _at_least(frac, 0.8))
        r = _ratio(groups["scan"], "repro scan", READ_HASH)
        add("scan / read+sha256 ceiling (info)", r, "-", None)
        r = _ratio(groups["scan"], PACK_NONE, "repro scan")
        if r is None:
            r = _ratio(groups["scan"], OLD_PACK_NONE, "repro scan")
        add("pack --wheels none --rehash / scan", r, "<= 1.1", _at_most(r, 1.1))
    if "pack" in groups:
        r = _ratio(groups["pack"], "repro pack --wheels all", "tar cf + sha256sum")
        add("pack --wheels all / (tar cf + sha256sum)", r, "<= 1.0", _at_most(r, 1.0))
        r = _ratio(groups["pack"], "repro pack --wheels all", "venv-pack --format tar")
        add("pack --wheels all / venv-pack", r, "<= 0.5", None if r is None else r <= 0.5)
        r = _ratio(
            groups["pack"],
            "repro pack --wheels all",
            "venv-pack --format tar, then sync of its output",
        )
        add("pack --wheels all / (venv-pack + sync) (info)", r, "<= 0.5", _at_most(r, 0.5))
        r = _ratio(groups["pack"], "repro pack --wheels all", WRITE_CEILING)
        if r is None:
            r = _ratio(groups["pack"], "repro pack --wheels all", OLD_WRITE_CEILING)
        add("pack --wheels all / write ceiling (info)", r, "-", None)
        r = _ratio(groups["pack"], PACK_PAGE_CACHE, "venv-pack --format tar")
        add("pack --wheels all, page cache / venv-pack (info)", r, "<= 0.5", _at_most(r, 0.5))
        r = _ratio(groups["pack"], PACK_REHASH, "tar cf + sha256sum")
        add("first pack (--rehash) / (tar cf + sha256sum)", r, "<= 1.0", _at_most(r, 1.0))
        r = _ratio(groups["pack"], PACK_REHASH, "venv-pack --format tar")
        add("first pack (--rehash) / venv-pack", r, "<= 0.5", _at_most(r, 0.5))
    judged: list[tuple[str, float | None, str, float | None]] = []
    if "unpack" in groups:
        for name, label in (
            ("repro unpack --offline", "unpack"),
            ("repro unpack --offline, cold uv cache", "unpack, cold uv cache"),
            (UNPACK_COLD_DIRECT, "unpack, cold uv cache, direct writes (info)"),
        ):
            r = _ratio(groups["unpack"], name, "tar xf")
            if r is not None:
                add(f"{label} / tar xf", r, "<= 1.5", r <= 1.5)
            r = _ratio(groups["unpack"], name, "venv + pip install --no-index")
            if r is not None:
                add(f"{label}: speed-up over pip", 1 / r, ">= 3x", 1 / r >= 3)
        disk = groups["unpack"].get("disk") or {}
        judged += [
            (
                "unpack / unpack by uv, its cache as it is (info)",
                _ratio(groups["unpack"], "repro unpack --offline", UNPACK_WARM_UV),
                "-",
                None,
            ),
            (
                "unpack's disk peak / venv",
                (disk.get("peak_over_venv") or {}).get("median"),
                "<= 1.2",
                1.2,
            ),
            ("unpack's preflight need / venv", disk.get("preflight_need_over_venv"), "<= 1.2", 1.2),
        ]
    if "roundtrip" in groups:
        judged += [
            (
                "streamed round trip / tar pipe",
                _ratio(groups["roundtrip"], ROUNDTRIP, TAR_ROUNDTRIP),
                "<= 1.0",
                1.0,
            ),
            (
                "streamed round trip up to the install / tar pipe (info)",
                _ratio(groups["roundtrip"], ROUNDTRIP_STAGED, TAR_ROUNDTRIP),
                "-",
                None,
            ),
            (
                "pack -o - alone / streamed round trip (info)",
                _ratio(groups["roundtrip"], STREAM_PACK, ROUNDTRIP),
                "-",
                None,
            ),
            (
                "unpack - of a bundle file alone / streamed round trip (info)",
                _ratio(groups["roundtrip"], STREAM_UNPACK, ROUNDTRIP),
                "-",
                None,
            ),
        ]
    for what, value, goal, bound in judged:
        if value is not None:  # results files from before these were measured
            add(what, value, goal, None if bound is None else _at_most(value, bound))
    found += _scaling_goals(size_result)
    for group_name, contender in (
        ("pack", "repro pack --wheels all"),
        ("check", "repro check"),
        ("unpack", "repro unpack --offline"),
    ):
        found += _rss_goal(groups.get(group_name, {}), contender)
    return found


def _rss_goal(group: dict[str, Any], contender: str) -> list[dict[str, Any]]:
    """The goal on `contender`'s peak RSS, if the group ran it."""
    item = _series(group, contender)
    if item is None:
        return []
    rss = float(item["peak_rss_mib"])
    return [
        _goal(f"peak RSS of {contender} (MiB)", rss, f"<= {RSS_GOAL_MIB:.0f}",
              _at_most(rss, RSS_GOAL_MIB))
    ]  # fmt: skip


def _goal(what: str, value: float | None, goal: str, met: bool | None) -> dict[str, Any]:
    return {"what": what, "value": None if value is None else round(value, 3), "goal": goal,
            "met": met}  # fmt: skip


def _scaling_goals(size_result: dict[str, Any]) -> list[dict[str, Any]]:
    """Linearity: the time of N x the bytes over N x the time of 1 x (1.0: linear; below 1:
    fixed costs spread thinner; above: the page cache no longer holds it, or worse)."""
    groups = size_result["groups"]
    facts = size_result.get("facts", {})
    found: list[dict[str, Any]] = []
    group = groups.get("scaling-pack")
    if group:
        copies = group["payload"]["copies"]
        grow = group["payload"]["bytes"] / facts["venv_bytes"]
        big = f"{copies}x"
        for label, a, b in (
            ("first pack", f"{PACK_REHASH} {big}", f"{PACK_REHASH} 1x"),
            ("first pack --jobs 1", f"{PACK_REHASH} {big} --jobs 1", f"{PACK_REHASH} 1x --jobs 1"),
            ("scan", f"repro scan {big}", "repro scan 1x"),
        ):
            r = _ratio(group, a, b)
            per_byte = None if r is None else r / grow
            found.append(_goal(f"{label}: {big} / 1x time per byte (info)", per_byte, "~1", None))
        r = _ratio(group, f"{PACK_REHASH} {big}", f"tar cf + sha256sum {big}")
        found.append(
            _goal(f"first pack {big} / (tar cf + sha256sum {big})", r, "<= 1.0", _at_most(r, 1.0))
        )
        r = _ratio(group, f"{PACK_REHASH} {big}", f"{PACK_REHASH} {big} --jobs 1")
        found.append(_goal(f"first pack {big}: all cores / --jobs 1 (info)", r, "-", None))
        for name in (f"{PACK_REHASH} 1x", f"{PACK_REHASH} {big}"):
            found += _rss_goal(group, name)
    group = groups.get("scaling")
    one = _series(groups.get("check", {}), "repro check")
    if group and one and "payload" in group:
        copies = group["payload"]["copies"]
        many = _series(group, f"repro check {copies}x")
        grow = group["payload"]["bytes"] / facts["bundle_payload_bytes"]
        per_byte = many["median_s"] / one["median_s"] / grow if many else None
        found.append(
            _goal(f"check: {copies}x / 1x time per byte (info, medians)", per_byte, "~1", None)
        )
    return found


def _scaled_rss_row(size: str, result: dict[str, Any]) -> list[str]:
    """The synthetic N-fold environment's first pack in the table of RSS against size."""
    scaled = result["groups"].get("scaling-pack")
    if not scaled:
        return []
    copies = scaled["payload"]["copies"]
    item = _series(scaled, f"{PACK_REHASH} {copies}x")
    if item is None:
        return []
    grown = scaled["payload"]["bytes"] / result["facts"]["venv_bytes"]
    bundle_gb = result["facts"]["bundle_bytes"] * grown / 1e9
    return [
        f"| {size} x{copies} (synthetic, {scaled['payload']['files']} files) "
        f"| {bundle_gb:.2f} (est.) | {item['peak_rss_mib']:.0f} (first pack) | - | - |"
    ]


def merge(path: Path, size: str, size_result: dict[str, Any]) -> dict[str, Any]:
    """The results file with this size's results in it (other sizes from earlier runs kept)."""
    document: dict[str, Any] = {"sizes": {}}
    if path.exists():
        try:
            document = json.loads(path.read_text())
        except json.JSONDecodeError:
            document = {"sizes": {}}
    sizes = document.setdefault("sizes", {})
    earlier = sizes.get(size)
    if earlier is not None:
        # a run of some groups (--only) keeps the other groups of an earlier run
        groups = {**earlier.get("groups", {}), **size_result["groups"]}
        runs = {name: earlier.get("group_runs", {}).get(name) for name in earlier["groups"]}
        size_result = {**size_result, "groups": groups}
        size_result["group_runs"] = {**runs, **size_result.get("group_runs", {})}
        limits(size_result)
        size_result["goals"] = goals(size_result)
    sizes[size] = size_result
    document["rss_note"] = (
        "peak RSS: GNU time %M (ru_maxrss of the contender from wait4, which Linux folds "
        "over every reaped descendant): the largest single process of the tree"
    )
    document["ratio_note"] = "ratios: run i of A over run i of B, then the median (min-max)"
    return document


def _cell(text: str) -> str:
    """`text` as one Markdown table cell (a path may hold a "|")."""
    return text.replace("|", "\\|")


def _disk_rows(result: dict[str, Any]) -> list[str]:
    """unpack's disk (bench/disk.py): its sampled peak and preflight's stated need, in GB
    and against the venv's allocated size."""
    disk = result["groups"].get("unpack", {}).get("disk")
    if not disk:
        return []
    venv = disk["venv_allocated_bytes"]
    peaks = disk["peak_bytes_runs"]
    over = disk["peak_over_venv"]
    return [
        "",
        f"| unpack's disk (`{disk['contender']}`) | GB | / venv |",
        "| --- | --- | --- |",
        f"| venv, allocated (st_blocks x 512) | {venv / 1e9:.2f} | 1.00 |",
        f"| disk peak / venv: statvfs used, peak less before, median (min-max) "
        f"| {disk['peak_bytes'] / 1e9:.2f} ({min(peaks) / 1e9:.2f}-{max(peaks) / 1e9:.2f}) "
        f"| {over['median']:.2f} ({over['min']:.2f}-{over['max']:.2f}) |",
        f"| preflight need / venv: {_cell(disk['preflight_detail'])} "
        f"| {disk['preflight_need_bytes'] / 1e9:.2f} | {disk['preflight_need_over_venv']:.2f} |",
    ]


def _fmt_s(item: dict[str, Any]) -> str:
    return f"{item['median_s']:.2f} ({item['min_s']:.2f}-{item['max_s']:.2f})"


def table(document: dict[str, Any]) -> str:
    """Markdown: per size, every contender; then the ratios, goals, RSS vs size."""
    lines: list[str] = []
    sizes = document.get("sizes", {})
    for size, result in sizes.items():
        f = result["facts"]
        m = result["machine"]
        lines += [
            f"### {size}: venv {f['venv_bytes'] / 1e9:.2f} GB in {f['venv_files']} files, "
            f"bundle {f['bundle_bytes'] / 1e9:.2f} GB; {m['cores']} cores, "
            f"hashlib {result['hashlib_bytes_per_s'] / 1e9:.2f} GB/s on "
            f"1 core, {result.get('hashlib_parallel_bytes_per_s', 0) / 1e9:.2f} GB/s on "
            f"{m['cores']} threads; load average {m['load_average'][0]:.1f}",
            "",
            "| group | contender | runs | wall s, median (min-max) | spread % | peak RSS MiB |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for group_name, group in result["groups"].items():
            for item in group["contenders"]:
                lines.append(
                    f"| {group_name} | `{item['name']}` | {len(item['runs_s'])} | {_fmt_s(item)} "
                    f"| {item['spread_pct']} "
                    f"| {item['peak_rss_mib']:.0f} |"
                )
            limit = group.get("limit")
            if limit:
                lines.append(
                    f"| {group_name} | limit: max(hash at hashlib x cores, cat) | "
                    f"| {limit['limit_s']:.2f} | | |"
                )
                lines.append(
                    f"| {group_name} | limit at the hashlib throughput all threads got in this "
                    f"run | | {limit['available_limit_s']:.2f} | | |"
                )
        lines += ["", "| ratio (A / B, paired) | median | min-max |", "| --- | --- | --- |"]
        for group in result["groups"].values():
            for ratio in group["ratios"]:
                lines.append(
                    f"| `{ratio['a']}` / `{ratio['b']}` | {ratio['median']:.2f} | "
                    f"{ratio['min']:.2f}-{ratio['max']:.2f} |"
                )
        lines += _disk_rows(result)
        lines += ["", "| goal | measured | goal | met |", "| --- | --- | --- | --- |"]
        for goal in result["goals"]:
            met = {True: "yes", False: "**no**", None: "n/a"}[goal["met"]]
            lines.append(f"| {goal['what']} | {goal['value']} | {goal['goal']} | {met} |")
        meter = result.get("rss_meter", {})
        if meter and not str(meter.get("meter", "")).startswith("GNU time"):
            lines += ["", f"- peak RSS by {meter['meter']}: at least {meter['floor_mib']} MiB"]
        if result.get("left_out"):
            lines += ["", *(f"- left out: {why}" for why in result["left_out"])]
        lines.append("")
    lines += [
        "### peak RSS (MiB) vs bundle size",
        "",
        "| size | bundle GB | pack | check | unpack |",
        "| --- | --- | --- | --- | --- |",
    ]
    for size, result in sizes.items():
        row = [size, f"{result['facts']['bundle_bytes'] / 1e9:.2f}"]
        for group_name, contender in (
            ("pack", "repro pack --wheels all"),
            ("check", "repro check"),
            ("unpack", "repro unpack --offline"),
        ):
            item = _series(result["groups"].get(group_name, {}), contender)
            if item is None and group_name == "pack":
                scan = result["groups"].get("scan", {})
                none = _series(scan, PACK_NONE) or _series(scan, OLD_PACK_NONE)
                row.append(f"{none['peak_rss_mib']:.0f} (--wheels none)" if none else "-")
                continue
            row.append(f"{item['peak_rss_mib']:.0f}" if item else "-")
        lines.append("| " + " | ".join(row) + " |")
        lines += _scaled_rss_row(size, result)
    lines += ["", f"_{document.get('rss_note', '')}; {document.get('ratio_note', '')}._", ""]
    return "\n".join(lines)
