"""The numbers of a bench/gpu/kernels.sh run, from the files it left in OUT.

    python kernels_summary.py OUT     (env: SO_OLD, ARCHS_NEW, INSPECT_LINES, CHECK_BEFORE)

Prints one line per claim: what was expected, what came out, and `ok` or `NOT AS
EXPECTED`, then the unpack's steps, the kernels rung and the times. Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def _load(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _claim(text: str, ok: bool, got: object) -> str:
    return f"[{'ok' if ok else 'NOT AS EXPECTED'}] {text}: {got}"


def _rung(report: dict[str, Any], name: str) -> dict[str, Any]:
    smoke = report.get("smoke") or {}
    for rung in (smoke.get("ladder") or {}).get("rungs", []):
        if rung.get("name") == name:
            return dict(rung)
    return {}


def summary(out: Path, environ: dict[str, str]) -> list[str]:
    times = _load(out / "times.json")
    ms, rc = times.get("ms", {}), times.get("exit", {})
    report = _load(out / "unpack-report.json")
    inspect_lines = environ.get("INSPECT_LINES", "")
    archs_new = environ.get("ARCHS_NEW", "")
    nosource = (out / "nosource.txt").read_text(encoding="utf-8", errors="replace")
    before = environ.get("CHECK_BEFORE", "")
    kernels = _rung(report, "kernels")
    lines = [
        _claim("the sm_80 build fails on the H200 before the move (exit != 0)",
               rc.get("check_before", 0) != 0, f"exit {rc.get('check_before')}: {before}"),
        _claim("repro inspect --gpu H200 exits 4", rc.get("inspect") == 4, rc.get("inspect")),
        _claim("inspect says none for reprokernel", "none" in inspect_lines.lower(),
               inspect_lines.replace("\n", " | ")),
        _claim("repro unpack --offline (rebuild, ladder) exits 0", rc.get("unpack") == 0,
               rc.get("unpack")),
        _claim("the rebuilt .so holds sm_90", "sm_90" in archs_new, archs_new),
        _claim("the kernels rung passed", kernels.get("status") == "pass",
               f"{kernels.get('status')}: {kernels.get('summary')}"),
        _claim("repro verify of the rebuilt target exits 0", rc.get("verify") == 0,
               rc.get("verify")),
        _claim("without the source, repro inspect --gpu H200 exits 4",
               rc.get("inspect_nosource") == 4, rc.get("inspect_nosource")),
        _claim("without the source, repro unpack stops at the preflight (exit 1)",
               rc.get("unpack_nosource") == 1, rc.get("unpack_nosource")),
        _claim("its message names reprokernel", "reprokernel" in nosource,
               next((x.strip() for x in nosource.splitlines() if "reprokernel" in x), "")),
        "",
        f"the sm_80 build: {environ.get('SO_OLD', '')}",
        "unpack steps:",
    ]  # fmt: skip
    for step in report.get("steps", []):
        facts = step.get("facts") or {}
        shown = {k: v for k, v in facts.items() if "kernel" in step.get("name", "") or "_s" in k}
        extra = json.dumps(shown) if shown else ""
        head = f"  {step.get('status', '?'):8} {step.get('name', '?'):10}"
        lines.append(f"{head} {step.get('detail', '')} {extra}".rstrip())
    for check in (report.get("preflight") or {}).get("checks", []):
        text = json.dumps(check)
        if "reprokernel" in text or "gpu" in text.lower() or "kernel" in text.lower():
            lines.append(f"  preflight {check.get('status')}: {check.get('name')}: "
                         f"{check.get('detail')}")  # fmt: skip
    if kernels:
        lines.append(f"kernels rung facts: {json.dumps(kernels.get('facts', {}))}")
        lines.extend(f"  | {line}" for line in kernels.get("output_tail", [])[-5:])
    lines.append("")
    lines.append("wall times (s):")
    for name in ("copy_venv", "build_install", "check_before", "pack", "inspect", "unpack",
                 "verify", "build_wheel", "pack_nosource", "inspect_nosource",
                 "unpack_nosource"):  # fmt: skip
        if name in ms:
            lines.append(f"  {name:17} {ms[name] / 1000:8.2f}   exit {rc.get(name)}")
    lines.append("  (build_wheel: the same one-file compile for one arch, outside repro: the")
    lines.append("   cost the rebuild inside unpack pays)")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(summary(Path(argv[1]), dict(os.environ))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
