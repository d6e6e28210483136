"""Climb the ladder: run the rungs in order, stop at the first failure."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from repro.errors import UsageError
from repro.ladder import registry
from repro.ladder.registry import in_ladder_order, unknown_rungs
from repro.ladder.types import LadderReport, LadderSpec, RungContext, RungResult, RungStatus

RungCallback = Callable[[RungResult], None]


def parse_rungs(text: str) -> tuple[str, ...]:
    """``"torch,server"`` -> the rungs in ladder order; unknown names are a usage error."""
    wanted = [part.strip() for part in text.split(",") if part.strip()]
    unknown = unknown_rungs(wanted)
    if unknown or not wanted:
        raise UsageError(
            f"unknown rung(s) in --rungs: {', '.join(unknown) or '(none given)'}",
            hint=f"choose from {', '.join(registry.RUNG_NAMES)}",
        )
    return in_ladder_order(wanted)


def run_ladder(spec: LadderSpec, *, on_rung: RungCallback | None = None) -> LadderReport:
    """Run ``spec.rungs`` (none: every rung) in ladder order; after a failure the rest
    are skipped unless ``spec.keep_going``.  ``on_rung`` sees each result as it completes."""
    results: list[RungResult] = []
    known: dict[str, Any] = {}
    failure: str | None = None
    wanted = set(spec.rungs or registry.RUNG_NAMES)
    for rung in (r for r in registry.RUNGS if r.name in wanted):
        if failure is not None and not spec.keep_going:
            result = RungResult(rung.name, RungStatus.SKIP, 0.0, f"not run: rung {failure} failed")
        else:
            started = time.monotonic()
            result = rung.run(spec, RungContext(rung.name, registry.SCRIPTS, dict(known)))
            if result.duration_s == 0.0 and result.status is not RungStatus.SKIP:
                result = _with_duration(result, time.monotonic() - started)
        known.update({key: result.facts[key] for key in rung.passes_on if key in result.facts})
        if result.status is RungStatus.FAIL and failure is None:
            failure = rung.name
        results.append(result)
        if on_rung is not None:
            on_rung(result)
    return LadderReport(spec.python, tuple(results))


def _with_duration(result: RungResult, duration: float) -> RungResult:
    return replace(result, duration_s=duration)
