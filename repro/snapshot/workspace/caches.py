"""The compile caches the workspace's engine uses, found and read with their keys.

Where each cache is: the variable of its kind (repro.bundle.caches.KINDS:
TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, ...) as the units give it to the service
(Environment=, then their EnvironmentFile=s, which systemd reads after), else the
tool's default under the service user's home (User= of the unit; a unit without one,
or a workspace without units: the user who packs). repro.toml's `[caches] paths` names
a directory for a kind outright.

What it holds: every regular file below it, except what the workspace rules leave out
(a name that looks like a credential's; content that holds a token, a private key or
the value of the packing environment's secret variables, judged as patched code is:
repro.snapshot.workspace.files.token_in_code; a link; a name a bundle cannot hold) and
Triton's unfinished temporary files. A cache is generated code: an assignment to a name
such as `key_states` (attention's keys) is no credential there, so the looser rule for
configuration files (`secret_in_file`'s assignments) does not apply.

Its key: the probe's facts of the source (GPU capabilities, torch, Triton, torch's
CUDA, the driver, the engine's version), except where the cache says it itself:
Triton writes the target architecture and its own version into each kernel's JSON
metadata, and those are taken from there (a cache that also holds kernels of another
GPU or Triton then names them all, and is restored nowhere they are not all true).
"""

from __future__ import annotations

import json
import os
import pwd
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.archive.tarformat import uncarried_name
from repro.bundle.caches import (
    KINDS,
    CacheKey,
    CacheKind,
    CarriedCache,
    KeyPart,
    capabilities,
    engine_key,
)
from repro.bundle.environment import EnvironmentFacts
from repro.snapshot.workspace.files import MAX_SCANNED_BYTES, looks_secret, token_in_code
from repro.snapshot.workspace.leftout import LeftOut
from repro.snapshot.workspace.unitcapture import CapturedUnit
from repro.units.command import parse_service
from repro.units.dropin import read_values
from repro.units.text import unit_assignments

# Triton writes a file as NAME.tmp.pid_<pid>_<uuid> and renames it: one left behind is
# a write a crash cut short.
_TRITON_TEMP = re.compile(r"\.tmp\.pid_\d+")
_METADATA_LIMIT = 1 << 20  # a Triton kernel's JSON metadata is a few KiB


@dataclass(frozen=True)
class FoundCache:
    """One cache directory and what of it travels."""

    kind: CacheKind
    directory: Path
    origin: str  # how it was found, for the pack's lines
    files: tuple[tuple[str, Path], ...]  # (path relative to the directory, file), sorted
    size: int
    key: CacheKey
    from_metadata: tuple[KeyPart, ...]
    left_out: tuple[LeftOut, ...]

    def carried(self) -> CarriedCache:
        return CarriedCache(
            kind=self.kind.name,
            source=str(self.directory),
            files=len(self.files),
            size=self.size,
            key=self.key,
            from_metadata=self.from_metadata,
        )


@dataclass(frozen=True)
class Location:
    directory: Path
    origin: str


def probe_key(facts: EnvironmentFacts, kind: CacheKind) -> CacheKey:
    """The key of a cache of `kind` made in the probed environment."""
    gpus = facts.nvidia_smi.gpus
    torch_module = next((m for m in facts.modules if m.module == "torch"), None)
    cuda = torch_module.torch.cuda if torch_module and torch_module.torch else None
    engine = engine_key(kind, {d.normalized_name: d.version for d in facts.distributions})
    key = CacheKey(
        capability=capabilities(g.compute_cap for g in gpus if g.compute_cap),
        torch=_version(facts, "torch"),
        triton=_version(facts, "triton") or _version(facts, "pytorch-triton"),
        cuda=cuda,
        driver=next((g.driver_version for g in gpus if g.driver_version), None),
        engine=engine,
    )
    return key.only(kind.parts)


def _version(facts: EnvironmentFacts, name: str) -> str | None:
    dist = facts.distribution(name)
    return dist.version if dist is not None else None


