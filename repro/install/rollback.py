"""`repro rollback TARGET [VERSION]`: an upgraded target returned to a kept release.

The releases an upgrade in place kept (repro.install.releases) are undone newest first
until VERSION (default: the previous release) is what the target holds, file for file
as it was, state.toml and the kept bundle included, so `repro verify` agrees. A target
that drifted since it was unpacked is refused unless `force`; a rollback cut short is
finished by running it again (its journal names the releases it undoes), and an
upgrade cut short is undone by it.

A target that already holds VERSION, with no kept release that returns to it, has
nothing to do (so `repro rollback T VERSION` run twice changes the target once); a dry
run plans, checks the drift and refuses as the real run would, and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from repro.errors import InputError, VerificationError
from repro.install.drift import Drift, target_drift
from repro.install.releases import (
    drop_leftovers,
    interrupted_upgrade,
    list_releases,
    pending_rollback,
    plan_rollback,
    run_rollback,
    start_rollback,
    undo_interrupted,
)
from repro.install.state import STATE_DIR, BundleIdentity, load_state
from repro.install.transaction.atomic import exclusive_lock
from repro.install.unpack import LOCK

Say = Callable[[str], None]


@dataclass(frozen=True)
class RollbackResult:
    target: Path
    held: str  # what the target held before the run
    version: str  # what it holds after it (a dry run: would hold)
    undone: tuple[str, ...]  # the releases undone (their versions), newest first
    left: tuple[str, ...]  # the releases still kept (a dry run: kept after it)
    overwritten: tuple[Drift, ...] = field(default=())  # --force: the drift thrown away
    finished_interrupted: bool = False  # a rollback or an upgrade cut short was finished
    dry_run: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.undone) or self.finished_interrupted

    def to_json(self) -> dict[str, object]:
        return {
            "target": str(self.target),
            "from": self.held,
            "version": self.version,
            "changed": self.changed,
            "dry_run": self.dry_run,
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
    dry_run: bool = False,
    jobs: int | None = None,
    say: Say | None = None,
) -> RollbackResult:
    tell = say or (lambda line: None)
    held = _held(target)
    if dry_run:
        return _dry_run(target, held, version, force=force, jobs=jobs)
    with exclusive_lock(target / STATE_DIR / LOCK, what="unpacking"):
        drop_leftovers(target)
        pending = pending_rollback(target)
        if pending is not None:
            tell(f"finishing a rollback cut short ({', '.join(pending)})")
            run_rollback(target, pending)
            return _result(target, held, tuple(pending), (), True)
        if undo_interrupted(target):
            tell("an upgrade cut short was undone")
            return _result(target, held, (), (), True)
        current = load_state(target)
        assert current is not None
        if _already_there(target, current.bundle, version):
            tell(f"{target} already holds {current.bundle.name} {version}: nothing to do")
            return _result(target, held, (), (), False)
        plan = plan_rollback(target, current.bundle, version)
        drift = _refuse_drift(target, current.bundle, force=force, jobs=jobs)
        for item in drift:
            tell(f"overwrites {item.describe()}")
        start_rollback(target, plan)
        run_rollback(target, [r.path.name for r in plan.releases])
        return _result(target, held, tuple(r.version for r in plan.releases), drift, False)


def _held(target: Path) -> BundleIdentity:
    state = load_state(target)
    if state is None:
        raise InputError(
            f"{target}: not an unpacked repro target (no {STATE_DIR}/state.toml)",
            hint="give the --target directory that `repro unpack` wrote",
        )
    return state.bundle


def _already_there(target: Path, current: BundleIdentity, version: str | None) -> bool:
    """VERSION is what the target holds, and no kept release returns to it (a bundle of
    that version packed again and upgraded to is still rolled back)."""
    return (
        version is not None
        and current.version == version
        and not any(r.version == version for r in list_releases(target))
    )


def _refuse_drift(
    target: Path, current: BundleIdentity, *, force: bool, jobs: int | None
) -> tuple[Drift, ...]:
    drift = tuple(target_drift(target, jobs=jobs))
    if drift and not force:
        raise VerificationError(
            f"{target} has drifted from {current.name} {current.version} "
            f"({len(drift)} difference(s)); refusing to roll back:\n"
            + "\n".join(f"  - {d.describe()}" for d in drift[:50]),
            hint="`repro verify TARGET` lists them; --force throws them away",
        )
    return drift


def _dry_run(
    target: Path, held: BundleIdentity, version: str | None, *, force: bool, jobs: int | None
) -> RollbackResult:
    """What the real run would do, refused where it would be; nothing is written (no
    lock either: a run that holds it may change the answer, as for `unpack --dry-run`)."""
    kept = list_releases(target)
    left = tuple(r.version for r in kept)
    if pending_rollback(target) is not None or interrupted_upgrade(target) is not None:
        # the real run finishes that first, and stops there
        return RollbackResult(target, held.version, held.version, (), left, (), True, True)
    if _already_there(target, held, version):
        return RollbackResult(target, held.version, held.version, (), left, dry_run=True)
    plan = plan_rollback(target, held, version)
    drift = _refuse_drift(target, held, force=force, jobs=jobs)
    undone = tuple(r.version for r in plan.releases)
    after = tuple(r.version for r in kept if r not in plan.releases)
    return RollbackResult(target, held.version, plan.version, undone, after, drift, dry_run=True)


def _result(
    target: Path,
    held: BundleIdentity,
    undone: tuple[str, ...],
    drift: tuple[Drift, ...],
    interrupted: bool,
) -> RollbackResult:
    state = load_state(target)
    return RollbackResult(
        target,
        held.version,
        state.bundle.version if state is not None else "",
        undone,
        tuple(r.version for r in list_releases(target)),
        drift,
        interrupted,
    )
