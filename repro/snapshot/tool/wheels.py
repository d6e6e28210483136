"""Wheels of repro itself and of its own dependencies, for a bundle's setup_env.sh.

A box with Python and no network must be able to install repro from the
bundle. The wheels are rebuilt from the tool's own installed files (checked
against RECORD), or built from source for an editable install, and cached by
content so repeated packs do not rebuild them.

Each distribution is the one this repro imports: `importlib.metadata` resolves it on
the running interpreter's sys.path (a user site, a `--system-site-packages` base, a
PYTHONPATH entry), not from one site-packages directory guessed from sysconfig. A file
of the closure that differs from its RECORD (a company CA appended to certifi's
cacert.pem) is carried as the vault carries a patch it has no pristine copy of: the
bytes as installed under a fresh RECORD hash, and a warning naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from repro.errors import InputError
from repro.snapshot.facts.installed import InstalledDist, list_installed
from repro.snapshot.tool.cacheset import publish, staging_for
from repro.wheel.rebuild import CarryPatched, build_from_source, rebuild_wheel
from repro.wheel.record import join_record_path, read_dist_record

TOOL = "repro"


def marker_environment(
    python_full_version: str | None = None, implementation: str = "cpython"
) -> dict[str, str]:
    """Marker variables of this interpreter, or of a target Python `python_full_version`
    (X.Y.Z) of `implementation` on this platform."""
    environment: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    environment["extra"] = ""
    if python_full_version is not None:
        major, minor = python_full_version.split(".")[:2]
        environment["python_version"] = f"{major}.{minor}"
        environment["python_full_version"] = python_full_version
        environment["implementation_version"] = python_full_version
        environment["implementation_name"] = implementation
        environment["platform_python_implementation"] = _IMPLEMENTATIONS.get(
            implementation, implementation
        )
    return environment


_IMPLEMENTATIONS = {"cpython": "CPython", "pypy": "PyPy"}


@dataclass(frozen=True)
class Closure:
    """repro's requirement closure under one set of markers: the names installed here,
    and the requirements of names that are not (a target's markers may pull in what
    this interpreter never needed, like tomli below Python 3.11)."""

    installed: tuple[str, ...]
    absent: tuple[Requirement, ...]


def closure_for(environment: dict[str, str], root: str = TOOL) -> Closure:
    seen: set[str] = set()
    absent: dict[str, list[Requirement]] = {}
    todo = [Requirement(root)]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            absent.setdefault(name, []).append(requirement)
            continue
        seen.add(name)
        for text in requires:
            try:
                wanted = Requirement(text)
            except InvalidRequirement:
                continue
            if wanted.marker is None or wanted.marker.evaluate(environment):
                todo.append(wanted)
    found = tuple(r for name in sorted(absent) for r in absent[name])
    return Closure(tuple(sorted(seen)), found)


def requirement_closure(root: str = TOOL) -> list[str]:
    """Canonical names of `root` and everything it needs here, by its metadata."""
    return list(closure_for(marker_environment(), root).installed)


def _editable_source(dist: InstalledDist) -> Path | None:
    if not dist.editable or not dist.direct_url:
        return None
    if dist.canonical_name == TOOL:
        running = _running_source()
        if running is not None:
            return running
    url = str(dist.direct_url.get("url", ""))
    return Path(url.removeprefix("file://")) if url.startswith("file://") else None


def _running_source() -> Path | None:
    """The source checkout of the repro that is running, when it runs from one: with a
    second checkout first on sys.path (a git worktree, PYTHONPATH), that one and not
    the editable install's recorded source is what the bundle must carry."""
    top = Path(__file__).resolve().parent.parent.parent
    return top if (top / "pyproject.toml").is_file() and (top / TOOL).is_dir() else None


def _source_digest(source: Path) -> str:
    """A key of an editable install's source: only what goes into its wheel is walked
    (not the checkout's .git, .venv or tests)."""
    digest = hashlib.sha256()
    paths = [source / "pyproject.toml"]
    for top in ("repro", "bundle_templates"):
        paths += (source / top).rglob("*")
    for path in sorted(paths):
        if path.is_file() and "__pycache__" not in path.parts:
            rel = path.relative_to(source).as_posix()
            digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class ToolWheelInputs:
    """What the tool's wheels are made of, and a key of it (without the timestamp)."""

    wanted: tuple[InstalledDist, ...]
    sources: dict[str, Path]  # editable installs: canonical name -> source tree
    content_key: str


def tool_wheel_inputs() -> ToolWheelInputs:
    """The distributions to wheel and a digest of their versions, of their installed
    files' sizes and times (a file changed since a set was cached makes a new set) and
    of editable sources (the slow part of a cache hit; pack runs it while it scans)."""
    wanted = tuple(imported_distributions(requirement_closure()))
    key = hashlib.sha256(f"{sys.version_info[:2]}".encode())
    sources = {}
    for dist in wanted:
        key.update(f";{dist.canonical_name}=={dist.version}@{dist.dist_info}".encode())
        source = _editable_source(dist)
        if source is not None:
            sources[dist.canonical_name] = source
            key.update(_source_digest(source).encode())
        else:
            key.update(_installed_state(dist).encode())
    return ToolWheelInputs(wanted, sources, key.hexdigest())


