"""TARGET/.repro/state.toml: which unpack steps finished, for which bundle.

A step is recorded as done only after it finished, and a step that writes into
the target also as started (`started = "install"`) before it changes anything,
both through an fsynced atomic write. A rerun after a failure or a kill finds
the step that was started and not done, redoes it from clean, and continues from
there; a rerun after success changes nothing. A different bundle into the same
target is refused unless the caller replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from repro import _toml
from repro.errors import InstallError, UsageError
from repro.install.transaction.atomic import atomic_write

STATE_DIR = ".repro"
STATE_FILE = "state.toml"
# the key, in the venv step's facts, of what that step made (repro.install.venv.guard)
VENV_RECORD = "made"
STEPS = (
    "verify",
    "preflight",
    "venv",
    "install",
    "kernels",
    "patch",
    "workspace",
    "caches",
    "services",
    "models",
    "smoke",
)


@dataclass(frozen=True)
class BundleIdentity:
    name: str
    version: str
    manifest_sha256: str


@dataclass
class UnpackState:
    target: Path
    bundle: BundleIdentity
    done: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    # The step a run began and did not finish (killed, or it failed): what it made
    # may be half made.
    started: str | None = None
    # The step whose last run failed (an error, or a bug in repro): still `started`, so
    # the next run redoes it from clean; said here so a reader of state.toml sees why.
    failed: str | None = None

    @property
    def path(self) -> Path:
        return self.target / STATE_DIR / STATE_FILE

    def is_done(self, step: str) -> bool:
        return step in self.done

    @property
    def made_venv(self) -> object | None:
        """What the venv step made (`made` in its facts: pyvenv.cfg and bin/python*, as
        repro.install.venv.guard records them), or None: a state written before repro
        recorded it, which stays readable (its venv is checked by the rules alone)."""
        venv = self.facts.get("venv")
        return venv.get(VENV_RECORD) if isinstance(venv, dict) else None

    def mark_started(self, step: str) -> None:
        """Recorded (and on disk) before the step changes anything."""
        if step not in STEPS:
            raise ValueError(step)
        self.started = step
        self.save()

    def clear_started(self) -> None:
        """The started step ended without anything to record (skipped)."""
        if self.started is not None:
            self.started = None
            self.save()

    def mark_failed(self, step: str) -> None:
        """The step ended in an error: it stays started (redone by the next run)."""
        if step not in STEPS:
            raise ValueError(step)
        self.failed = step
        self.save()

    def mark_done(self, step: str, **facts: Any) -> None:
        """Recorded only once the step has finished: the step and its facts at once."""
        if step not in STEPS:
            raise ValueError(step)
        if step not in self.done:
            self.done.append(step)
        if facts:
            self.facts[step] = facts
        if self.started == step:
            self.started = None
        if self.failed == step:
            self.failed = None
        self.save()

    def forget(self, step: str) -> None:
        """Forget a step and every step after it (a later step depends on earlier ones),
        and that any of them was started."""
        index = STEPS.index(step)
        self.done = [s for s in self.done if STEPS.index(s) < index]
        if self.started is not None and STEPS.index(self.started) >= index:
            self.started = None
        if self.failed is not None and STEPS.index(self.failed) >= index:
            self.failed = None
        self.save()

    def save(self) -> None:
        document: dict[str, Any] = {
            "bundle": {
                "name": self.bundle.name,
                "version": self.bundle.version,
                "manifest_sha256": self.bundle.manifest_sha256,
            },
            "done": [s for s in STEPS if s in self.done],
            "facts": self.facts,
        }
        if self.started is not None:
            document["started"] = self.started
        if self.failed is not None:
            document["failed"] = self.failed
        atomic_write(self.path, tomli_w.dumps(document).encode())


def load_state(target: Path) -> UnpackState | None:
    path = target / STATE_DIR / STATE_FILE
    if not path.exists():
        return None
    try:
        document = _toml.loads(path.read_text(encoding="utf-8"))
        bundle = document["bundle"]
        identity = BundleIdentity(
            str(bundle["name"]), str(bundle["version"]), str(bundle["manifest_sha256"])
        )
        done = [str(step) for step in document.get("done", []) if step in STEPS]
        facts = dict(document.get("facts", {}))
        started = document.get("started")
        if started is not None and started not in STEPS:
            raise TypeError(f"started = {started!r} is not a step")
        failed = document.get("failed")
        if failed is not None and failed not in STEPS:
            raise TypeError(f"failed = {failed!r} is not a step")
    except (OSError, _toml.TOMLDecodeError, KeyError, TypeError) as exc:
        raise InstallError(
            f"{path}: unreadable unpack state: {exc}",
            hint="remove the target directory, or use --replace to start over",
        ) from exc
    return UnpackState(target, identity, done, facts, started, failed)


def open_state(target: Path, bundle: BundleIdentity, *, replace: bool) -> UnpackState:
    """The state for `bundle` in `target`: resumed, fresh, or refused."""
    existing = load_state(target)
    if existing is not None and existing.bundle == bundle:
        return existing
    if existing is not None and not replace:
        raise UsageError(
            f"{target} holds {existing.bundle.name} {existing.bundle.version}, "
            f"not {bundle.name} {bundle.version}",
            hint="use another --target, or --replace to rebuild this one",
        )
    # The lock file in STATE_DIR is made before the first state is saved: not "foreign".
    foreign = target.exists() and any(p.name != STATE_DIR for p in target.iterdir())
    if existing is None and foreign and not replace:
        raise UsageError(
            f"{target} exists and is not a repro target",
            hint="choose an empty or new --target, or --replace to overwrite it",
        )
    state = UnpackState(target, bundle)
    return state
