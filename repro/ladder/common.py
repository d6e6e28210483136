"""Helpers shared by the rungs: turning a script run into a RungResult."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from repro.ladder.interp import ScriptRun
from repro.ladder.types import RungResult, RungStatus


def skipped(name: str, reason: str, facts: Mapping[str, Any] | None = None) -> RungResult:
    return RungResult(name, RungStatus.SKIP, 0.0, reason, facts or {})


def failed(
    name: str,
    run: ScriptRun,
    summary: str,
    hint: str | None,
    facts: Mapping[str, Any] | None = None,
    extra_tail: tuple[str, ...] = (),
) -> RungResult:
    return RungResult(
        name,
        RungStatus.FAIL,
        run.duration_s,
        summary,
        facts or (run.document or {}).get("facts", {}),
        hint=hint,
        output_tail=extra_tail + run.output_tail,
    )


def script_problem(name: str, run: ScriptRun, timeout: float) -> RungResult | None:
    """A failure when the script itself did not finish properly; None when it did."""
    if run.timed_out:
        return failed(
            name,
            run,
            f"timed out after {timeout:g} s",
            "the check hung: a GPU that does not answer, a stuck driver or a compile "
            "that never ends; raise the timeout only if it is known to be slow",
        )
    if run.document is None:
        last = run.output_tail[-1] if run.output_tail else "(no output)"
        return failed(
            name,
            run,
            f"the check crashed (exit code {run.returncode}): {last}",
            missing_module_hint(run.output_tail),
        )
    return None


def missing_module_hint(tail: tuple[str, ...]) -> str | None:
    for line in reversed(tail):
        if "ModuleNotFoundError" in line or "ImportError" in line:
            return f"an import failed in the target environment: {line.strip()}"
    return None


def facts_of(run: ScriptRun) -> dict[str, Any]:
    document = run.document or {}
    facts = document.get("facts", {})
    return dict(facts) if isinstance(facts, dict) else {}