def imported_distributions(names: Sequence[str]) -> list[InstalledDist]:
    """Each named distribution as this interpreter imports it: the first `.dist-info` on
    sys.path, in the order `importlib.metadata` (and so the requirement closure) finds
    them. A name installed only as egg-info (a source checkout's), or nowhere, is left
    out: no wheel can be rebuilt of it."""
    by_site: dict[Path, dict[str, InstalledDist]] = {}
    found: list[InstalledDist] = []
    for name in names:
        for resolved in metadata.distributions(name=name):
            site = Path(str(resolved.locate_file(""))).absolute()
            if site not in by_site:
                by_site[site] = {d.canonical_name: d for d in list_installed(site)}
            dist = by_site[site].get(canonicalize_name(name))
            if dist is not None:
                found.append(dist)
                break
    return found


def _installed_state(dist: InstalledDist) -> str:
    """A digest of the size and mtime of each file `dist`'s RECORD lists, and of RECORD."""
    digest = hashlib.sha256()
    prefix = os.path.normpath(dist.site_packages) + os.sep
    paths = [str(dist.dist_info / "RECORD")]
    paths += [join_record_path(prefix, e.path) for e in read_dist_record(dist.dist_info)]
    for path in paths:
        try:
            info = os.stat(path)
            digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
        except OSError:
            digest.update(f"{path}\0-\0".encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class ToolWheels:
    """repro's own wheels, and the warnings of their making (a file carried modified)."""

    wheels: tuple[Path, ...]
    warnings: tuple[str, ...] = ()


CARRIED = "carried.json"  # beside a set's wheels: its warnings, said again on a cache hit


def tool_wheels(
    cache_root: Path, *, source_date_epoch: int, inputs: ToolWheelInputs | None = None
) -> ToolWheels:
    """Wheels of repro and its dependencies; built once per content, then reused."""
    found = inputs or tool_wheel_inputs()
    key = hashlib.sha256(f"{found.content_key}:{source_date_epoch}".encode())
    cache = cache_root / key.hexdigest()[:24]
    if (cache / ".complete").exists():
        os.utime(cache)
        return ToolWheels(tuple(sorted(cache.glob("*.whl"))), _read_carried(cache))
    staging = staging_for(cache)
    warnings: list[str] = []
    for dist in found.wanted:
        source = found.sources.get(dist.canonical_name)
        if source is not None:
            build_from_source(
                source, Path(sys.executable), staging, source_date_epoch=source_date_epoch
            )
            continue
        # no pristine copy is looked for: the tool venv setup_env.sh makes should hold
        # what this repro runs with, the CA a company appended to certifi included
        carrier = CarryPatched()
        rebuild_wheel(dist, staging, pristine=carrier, source_date_epoch=source_date_epoch)
        warnings += [_carried_warning(dist, path) for path in carrier.carried]
    for wheel in staging.glob("*.whl"):
        _deflate(wheel)
    (staging / CARRIED).write_text(json.dumps(warnings, indent=0) + "\n", encoding="utf-8")
    publish(staging, cache)
    prune_tool_wheel_cache(cache_root, keep=KEEP_TOOL_WHEEL_SETS)
    return ToolWheels(tuple(sorted(cache.glob("*.whl"))), _read_carried(cache))


def _carried_warning(dist: InstalledDist, path: str) -> str:
    where = dist.site_packages / path
    state = "modified" if where.exists() else "removed"
    return (
        f"repro's own wheel of {dist.name} {dist.version} (tool/wheels, for setup_env.sh) "
        f"carries {where} as it is installed here: {state} since "
        f"{dist.dist_info / 'RECORD'} was written (a CA appended to a cacert.pem, a hand "
        "edit); setup_env.sh installs it so"
    )


def _read_carried(cache: Path) -> tuple[str, ...]:
    path = cache / CARRIED
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return ()  # a set cached before this file was written: nothing was carried
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable: {exc}", hint=f"remove {cache}") from exc
    if not isinstance(loaded, list) or not all(isinstance(w, str) for w in loaded):
        raise InputError(f"{path}: not a list of warnings", hint=f"remove {cache}")
    return tuple(loaded)


def _deflate(wheel: Path) -> None:
    """Rewrite a wheel with every member deflated (names, order, times and modes kept):
    rebuilt wheels are stored ZIPs, and these go into every bundle, --wheels none
    included (deflated, they take a fraction of the stored size). Built once per
    cache key."""
    temp = wheel.with_name(wheel.name + ".tmp")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(temp, "w") as target:
        for info in source.infolist():
            member = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            member.external_attr = info.external_attr
            member.create_system = info.create_system
            target.writestr(member, source.read(info), zipfile.ZIP_DEFLATED, 6)
    temp.replace(wheel)


KEEP_TOOL_WHEEL_SETS = 4


def prune_tool_wheel_cache(cache_root: Path, *, keep: int) -> list[Path]:
    """Remove all but the ``keep`` most recently used wheel sets (each source edit or
    SOURCE_DATE_EPOCH makes a new one, tens of MB); returns what was removed.  Staging
    directories are left alone unless a day old (a pack may be filling one now)."""
    complete = [d for d in cache_root.iterdir() if (d / ".complete").exists()]
    complete.sort(key=lambda d: d.stat().st_mtime, reverse=True)
    stale = complete[keep:]
    day_ago = time.time() - 86400
    stale += [
        d for d in cache_root.glob("*.partial-*") if d.is_dir() and d.stat().st_mtime < day_ago
    ]
    for directory in stale:
        shutil.rmtree(directory, ignore_errors=True)
    return stale