def _service_user(text: str, source: str) -> str | None:
    users = [
        line.value
        for line in unit_assignments(text, source=source)
        if line.key == "User" and line.section == "Service"
    ]
    return users[-1] if users and users[-1] else None


def _unit_environment(unit: CapturedUnit) -> tuple[dict[str, str], str | None]:
    """The environment systemd gives the unit's service (its Environment=, then its
    EnvironmentFile=s, as they are on this box) and its User=."""
    text = unit.source.read_bytes().decode("utf-8")
    service = parse_service(text, unit=unit.name, source=str(unit.source))
    environment = dict(service.environment)
    for env_file in unit.environment_files:
        if env_file.source.is_absolute() and env_file.source.is_file():
            environment.update(read_values(env_file.source.read_text(encoding="utf-8")))
    return environment, _service_user(text, str(unit.source))


def _home(user: str | None) -> tuple[str, Path] | None:
    """(name, home) of `user`, or of the user who packs."""
    try:
        entry = pwd.getpwnam(user) if user is not None else pwd.getpwuid(os.getuid())
    except KeyError:
        return None
    return entry.pw_name, Path(entry.pw_dir)


def default_directory(kind: CacheKind, user: str, home: Path, default: str = "") -> Path:
    """Where the tool puts its cache when its variable is not set (`default`: another
    of `kind.defaults` than the first)."""
    text = (default or kind.default).replace("{user}", re.sub(r'[\\/:*?"<>|]', "_", user))
    path = home / text[2:] if text.startswith("~/") else home if text == "~" else Path(text)
    return path / kind.subdir if kind.subdir else path


def locate(
    kind: CacheKind,
    units: Sequence[CapturedUnit],
    paths: Mapping[str, Path],
    warnings: list[str],
) -> Location | None:
    """Where the engine keeps its cache of `kind` (None: nowhere that exists)."""
    if kind.name in paths:
        return Location(paths[kind.name], "repro.toml [caches] paths")
    named: list[Location] = []
    users: list[str | None] = []
    for unit in units:
        environment, user = _unit_environment(unit)
        users.append(user)
        variable = next((v for v in kind.variables if environment.get(v)), None)
        if variable is None:
            continue
        value = environment[variable]
        if not value.startswith("/"):
            warnings.append(
                f"{unit.name}: {variable}={value} is not an absolute path; "
                f"its {kind.name} cache is not looked for"
            )
            continue
        base = Path(os.path.normpath(value))
        directory = base / kind.subdir if kind.subdir else base
        named.append(Location(directory, f"{variable} of {unit.name}"))
    if named:
        for other in named[1:]:
            if other.directory != named[0].directory:
                warnings.append(
                    f"{other.origin} names {other.directory}, another {kind.name} cache than "
                    f"{named[0].directory} ({named[0].origin}): only the first is carried"
                )
        return named[0] if named[0].directory.is_dir() else None
    for user in dict.fromkeys(users or [None]):
        found = _home(user)
        if found is None:
            warnings.append(
                f"User={user}: no such user here; its {kind.name} cache is not looked for"
            )
            continue
        name, home = found
        for default in kind.defaults:
            directory = default_directory(kind, name, home, default)
            if directory.is_dir():
                return Location(directory, f"the default of user {name}")
    return None


