"""Climb the ladder: run the rungs in order, stop at the first failure."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from repro.errors import UsageError
from repro.ladder.model import RUNG_NAMES, LadderReport, LadderSpec, RungResult, RungStatus
from repro.ladder.rungs import engine_rung, nccl_rung, python_rung, torch_rung, triton_rung
from repro.ladder.server import server_rung

RungCallback = Callable[[RungResult], None]


def _run_one(name: str, spec: LadderSpec, known: Mapping[str, Any]) -> RungResult:
    if name == "python":
        return python_rung(spec)
    if name == "torch":
        return torch_rung(spec)
    if name == "triton":
        return triton_rung(spec)
    if name == "nccl":
        return nccl_rung(spec, known)
    if name == "engine":
        return engine_rung(spec)
    return server_rung(spec)


def parse_rungs(text: str) -> tuple[str, ...]:
    """``"torch,server"`` -> the rungs in ladder order; unknown names are a usage error."""
    wanted = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in wanted if name not in RUNG_NAMES]
    if unknown or not wanted:
        raise UsageError(
            f"unknown rung(s) in --rungs: {', '.join(unknown) or '(none given)'}",
            hint=f"choose from {', '.join(RUNG_NAMES)}",
        )
    return tuple(name for name in RUNG_NAMES if name in wanted)


def run_ladder(spec: LadderSpec, *, on_rung: RungCallback | None = None) -> LadderReport:
    """Run ``spec.rungs`` (none: every rung) in ladder order; after a failure the rest
    are skipped unless ``spec.keep_going``.  ``on_rung`` sees each result as it completes."""
    results: list[RungResult] = []
    known: dict[str, Any] = {}
    failure: str | None = None
    wanted = spec.rungs or RUNG_NAMES
    for name in (n for n in RUNG_NAMES if n in wanted):
        if failure is not None and not spec.keep_going:
            result = RungResult(name, RungStatus.SKIP, 0.0, f"not run: rung {failure} failed")
        else:
            started = time.monotonic()
            result = _run_one(name, spec, known)
            if result.duration_s == 0.0 and result.status is not RungStatus.SKIP:
                result = _with_duration(result, time.monotonic() - started)
        if name == "torch" and "device_count" in result.facts:
            known["device_count"] = result.facts["device_count"]
        if result.status is RungStatus.FAIL and failure is None:
            failure = name
        results.append(result)
        if on_rung is not None:
            on_rung(result)
    return LadderReport(spec.python, tuple(results))


def _with_duration(result: RungResult, duration: float) -> RungResult:
    return replace(result, duration_s=duration)
