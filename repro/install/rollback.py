"""`repro rollback TARGET [VERSION]`: an upgraded target returned to a kept release.

The releases an upgrade in place kept (repro.install.releases) are undone newest first
until VERSION (default: the previous release) is what the target holds, file for file
as it was, state.toml and the kept bundle included, so `repro verify` agrees. A target
that drifted since it was unpacked is refused unless `force`; a rollback cut short is
finished by running it again (its journal names the releases it undoes), and an
upgrade cut short is undone by it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from repro.errors import InputError, VerificationError
from repro.install.drift import Drift, target_drift
from repro.install.releases import (
    drop_leftovers,
    list_releases,
    pending_rollback,
    plan_rollback,
    run_rollback,
    start_rollback,
    undo_interrupted,
)
from repro.install.state import STATE_DIR, load_state
from repro.install.transaction.atomic import exclusive_lock
from repro.install.unpack import LOCK

Say = Callable[[str], None]


@dataclass(frozen=True)
class RollbackResult:
    target: Path
    version: str  # what the target holds now
    undone: tuple[str, ...]  # the releases undone (their versions), newest first
    left: tuple[str, ...]  # the releases still kept
    overwritten: tuple[Drift, ...] = field(default=())  # --force: the drift thrown away
    finished_interrupted: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "target": str(self.target),
            "version": self.version,
            "undone": list(self.undone),
            "releases_left": list(self.left),
            "overwritten": [d.to_json() for d in self.overwritten],
            "finished_interrupted": self.finished_interrupted,
        }


def rollback(
    target: Path,
    version: str | None = None,
    *,
    force: bool = False,
    jobs: int | None = None,
    say: Say | None = None,
) -> RollbackResult:
    tell = say or (lambda line: None)
    state = load_state(target)
    if state is None:
        raise InputError(
            f"{target}: not an unpacked repro target (no {STATE_DIR}/state.toml)",
            hint="give the --target directory that `repro unpack` wrote",
        )
    with exclusive_lock(target / STATE_DIR / LOCK, what="unpacking"):
        drop_leftovers(target)
        pending = pending_rollback(target)
        if pending is not None:
            tell(f"finishing a rollback cut short ({', '.join(pending)})")
            run_rollback(target, pending)
            return _result(target, tuple(pending), (), True)
        if undo_interrupted(target):
            tell("an upgrade cut short was undone")
            return _result(target, (), (), True)
        state = load_state(target)
        assert state is not None
        plan = plan_rollback(target, state.bundle, version)
        drift = tuple(target_drift(target, jobs=jobs))
        if drift and not force:
            raise VerificationError(
                f"{target} has drifted from {state.bundle.name} {state.bundle.version} "
                f"({len(drift)} difference(s)); refusing to roll back:\n"
                + "\n".join(f"  - {d.describe()}" for d in drift[:50]),
                hint="`repro verify TARGET` lists them; --force throws them away",
            )
        for item in drift:
            tell(f"overwrites {item.describe()}")
        start_rollback(target, plan)
        run_rollback(target, [r.path.name for r in plan.releases])
        return _result(target, tuple(r.version for r in plan.releases), drift, False)


def _result(
    target: Path, undone: tuple[str, ...], drift: tuple[Drift, ...], interrupted: bool
) -> RollbackResult:
    state = load_state(target)
    return RollbackResult(
        target,
        state.bundle.version if state is not None else "",
        undone,
        tuple(r.version for r in list_releases(target)),
        drift,
        interrupted,
    )
