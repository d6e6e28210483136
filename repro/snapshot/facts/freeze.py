"""pip-freeze.txt, and the pins of the probed environment: the pack side of the lock.

The lock's format (its types, renderers and parser) is repro.bundle.lock.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from repro.bundle.environment import EnvironmentFacts
from repro.bundle.lock import Pin
from repro.errors import ProbeError
from repro.interpreter import run_target_script
from repro.redaction import scrub_text


@dataclass(frozen=True)
class Freeze:
    text: str
    derived: bool  # True when the target had no pip and lines came from the probe


def pins_from_facts(facts: EnvironmentFacts) -> tuple[Pin, ...]:
    pins = {d.normalized_name: Pin(d.normalized_name, d.version) for d in facts.distributions}
    return tuple(pins[name] for name in sorted(pins))


def pip_freeze(
    python: Path,
    facts: EnvironmentFacts,
    *,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
) -> Freeze:
    """`python -m pip freeze --all` verbatim; without pip in the target, equivalent lines
    derived from the probe, with a comment saying so."""
    return freeze_from(run_pip_freeze(python, timeout=timeout, env=env), python, facts)


def run_pip_freeze(
    python: Path, *, timeout: float = 120, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the target's `pip freeze --all` (it needs no probe facts: pack starts it first).
    Site on (pip and what it lists are the target's), with our environment (pip reads
    its configuration from it)."""
    return run_target_script(
        python, "freeze.py", timeout=timeout, site=True, env=os.environ if env is None else env
    )


def freeze_from(
    proc: subprocess.CompletedProcess[str], python: Path, facts: EnvironmentFacts
) -> Freeze:
    """The freeze from a finished `run_pip_freeze`, or derived from `facts` without pip.
    pip prints `name @ git+https://user:token@host/...` as direct_url.json says: the
    credentials are stripped (repro.redaction.scrub_text)."""
    if proc.returncode == 0:
        return Freeze(scrub_text(proc.stdout), derived=False)
    if "No module named pip" not in proc.stderr:
        tail = proc.stderr.strip().splitlines()[-2:]
        raise ProbeError(f"pip freeze with {python} failed: {' | '.join(tail)}")
    lines = [
        f"# {python} has no pip: these lines were derived by repro from the installed",
        "# distributions' metadata, not written by `pip freeze`.",
    ]
    for dist in sorted(facts.distributions, key=lambda d: d.name.lower()):
        url = (dist.direct_url or {}).get("url")
        if dist.editable and url:
            lines.append(f"-e {url}")
        elif url:
            lines.append(f"{dist.name} @ {url}")
        else:
            lines.append(f"{dist.name}=={dist.version}")
    return Freeze(scrub_text("\n".join(lines) + "\n"), derived=True)


def requires_python_of(facts: EnvironmentFacts) -> str:
    major, minor = facts.python.version.split(".")[:2]
    return f"=={major}.{minor}.*"
