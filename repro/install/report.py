"""The unpack report (TARGET/.repro/unpack-report.json, `unpack --json`), and the
recorder that writes each step into it and into state.toml.

The report is a frozen value; the recorder holds the current one and replaces it as
steps finish, so a run cut short by an error saves exactly what it got to. The JSON
is read by tests, `repro` users' scripts and the Ansible module in contrib/ansible:
its keys and their order stay as they are.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from repro.errors import ReproError
from repro.install.deploy.models import ModelCheck
from repro.install.deploy.services import RequiredSecret
from repro.install.drift import Drift
from repro.install.options import Events
from repro.install.preflight import PreflightReport
from repro.install.smoke import SmokeResult
from repro.install.state import STATE_DIR, UnpackState
from repro.install.transaction.atomic import atomic_write
from repro.install.transaction.patching import PatchResult

StepStatus = Literal["done", "skipped", "failed", "already done"]
REPORT = "unpack-report.json"
# Steps that write into the target, recorded as started before they run, so that a rerun
# finds what a cut-short one left (models only reads; smoke writes only its logs).
UNDONE_WHEN_CUT_SHORT = frozenset(
    {"venv", "install", "kernels", "patch", "workspace", "caches", "services"}
)


@dataclass(frozen=True)
class StepReport:
    name: str
    status: StepStatus
    detail: str = ""
    facts: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "detail": self.detail,
            "facts": dict(self.facts),
        }


@dataclass(frozen=True)
class UnpackReport:
    bundle: str
    name: str = ""
    version: str = ""
    target: str = ""
    steps: tuple[StepReport, ...] = ()
    preflight: PreflightReport | None = None
    patches: PatchResult | None = None
    models: tuple[ModelCheck, ...] = ()
    smoke: SmokeResult | None = None
    changed: bool = False
    plan: str | None = None  # --dry-run: what a real run would do
    pending: tuple[str, ...] | None = None  # --dry-run: the steps a real run would do
    venv: str = ""
    drift: tuple[Drift, ...] = ()  # a rerun: what changed since
    would_run: tuple[str, ...] = ()  # --no-exec: what was not run
    secrets: tuple[RequiredSecret, ...] = ()  # credentials units need
    upgrade: dict[str, Any] | None = None  # an upgrade in place: what changed, what not

    def with_step(self, step: StepReport) -> UnpackReport:
        return replace(self, steps=(*self.steps, step))

    def to_json(self) -> dict[str, Any]:
        return {
            "bundle": self.bundle,
            "name": self.name,
            "version": self.version,
            "target": self.target,
            "venv": self.venv,
            "changed": self.changed,
            "drift": [d.to_json() for d in self.drift],
            "plan": self.plan,
            "pending": list(self.pending) if self.pending is not None else None,
            "steps": [s.to_json() for s in self.steps],
            "preflight": self.preflight.to_json() if self.preflight else None,
            "patches": self.patches.to_json() if self.patches else None,
            "models": [m.to_json() for m in self.models],
            "smoke": self.smoke.to_json() if self.smoke is not None else None,
            "would_run": list(self.would_run),
            "secrets": [s.to_json() for s in self.secrets],
            "upgrade": self.upgrade,
        }


@dataclass(frozen=True)
class StageResult:
    """What a finished stage gives the run: its step's detail, the facts state.toml
    keeps for it, and the report section it fills, if any. `failure`: the stage ran
    to its end and its verdict is an error (the ladder failed), raised once what the
    stage found is in the report."""

    detail: str
    facts: Mapping[str, Any] = field(default_factory=dict)
    status: Literal["done", "skipped"] = "done"
    patches: PatchResult | None = None
    models: tuple[ModelCheck, ...] | None = None
    smoke: SmokeResult | None = None
    would_run: tuple[str, ...] = ()  # --no-exec: commands printed, not run
    failure: ReproError | None = None


class StepRecorder:
    """One unpack run's record: the state, the report, and how steps are recorded.

    The one mutable part of a run: each stage is a function of frozen inputs, and
    what it returns is recorded here, in state.toml and in the report."""

    def __init__(self, report: UnpackReport, state: UnpackState, events: Events) -> None:
        self.report = report
        self.state = state
        self.events = events
        self.running: str | None = None

    def skip_if_done(self, step: str) -> bool:
        """True when `step` finished in an earlier run; otherwise it starts now, and is
        recorded as started before it changes anything."""
        if self.state.is_done(step):
            self.report = self.report.with_step(StepReport(step, "already done"))
            self.events(step, "already done", "")
            return True
        self.running = step
        if step in UNDONE_WHEN_CUT_SHORT:
            self.state.mark_started(step)
        self.events(step, "started", "")
        return False

    def finish(self, step: str, result: StageResult) -> None:
        """Record what the stage of `step` returned: its report section, then its
        verdict (done, skipped, or its failure raised)."""
        report = replace(self.report, would_run=(*self.report.would_run, *result.would_run))
        if result.patches is not None:
            report = replace(report, patches=result.patches)
        if result.models is not None:
            report = replace(report, models=result.models)
        if result.smoke is not None:
            report = replace(report, smoke=result.smoke)
        self.report = report
        if result.failure is not None:
            raise result.failure
        if result.status == "skipped":
            self.skipped(step, result.detail)
        else:
            self.done(step, result.detail, **result.facts)

    def run(self, step: str, body: Callable[[], StageResult]) -> None:
        """Run the stage of `step` unless an earlier run finished it, and record what it
        returned. An exception that is no ReproError or OSError (which the caller maps
        and records with `failed`) is a bug in repro: it keeps its traceback, but the
        step is recorded as failed first, in state.toml and the saved report, so the
        next run redoes it from clean instead of finding it half recorded."""
        if self.skip_if_done(step):
            return
        try:
            result = body()
        except (ReproError, OSError):
            raise
        except Exception as exc:
            self._record_failure(step, f"internal error: {type(exc).__name__}: {exc}")
            # the traceback that follows is the news; a report a full disk refuses is not
            with contextlib.suppress(OSError):
                self.save()
            raise
        self.finish(step, result)

    def failed(self, error: ReproError) -> None:
        """Record the step that raised, so the saved report and state.toml name it."""
        if self.running is not None:
            self._record_failure(self.running, error.message)

    def _record_failure(self, step: str, message: str) -> None:
        self.running = None
        self.report = self.report.with_step(StepReport(step, "failed", message))
        self.events(step, "failed", message.splitlines()[0] if message else "")
        # unwritable, the state stays `started`: the next run redoes the step all the same
        with contextlib.suppress(OSError):
            self.state.mark_failed(step)

    def done(self, step: str, detail: str, **facts: Any) -> None:
        self.state.mark_done(step, **facts)
        self.report = replace(
            self.report.with_step(StepReport(step, "done", detail, facts)), changed=True
        )
        self.running = None
        self.events(step, "done", detail)

    def skipped(self, step: str, detail: str) -> None:
        # Not recorded as done: a later run without --no-smoke runs the ladder.
        self.state.clear_started()
        self.report = self.report.with_step(StepReport(step, "skipped", detail))
        self.running = None
        self.events(step, "skipped", detail)

    def save(self) -> None:
        path = self.state.target / STATE_DIR / REPORT
        atomic_write(path, (json.dumps(self.report.to_json(), indent=2) + "\n").encode())

    def save_after_failure(self, error: ReproError) -> None:
        """Save the report of a failed run. The step's own error is what the operator
        needs: a report that cannot be written too (the same full disk) is added to its
        message, never put in its place."""
        try:
            self.save()
        except OSError as exc:
            where = self.state.target / STATE_DIR / REPORT
            error.message += (
                f"\n(the report {where} could not be written either: {exc.strerror or exc})"
            )