def read_cache(
    kind: CacheKind,
    location: Location,
    facts: EnvironmentFacts,
    secret_values: Sequence[str] = (),
) -> FoundCache:
    """The cache's files (what the workspace rules let travel) and its key."""
    directory = location.directory
    regular: list[Path] = []
    left_out: list[LeftOut] = []
    for root, dirs, names in os.walk(directory):
        dirs.sort()
        for name in sorted(names + [d for d in dirs if Path(root, d).is_symlink()]):
            path = Path(root, name)
            rel = path.relative_to(directory).as_posix()
            shown = f"{directory}/{rel}"
            if path.is_symlink() or not path.is_file():
                left_out.append(LeftOut(shown, "a link or special file in a cache", "not-a-file"))
            elif kind.name == "triton" and _TRITON_TEMP.search(name):
                continue
            elif (why := uncarried_name(f"{kind.name}/{rel}")) is not None:
                left_out.append(LeftOut(shown, why, "bad-name"))
            else:
                regular.append(path)
    kept: list[Path] = []
    for path in regular:
        why = "its name" if looks_secret(path) else _credential(path, secret_values)
        if why is None:
            kept.append(path)
        else:
            reason = (
                f"looks like a credential ({why}): never carried; put it on the target yourself"
            )
            left_out.append(
                LeftOut(f"{directory}/{path.relative_to(directory).as_posix()}", reason, "secret")
            )
    files = tuple((p.relative_to(directory).as_posix(), p) for p in kept)
    key = probe_key(facts, kind)
    from_metadata: tuple[KeyPart, ...] = ()
    if kind.name == "triton":
        key, from_metadata = _triton_key(key, [p for _, p in files])
    return FoundCache(
        kind=kind,
        directory=directory,
        origin=location.origin,
        files=files,
        size=sum(p.stat().st_size for _, p in files),
        key=key,
        from_metadata=from_metadata,
        left_out=tuple(left_out),
    )


def _credential(path: Path, secret_values: Sequence[str]) -> str | None:
    """Why the file's first MAX_SCANNED_BYTES hold a credential, as for patched code."""
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_SCANNED_BYTES)
    except OSError:
        return None  # the writing reports an unreadable file with its name
    return token_in_code(data, secret_values)


def _triton_key(key: CacheKey, files: Iterable[Path]) -> tuple[CacheKey, tuple[KeyPart, ...]]:
    """The capabilities and Triton versions its kernels' metadata names (`target.arch`:
    90 is 9.0, a string such as gfx942 as it is; `triton_version`), where it names any."""
    archs: set[str] = set()
    versions: set[str] = set()
    for path in files:
        if path.suffix != ".json" or path.name.startswith("__grp__"):
            continue
        metadata = _json(path)
        target = metadata.get("target") if metadata else None
        if isinstance(target, dict):
            arch = target.get("arch")
            if isinstance(arch, int) and not isinstance(arch, bool):
                archs.add(f"{arch // 10}.{arch % 10}")
            elif isinstance(arch, str) and arch:
                archs.add(arch)
        version = metadata.get("triton_version") if metadata else None
        if isinstance(version, str) and version:
            versions.add(version)
    parts: list[KeyPart] = []
    if archs:
        key = CacheKey(capabilities(archs), key.torch, key.triton, key.cuda, key.driver, key.engine)
        parts.append("capability")
    if versions:
        triton = ",".join(sorted(versions))
        key = CacheKey(key.capability, key.torch, triton, key.cuda, key.driver, key.engine)
        parts.append("triton")
    return key, tuple(parts)


def _json(path: Path) -> dict[str, object] | None:
    try:
        if path.stat().st_size > _METADATA_LIMIT:
            return None
        value = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def find_caches(
    units: Sequence[CapturedUnit],
    facts: EnvironmentFacts,
    *,
    kinds: Iterable[str] = (),
    paths: Mapping[str, Path] | None = None,
    secret_values: Sequence[str] = (),
) -> tuple[list[FoundCache], list[str]]:
    """Each cache of `kinds` (empty: every kind) the engine uses that exists here, read;
    with warnings."""
    wanted = set(kinds) or {kind.name for kind in KINDS}
    versions = {d.normalized_name: d.version for d in facts.distributions}
    warnings: list[str] = []
    found: list[FoundCache] = []
    for kind in KINDS:
        if kind.name not in wanted:
            continue
        location = locate(kind, units, paths or {}, warnings)
        if location is None:
            continue
        if kind.engines and engine_key(kind, versions) is None:
            # an engine's cache (vLLM's, FlashInfer's) where the venv runs none of it:
            # another environment's; named outright, the pack says why it is not carried
            if not location.origin.startswith("the default of"):
                warnings.append(
                    f"{location.origin}: {location.directory} is left out: the {kind.name} "
                    f"cache of {' or '.join(kind.engines)}, none of which the venv has"
                )
            continue
        found.append(read_cache(kind, location, facts, secret_values))
    return found, warnings
