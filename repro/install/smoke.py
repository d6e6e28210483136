"""The unpack's last step: the smoke ladder run in the rebuilt environment."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from repro.bundle import BundleInfo
from repro.ladder import RUNG_NAMES, RungResult, RungStatus, run_ladder
from repro.ladder.spec import spec_from_bundle_dir

NO_EXEC_RUNGS = ("python",)
SmokeStep = Callable[[Path, Path, BundleInfo], dict[str, Any]]


def ladder_step(
    *,
    cpu: bool,
    no_exec: bool,
    log_dir: Path | None,
    on_rung: Callable[[RungResult], None] | None = None,
) -> SmokeStep:
    """A smoke step for `unpack`; with --no-exec only the interpreter check runs: the
    other rungs import the installed (and patched) stack, and the server rung runs the
    bundle's own launch command."""

    def step(interpreter: Path, bundle_dir: Path, info: BundleInfo) -> dict[str, Any]:
        rungs = NO_EXEC_RUNGS if no_exec else RUNG_NAMES
        spec = spec_from_bundle_dir(bundle_dir, interpreter, cpu=cpu, rungs=rungs, log_dir=log_dir)
        report = run_ladder(spec, on_rung=on_rung)
        failed = [r for r in report.results if r.status is RungStatus.FAIL]
        summary = "; ".join(f"{r.name}: {r.summary}" for r in failed) or "every rung passed"
        return {"passed": report.ok, "summary": summary, "ladder": report.to_json()}

    return step
