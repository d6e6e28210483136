"""repro's own wheels for the bundle's Python, when it is not the packing one.

setup_env.sh installs repro with the target box's Python, which is usually the bundle's
own (the source environment's X.Y), not the interpreter pack runs on. The tool's pure
wheels install anywhere; a compiled one (zstandard, zlib-ng, ...) only on its own
Python, and the target's markers may ask for more (tomli below 3.11). For those, the
wheel of the same version for the target's Python and platform is downloaded at pack
time (`pip download --only-binary=:all: --no-deps --python-version ...`) and cached by
content next to the tool's own wheel sets, so a repeated pack downloads nothing and
writes the same bytes. Without downloads (`pack --offline`) a cached set is used, and
what is missing is reported, never guessed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.tags import Tag
from packaging.utils import parse_wheel_filename

from repro.bundle import layout
from repro.snapshot.tool.cacheset import publish, staging_for
from repro.snapshot.tool.wheels import (
    ToolWheelInputs,
    ToolWheels,
    closure_for,
    marker_environment,
)
from repro.snapshot.vault.original import DOWNLOAD_TIMEOUT
from repro.wheel.rebuild import wheel_file_tags

_ABBREVIATIONS = {"cpython": "cp", "pypy": "pp"}


@dataclass(frozen=True)
class TargetPython:
    """The Python setup_env.sh will most likely run on: the source environment's."""

    full_version: str  # X.Y.Z
    implementation: str  # sys.implementation.name: cpython, pypy
    tags: tuple[Tag, ...]  # what it installs, most specific first (indexcheck.target_tags)

    @property
    def version(self) -> str:
        major, minor = self.full_version.split(".")[:2]
        return f"{major}.{minor}"

    @property
    def platforms(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for tag in self.tags:
            if tag.platform != "any":
                seen.setdefault(tag.platform, None)
        return tuple(seen)


@dataclass(frozen=True)
class TargetWheels:
    """Wheels for the target's Python, and the requirements no wheel was found for."""

    python: str  # X.Y
    wheels: tuple[Path, ...]
    missing: tuple[str, ...]


def target_requirements(inputs: ToolWheelInputs, target: TargetPython) -> list[str]:
    """What the target Python needs beyond the tool's wheels that install on it:
    `name==version` of each tool distribution whose wheel does not fit the target, and of
    what only the target's markers ask for (tomli below 3.11) at the version installed
    here, or by its specifier where it is not installed here at all."""
    supported = {str(tag) for tag in target.tags}
    closure = closure_for(marker_environment(target.full_version, target.implementation))
    installed = {dist.canonical_name: dist for dist in inputs.wanted}
    wanted: list[str] = []
    for name in closure.installed:
        if name in inputs.sources:
            continue  # an editable install is built as a pure wheel
        dist = installed.get(name)
        if dist is None:  # installed here, but only the target's markers need it
            wanted.append(f"{name}=={metadata.version(name)}")
        elif not wheel_file_tags(dist.dist_info / "WHEEL") & supported:
            wanted.append(f"{name}=={dist.version}")
    specifiers: dict[str, list[str]] = {}
    for requirement in closure.absent:
        specifiers.setdefault(requirement.name, []).extend(str(s) for s in requirement.specifier)
    for name, specs in sorted(specifiers.items()):
        wanted.append(name + ",".join(sorted(set(specs))))
    return sorted(wanted)


def target_tool_wheels(
    cache_root: Path,
    inputs: ToolWheelInputs,
    target: TargetPython,
    *,
    download: bool,
    timeout: float = DOWNLOAD_TIMEOUT,
) -> TargetWheels:
    """The extra wheels `target` needs to install repro: from the cache, else downloaded
    (when `download`); a set is cached only when it is whole."""
    requirements = target_requirements(inputs, target)
    if not requirements:
        return TargetWheels(target.version, (), ())
    abbreviation = _ABBREVIATIONS.get(target.implementation)
    if abbreviation is None:
        return TargetWheels(target.version, (), tuple(requirements))
    key = hashlib.sha256(
        "\n".join([target.version, abbreviation, *target.platforms, "", *requirements]).encode()
    ).hexdigest()[:24]
    cache = cache_root / f"py{target.version}-{key}"
    if (cache / ".complete").exists():
        os.utime(cache)
        return TargetWheels(target.version, tuple(sorted(cache.glob("*.whl"))), ())
    if not download:
        return TargetWheels(target.version, (), tuple(requirements))
    staging = staging_for(cache)
    argv = _download_argv(target, abbreviation, staging)
    missing = _download(argv, requirements, timeout=timeout)
    supported = {str(tag) for tag in target.tags}
    wheels = sorted(
        w
        for w in staging.glob("*.whl")
        if {str(t) for t in parse_wheel_filename(w.name)[3]} & supported
    )
    if missing:
        return TargetWheels(target.version, tuple(wheels), tuple(missing))
    publish(staging, cache)
    return TargetWheels(target.version, tuple(cache / w.name for w in wheels), ())


def _download_argv(target: TargetPython, abbreviation: str, dest: Path) -> list[str]:
    nodot = target.version.replace(".", "")
    argv = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps"]
    argv += ["--disable-pip-version-check", "-q", "-d", str(dest)]
    argv += ["--python-version", target.version, "--implementation", abbreviation]
    argv += ["--abi", f"{abbreviation}{nodot}"]
    for platform in target.platforms:
        argv += ["--platform", platform]
    return argv


def _download(argv: Sequence[str], requirements: Sequence[str], *, timeout: float) -> list[str]:
    """One pip run for all; where it fails, one run per requirement to name the missing."""
    if _run(argv, requirements, timeout=timeout):
        return []
    if len(requirements) == 1:
        return list(requirements)
    return [r for r in requirements if not _run(argv, [r], timeout=timeout)]


def _run(argv: Sequence[str], requirements: Sequence[str], *, timeout: float) -> bool:
    try:
        proc = subprocess.run(
            [*argv, *requirements],
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


@dataclass(frozen=True)
class BootstrapWheels:
    """What goes under tool/wheels: the tool's own wheels and the target's extra ones,
    the X.Y they can install repro on, and what pack has to say about the rest."""

    wheels: tuple[Path, ...]
    pythons: tuple[str, ...]
    warnings: tuple[str, ...]


MIN_TOOL_PYTHON = (3, 10)


def bootstrap_wheels(
    tool: ToolWheels,
    own_python: str,
    cache_root: Path,
    inputs: ToolWheelInputs,
    target: TargetPython | None,
    *,
    download: bool,
) -> BootstrapWheels:
    """The tool's wheels (`tool`, for `own_python`, and the warnings of their making), and
    for a `target` Python of another X.Y its extra wheels: cached, downloaded, or named in
    a warning as missing."""
    own, carried = tool.wheels, tool.warnings
    if target is None or target.version == own_python:
        return BootstrapWheels(tuple(own), (own_python,), carried)
    xy = target.version
    if tuple(int(part) for part in xy.split(".")) < MIN_TOOL_PYTHON:
        warning = (
            f"the bundle's Python {xy} cannot run repro (it needs Python >= 3.10): "
            "setup_env.sh needs another Python on the target (REPRO_BOOTSTRAP_PYTHON)"
        )
        return BootstrapWheels(tuple(own), (own_python,), (*carried, warning))
    extra = target_tool_wheels(cache_root, inputs, target, download=download)
    wheels = tuple(sorted({*own, *extra.wheels}, key=lambda path: path.name))
    if not extra.missing:
        return BootstrapWheels(wheels, tuple(sorted({own_python, xy})), carried)
    if target.implementation not in _ABBREVIATIONS:
        why = f"no wheels are fetched for {target.implementation}"
    elif download:
        why = f"pip download --python-version {xy} found none"
    else:
        why = "pack --offline downloads nothing; pack online once to cache them"
    warning = (
        f"setup_env.sh cannot bootstrap Python {xy} (the bundle's own) without a network: "
        f"{layout.TOOL_WHEELS} lacks a Python {xy} wheel of {', '.join(extra.missing)} ({why})"
    )
    return BootstrapWheels(wheels, (own_python,), (*carried, warning))
