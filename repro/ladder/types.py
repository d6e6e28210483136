"""Data passed between the ladder's parts: what to run and what came out."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENGINES: tuple[str, ...] = ("sglang", "vllm")


class RungStatus(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class AppliedPatch:
    """A file a patch changed inside site-packages, and the hash it must have now."""

    dist: str
    path: str  # relative to the distribution's site-packages directory
    kind: str  # "modified", "added" or "deleted"
    sha256: str | None  # the patched file's hash; None for "deleted"


@dataclass(frozen=True)
class LaunchSpec:
    """How to start a serving engine and how to know it serves."""

    name: str
    port: int
    engine: str  # "sglang", "vllm" or "openai"
    argv: tuple[str, ...] | None = None
    shell: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # over the ladder's environment
    cwd: Path | None = None  # the server's working directory; None: the ladder's
    expected_text: str | None = None
    prompt: str = "The capital of France is"
    max_tokens: int = 32
    host: str = "127.0.0.1"
    unit: str | None = None  # the systemd unit its command was read from, if any

    @property
    def command(self) -> tuple[str, ...]:
        if self.argv:
            return self.argv
        if self.shell:
            return ("/bin/sh", "-c", self.shell)
        raise ValueError(f"launch command {self.name!r} has neither argv nor shell")


@dataclass(frozen=True)
class Timeouts:
    """The server rung's deadlines, in seconds; server_ready is the readiness deadline;
    kernel_check: how long one kernel check command may run (the kernels rung). (The other
    rungs' script timeouts are in repro.ladder.registry.RUNGS.)"""

    server_ready: float = 900
    probe: float = 5
    generation: float = 120
    grace: float = 15
    kernel_check: float = 600


@dataclass(frozen=True)
class KernelCheck:
    """A kernel source the bundle carries (env/kernels.toml's `[[sources]]`) and its
    check command, which the kernels rung runs in the target."""

    dist: str
    argv: tuple[str, ...]  # empty: none; `{python}` stands for the target's interpreter


@dataclass(frozen=True)
class UnreadyModel:
    """A model the models step did not find as packed (missing or different): a launch
    command that names it is not started (the server rung fails at once with `reason`
    and `fix`)."""

    name: str
    status: str  # "missing" or "different"
    reason: str  # the models step's detail
    fix: str | None  # the command that fetches it, where known
    words: tuple[str, ...]  # how a command names it: the place the unit names, its repo id


@dataclass(frozen=True)
class LadderSpec:
    """Everything the ladder needs to know about the environment it climbs."""

    python: Path
    expected_python: str | None = None
    cpu: bool = False
    rungs: tuple[str, ...] = ()  # empty: every rung (repro.ladder.registry.RUNG_NAMES)
    engines: tuple[str, ...] | None = None  # None: whichever of ENGINES is installed
    patched_files: tuple[AppliedPatch, ...] = ()
    launch: LaunchSpec | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    keep_going: bool = False
    log_dir: Path | None = None  # where the server log goes; a temp dir if None
    kernels: tuple[KernelCheck, ...] = ()  # the bundle's kernel sources, with their checks
    home: Path | None = None  # ${REPRO_HOME}: the kernel checks' directory; None: this one
    unready_models: tuple[UnreadyModel, ...] = ()  # from unpack's models step


@dataclass(frozen=True)
class RungScript:
    """A script under repro/ladder/scripts/ that a rung runs inside the target."""

    file: str
    timeout_s: float  # how long it may take before its process group is killed


@dataclass(frozen=True)
class RungContext:
    """What the runner hands a rung's function besides the spec."""

    name: str
    scripts: Mapping[str, RungScript]  # every rung's script, by rung name
    known: Mapping[str, Any] = field(default_factory=dict)  # facts earlier rungs passed on

    @property
    def script(self) -> RungScript:
        """This rung's own script."""
        return self.scripts[self.name]

    @property
    def timeout(self) -> float:
        """Seconds this rung's own script may take."""
        return self.script.timeout_s


@dataclass(frozen=True)
class RungResult:
    name: str
    status: RungStatus
    duration_s: float
    summary: str
    facts: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    hint: str | None = None
    output_tail: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "duration_s": round(self.duration_s, 3),
            "summary": self.summary,
            "facts": dict(self.facts),
            "warnings": list(self.warnings),
            "hint": self.hint,
            "output_tail": list(self.output_tail),
        }


@dataclass(frozen=True)
class LadderReport:
    python: Path
    results: tuple[RungResult, ...]

    @property
    def ok(self) -> bool:
        """No rung failed and at least one passed: a ladder that ran nothing (no rung, or
        every selected rung skipped) proves nothing."""
        statuses = {r.status for r in self.results}
        return RungStatus.PASS in statuses and RungStatus.FAIL not in statuses

    def result(self, name: str) -> RungResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "python": str(self.python),
            "ok": self.ok,
            "rungs": [r.to_json() for r in self.results],
        }
