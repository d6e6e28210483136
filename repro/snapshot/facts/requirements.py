"""Unmet requirements of the environment being packed: `pip check` without pip.

The target may have no pip (a venv made by uv) and no `packaging`; the tool has
packaging. So the distributions' `Requires-Dist` headers are read from their
METADATA files here, and only the values of the PEP 508 marker variables come
from the target interpreter (a stdlib script printing JSON).

The semantics are pip check's: a requirement counts when it has no marker or
its marker is true in the target's environment with `extra` set to "" (so a
requirement that only an extra brings in never counts, even when another
installed distribution asks for `name[extra]`); a counted requirement whose
distribution is not installed is *missing*, one whose installed version is
outside its specifier (pre-releases allowed) is a *conflict*. The extras a
requirement names are not followed. A `Requires-Dist` line that does not parse
is left out, as pip leaves it out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from repro.errors import ProbeError
from repro.interpreter import run_target_script
from repro.snapshot.facts.installed import InstalledDist, read_metadata_headers

Problem = Literal["missing", "conflict"]
MARKER_TIMEOUT = 60.0

MARKER_KEYS = (
    "implementation_name",
    "implementation_version",
    "os_name",
    "platform_machine",
    "platform_release",
    "platform_system",
    "platform_version",
    "python_full_version",
    "platform_python_implementation",
    "python_version",
    "sys_platform",
)


@dataclass(frozen=True)
class DistRequirements:
    """One installed distribution and its `Requires-Dist` lines, as written."""

    name: str
    version: str
    requires: tuple[str, ...]


@dataclass(frozen=True)
class UnmetRequirement:
    dist: str  # the requiring distribution, as its METADATA names it
    version: str
    requires: str  # the requirement without its marker: `idna<4,>=2.5`
    problem: Problem
    installed: str | None  # the version installed (a conflict), None when missing

    def describe(self) -> str:
        head = f"{self.dist} {self.version} requires {self.requires}"
        if self.problem == "missing":
            return f"{head}, which is not installed"
        return f"{head}, but {self.installed} is installed"

    def to_json(self) -> dict[str, Any]:
        return {
            "dist": self.dist,
            "version": self.version,
            "requires": self.requires,
            "problem": self.problem,
            "installed": self.installed,
        }


def marker_environment(python: Path, *, timeout: float = MARKER_TIMEOUT) -> dict[str, str]:
    """The PEP 508 marker variables of `python`, asked of it (repro/probe/markers.py:
    packaging's default_environment() computed by the target itself)."""
    proc = run_target_script(python, "markers.py", timeout=timeout)
    if proc.returncode != 0:
        raise ProbeError(
            f"{python} failed to report its marker environment (exit {proc.returncode}): "
            + proc.stderr.strip()[-500:]
        )
    try:
        data = json.loads(proc.stdout)
        return {key: str(data[key]) for key in MARKER_KEYS}
    except (ValueError, KeyError, TypeError) as exc:
        raise ProbeError(f"{python} printed an unreadable marker environment: {exc}") from exc


def read_requirements(dists: Iterable[InstalledDist]) -> list[DistRequirements]:
    """The `Requires-Dist` lines of each installed distribution's METADATA."""
    found = []
    for dist in dists:
        headers = read_metadata_headers(dist.dist_info)
        lines = tuple(str(line) for line in headers.get_all("Requires-Dist") or ())
        found.append(DistRequirements(dist.name, dist.version, lines))
    return found


def _counts(requirement: Requirement, environment: Mapping[str, str]) -> bool:
    if requirement.marker is None:
        return True
    try:
        return requirement.marker.evaluate({**environment, "extra": ""})
    except (UndefinedComparison, UndefinedEnvironmentName):
        return False


def _without_marker(requirement: Requirement) -> str:
    text: str = canonicalize_name(requirement.name)
    if requirement.extras:
        text += f"[{','.join(sorted(requirement.extras))}]"
    if requirement.url:
        return f"{text} @ {requirement.url}"
    return text + str(requirement.specifier)


def unmet_requirements(
    dists: Sequence[DistRequirements], environment: Mapping[str, str]
) -> tuple[UnmetRequirement, ...]:
    """Every requirement of `dists` that the installed set `dists` does not meet,
    sorted by distribution and requirement."""
    installed = {canonicalize_name(d.name): d.version for d in dists}
    unmet = set()
    for dist in dists:
        for line in dist.requires:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if not _counts(requirement, environment):
                continue
            found = installed.get(canonicalize_name(requirement.name))
            if found is None:
                problem: Problem = "missing"
            elif requirement.specifier.contains(found, prereleases=True):
                continue
            else:
                problem = "conflict"
            unmet.add(
                UnmetRequirement(
                    dist.name, dist.version, _without_marker(requirement), problem, found
                )
            )
    return tuple(
        sorted(unmet, key=lambda u: (canonicalize_name(u.dist), u.version, u.requires, u.problem))
    )


def check_environment(python: Path, dists: Iterable[InstalledDist]) -> tuple[UnmetRequirement, ...]:
    """`pip check` of the environment of `python`, whose installed distributions are `dists`."""
    return unmet_requirements(read_requirements(dists), marker_environment(python))


SHOWN = 20


def describe_unmet(unmet: Sequence[UnmetRequirement], *, shown: int = SHOWN) -> str | None:
    """One warning: a summary line, then the first `shown` unmet requirements."""
    if not unmet:
        return None
    missing = sum(1 for u in unmet if u.problem == "missing")
    lines = [
        f"{len(unmet)} unmet requirement(s) in the environment ({missing} missing, "
        f"{len(unmet) - missing} conflicting), as `pip check` reports them; unpack "
        "installs the lock as it is"
    ]
    lines += [f"  {u.describe()}" for u in unmet[:shown]]
    if len(unmet) > shown:
        lines.append(f"  ... and {len(unmet) - shown} more (env/pack-report.json lists them all)")
    return "\n".join(lines)
