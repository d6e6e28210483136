"""Capture systemd units for a bundle.

Absolute paths that point into the source venv, workspace or models directory
become ${REPRO_VENV}, ${REPRO_HOME} and ${REPRO_MODELS}, which the unpacker
fills in with the target's paths. Files named by EnvironmentFile= come along,
with secret-looking values redacted.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.errors import InputError
from repro.secrets import redact_assignment

UNIT_SUFFIXES = (".service", ".socket", ".timer", ".path", ".target", ".mount")
SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
VARIABLES = ("REPRO_VENV", "REPRO_HOME", "REPRO_MODELS")
_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.@\\-]+$")
_ENV_FILE = re.compile(r"^\s*EnvironmentFile\s*=\s*-?(?P<path>\S+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class PathMap:
    """Source paths and the variable each becomes, longest first."""

    pairs: tuple[tuple[str, str], ...]

    @classmethod
    def build(cls, *, venv: Path | None, home: Path | None, models: Path | None) -> PathMap:
        pairs = [
            (str(path), f"${{{name}}}")
            for name, path in zip(VARIABLES, (venv, home, models), strict=True)
            if path is not None
        ]
        pairs.sort(key=lambda pair: len(pair[0]), reverse=True)
        return cls(tuple(pairs))

    def templatize(self, text: str) -> str:
        for source, variable in self.pairs:
            text = re.sub(re.escape(source) + r"(?=/|\s|$|[\"':;])", variable, text)
        return text


@dataclass(frozen=True)
class EnvironmentFile:
    source: Path
    bundle_name: str
    content: bytes
    redacted: tuple[str, ...]


@dataclass(frozen=True)
class CapturedUnit:
    name: str
    source: Path
    content: bytes
    environment_files: tuple[EnvironmentFile, ...]
    warnings: tuple[str, ...]


def validate_unit_name(name: str, *, source: str) -> None:
    """A unit's name must be a plain systemd name; it is installed under it."""
    if not _UNIT_NAME.match(name) or not name.endswith(UNIT_SUFFIXES) or name.startswith("."):
        raise InputError(
            f"{source}: {name!r} is not a systemd unit name",
            hint=f"unit files end in one of {', '.join(UNIT_SUFFIXES)} and hold no '/'",
        )


def discover_units(services_dir: Path) -> list[Path]:
    if not services_dir.is_dir():
        return []
    return sorted(
        path for path in services_dir.iterdir() if path.is_file() and path.suffix in UNIT_SUFFIXES
    )


def resolve_unit_names(names: Sequence[str], *, unit_dir: Path = SYSTEM_UNIT_DIR) -> list[Path]:
    """`--unit NAME` arguments: a path, or a name under /etc/systemd/system."""
    found: list[Path] = []
    for name in names:
        candidate = Path(name) if "/" in name else unit_dir / name
        if not candidate.is_file():
            raise InputError(
                f"unit {name!r}: {candidate} does not exist",
                hint="give a unit name under /etc/systemd/system or a path to a unit file",
            )
        found.append(candidate)
    return found


def redact_environment_file(text: str) -> tuple[str, tuple[str, ...]]:
    """Redact KEY=value lines whose key looks secret; keep comments and layout."""
    out: list[str] = []
    redacted: list[str] = []
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and "=" in stripped:
            key, _, value = stripped.partition("=")
            key = key.removeprefix("export ").strip()
            safe = redact_assignment(key, value)
            if safe != value:
                redacted.append(key)
                ending = "\n" if line.endswith("\n") else ""
                line = f"{key}={safe}{ending}"
        out.append(line)
    return "".join(out), tuple(redacted)


def _verify_with_systemd(path: Path, timeout: float = 30) -> list[str]:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return []
    try:
        result = subprocess.run(
            [tool, "verify", "--man=no", str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"{path.name}: systemd-analyze verify did not run: {exc}"]
    lines = [line.strip() for line in (result.stderr + result.stdout).splitlines()]
    return [f"{path.name}: {line}" for line in lines if line]


def capture_unit(path: Path, paths: PathMap, *, verify: bool = True) -> CapturedUnit:
    validate_unit_name(path.name, source=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read unit file: {exc}") from exc
    env_files: list[EnvironmentFile] = []
    warnings: list[str] = []
    for match in _ENV_FILE.finditer(text):
        env_path = Path(match.group("path"))
        if "$" in match.group("path") or not env_path.is_absolute():
            warnings.append(f"{path.name}: EnvironmentFile={env_path} is not captured (not a path)")
            continue
        if not env_path.is_file():
            warnings.append(f"{path.name}: EnvironmentFile={env_path} does not exist")
            continue
        env_text, redacted = redact_environment_file(env_path.read_text(encoding="utf-8"))
        env_files.append(
            EnvironmentFile(
                source=env_path,
                bundle_name=f"{path.name}.d/{env_path.name}",
                content=paths.templatize(env_text).encode(),
                redacted=redacted,
            )
        )
        warnings.extend(f"{env_path}: value of {key} redacted" for key in redacted)
    if verify:
        warnings.extend(_verify_with_systemd(path))
    return CapturedUnit(
        name=path.name,
        source=path,
        content=paths.templatize(text).encode(),
        environment_files=tuple(env_files),
        warnings=tuple(warnings),
    )


def render_unit(template: str, values: dict[str, str]) -> str:
    """Fill ${REPRO_*} variables; other ${...} (systemd's own) stay as they are."""
    for name in VARIABLES:
        if name in values:
            template = template.replace(f"${{{name}}}", values[name])
    return template
