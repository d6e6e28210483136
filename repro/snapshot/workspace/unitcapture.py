"""Capture systemd units for a bundle.

Absolute paths that point into the source venv or workspace become ${REPRO_VENV}
and ${REPRO_HOME}; a model directory outside both becomes ${REPRO_MODELS}/<its
name>. The unpacker fills them in with the target's paths. Files named by
EnvironmentFile= come along, with secret-looking values emptied. Credentials written
in the unit itself (Environment=, ExecStart= arguments) are taken out
(repro.snapshot.workspace.unitsecrets): the unit reads them from a drop-in the operator fills on
the target (repro.units.dropin). A unit whose ExecStart= runs a server (repro.servecmd)
gives a launch command for the ladder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.bundle import layout
from repro.bundle.info import LaunchCommand, Role
from repro.errors import InputError, PortNotANumber
from repro.redaction import is_secret_name, scrub_text, secret_assignment
from repro.servecmd import is_hub_id, model_arguments, serve_command
from repro.snapshot.workspace.unitsecrets import CleanUnit, TakenSecret, clean_unit
from repro.units.command import ServiceExec, parse_service
from repro.units.dropin import REQUIRED_MARK, dropin_member, render_dropin
from repro.units.names import UNIT_SUFFIXES, validate_unit_name
from repro.units.text import check_unit_text, physical_lines, unit_assignments

SYSTEM_UNIT_DIR = Path("/etc/systemd/system")


@dataclass(frozen=True)
class PathMap:
    """Source paths and what each becomes, longest first."""

    pairs: tuple[tuple[str, str], ...]

    @classmethod
    def build(
        cls, *, venv: Path | None, home: Path | None, model_dirs: Iterable[Path] = ()
    ) -> PathMap:
        """The venv becomes ${REPRO_VENV}, the workspace ${REPRO_HOME}, and each model
        directory outside both ${REPRO_MODELS}/<its name>."""
        pairs = [
            (str(path), f"${{{name}}}")
            for name, path in (("REPRO_VENV", venv), ("REPRO_HOME", home))
            if path is not None
        ]
        return cls(_longest_first(pairs)).with_models(model_dirs)

    def covers(self, path: str) -> bool:
        """True when `path` is one of the mapped paths or inside one."""
        return any(path == source or path.startswith(source + "/") for source, _ in self.pairs)

    def with_models(self, model_dirs: Iterable[Path | str]) -> PathMap:
        """Each absolute model directory not covered yet: ${REPRO_MODELS}/<basename>."""
        mapped = self
        for model_dir in model_dirs:
            text = os.path.normpath(str(model_dir))
            if os.path.isabs(text) and text != "/" and not mapped.covers(text):
                pair = (text, f"${{REPRO_MODELS}}/{os.path.basename(text)}")
                mapped = PathMap(_longest_first((*mapped.pairs, pair)))
        return mapped

    def templatize(self, text: str) -> str:
        for source, variable in self.pairs:
            text = re.sub(re.escape(source) + r"(?=/|\s|$|[\"':;\\])", variable, text)
        return text


def _longest_first(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(pairs, key=lambda pair: len(pair[0]), reverse=True))


@dataclass(frozen=True)
class UnitModel:
    """A model directory a unit's ExecStart= names, as it is on the source."""

    path: Path  # the directory (for a repository id: the id as a relative path)
    role: Role
    name: str  # the directory's name: ${REPRO_MODELS}/<name> on the target
    repo_id: str | None = None  # the command names a repository id, not a path

    @property
    def present(self) -> bool:
        return self.repo_id is None and self.path.is_dir()


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
    launch: LaunchCommand | None = None  # when ExecStart= runs a server
    models: tuple[UnitModel, ...] = ()  # model directories ExecStart= names
    secrets: tuple[TakenSecret, ...] = ()  # credentials taken out of the unit


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


def redact_environment_file(
    text: str, *, source: str = "environment file"
) -> tuple[str, tuple[str, ...]]:
    """Empty the values of KEY=value lines that hold a credential (repro.redaction
    .secret_assignment), each marked for the operator (repro.units.dropin.REQUIRED_MARK);
    keep comments and layout. Lines end at "\\n" only, as systemd reads the file; a
    character that would end or hide a line elsewhere is refused (repro.units.text)."""
    out: list[str] = []
    redacted: list[str] = []
    for line in physical_lines(text, source=source):
        stripped = line.strip(" \t\r\n")
        if stripped and not stripped.startswith("#") and "=" in stripped:
            key, _, value = stripped.partition("=")
            key = key.removeprefix("export ").strip()
            if secret_assignment(key, value.strip().strip("\"'")) is not None:
                redacted.append(key)
                line = f"{REQUIRED_MARK}\n{key}=\n"
        out.append(line)
    return "".join(out), tuple(redacted)


def _taken_warning(unit: str, item: TakenSecret) -> str:
    """Names the unit, the setting and the variable; never the value."""
    where = f"on the target in {layout.unit(dropin_member(unit))}"
    if item.key == "Environment":
        return (
            f"{unit}: Environment={item.name} looks like a credential ({item.why}); "
            f"taken out of the unit: set it {where}"
        )
    return (
        f"{unit}: {item.key}= {item.why} looks like a credential; taken out of the unit, "
        f"now ${{{item.name}}}: set {item.name} {where}"
    )


def _dropin(unit: str, cleaned: CleanUnit) -> EnvironmentFile | None:
    if not cleaned.taken:
        return None
    return EnvironmentFile(
        source=Path(dropin_member(unit)),
        bundle_name=dropin_member(unit),
        content=render_dropin(unit, cleaned.names).encode(),
        redacted=cleaned.names,
    )


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


def unit_models(service: ServiceExec) -> tuple[UnitModel, ...]:
    """Every model a command names, each once, there or not: the values of the model
    flags (repro.servecmd.MODEL_FLAGS) and the positional model of `vllm serve` and
    `transformers serve`, as absolute paths, or repository ids (`org/name` that is no
    path here)."""
    found: dict[Path, UnitModel] = {}
    for argument in model_arguments(service.argv):
        path = Path(os.path.normpath(argument.value))
        if path in found:
            continue
        if path.is_absolute() and path != Path("/"):
            found[path] = UnitModel(path, argument.role, path.name)
        elif is_hub_id(argument.value):
            name = argument.value.split("/")[-1]
            found[path] = UnitModel(path, argument.role, name, repo_id=argument.value)
    return tuple(found.values())


def models_named_by_units(units: Iterable[CapturedUnit]) -> list[UnitModel]:
    """For the pack: each model directory any captured unit names, once (the role of
    its first naming)."""
    found: dict[Path, UnitModel] = {}
    for unit in units:
        for model in unit.models:
            found.setdefault(model.path, model)
    return list(found.values())


def _working_directory(value: str | None) -> str | None:
    """WorkingDirectory= as a launch's cwd: an absolute or ${REPRO_*} path; "~" (the
    user's home) and relative values are not kept."""
    if value is None or not (value.startswith("/") or value.startswith("${REPRO_")):
        return None
    return value


def unit_launch(service: ServiceExec) -> tuple[LaunchCommand | None, list[str]]:
    """The launch command of a unit whose ExecStart= runs a server, with warnings."""
    try:
        serve = serve_command(service.argv)
    except PortNotANumber as exc:
        return None, [
            f"{service.unit}: ExecStart= --port {str(exc)!r} is not a port number; "
            "no launch command taken"
        ]
    if serve is None:
        return None, []
    secret = sorted(name for name in service.environment if is_secret_name(name))
    env = {k: v for k, v in sorted(service.environment.items()) if k not in secret}
    warnings = [
        f"{service.unit}: Environment={name} looks like a credential; "
        "not recorded in the launch command"
        for name in secret
    ]
    launch = LaunchCommand(
        name=service.unit.rpartition(".")[0] or service.unit,
        port=serve.port,
        engine=serve.engine,
        argv=service.argv,
        env=env,
        cwd=_working_directory(service.working_directory),
        unit=service.unit,
    )
    return launch, warnings


def _environment_files(text: str, source: str) -> list[str]:
    """The paths EnvironmentFile= settings name, each without its "-"."""
    return [
        line.value.removeprefix("-")
        for line in unit_assignments(text, source=source)
        if line.key == "EnvironmentFile" and line.value
    ]


def capture_unit(path: Path, paths: PathMap, *, verify: bool = True) -> CapturedUnit:
    validate_unit_name(path.name, source=str(path))
    try:
        # bytes, decoded: text mode would turn a lone "\r" into a line end unseen
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read unit file: {exc}") from exc
    # Read as systemd reads it, or refused with the line (repro.units.text): a line that
    # systemd runs and repro would not show never enters a bundle.
    check_unit_text(text, source=str(path))
    # Model directories named in ExecStart= become references: inside the workspace
    # through ${REPRO_HOME}, outside it ${REPRO_MODELS}/<name> each.
    source_service = parse_service(text, unit=path.name, source=str(path))
    models = unit_models(source_service)
    paths = paths.with_models(
        argument.value
        for argument in model_arguments(source_service.argv)
        if argument.value.startswith("/")
    )
    cleaned = clean_unit(text, unit=path.name, source=str(path))
    dropin = _dropin(path.name, cleaned)
    env_files: list[EnvironmentFile] = [] if dropin is None else [dropin]
    warnings: list[str] = [_taken_warning(path.name, item) for item in cleaned.taken]
    for named in _environment_files(text, str(path)):
        env_path = Path(named)
        if any(c in named for c in "$% \t") or not env_path.is_absolute():
            warnings.append(f"{path.name}: EnvironmentFile={named} is not captured (not a path)")
            continue
        if not env_path.is_file():
            warnings.append(f"{path.name}: EnvironmentFile={env_path} does not exist")
            continue
        try:
            env_raw = env_path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{env_path}: cannot read environment file: {exc}") from exc
        env_text, redacted = redact_environment_file(env_raw, source=str(env_path))
        bundle_name = f"{path.name}.d/{env_path.name}"
        env_files.append(
            EnvironmentFile(
                source=env_path,
                bundle_name=bundle_name,
                content=paths.templatize(env_text).encode(),
                redacted=redacted,
            )
        )
        warnings.extend(
            f"{env_path}: value of {key} taken out; set it on the target in "
            f"{layout.unit(bundle_name)}"
            for key in redacted
        )
    if verify:
        warnings.extend(_verify_with_systemd(path))
    content = paths.templatize(cleaned.text)
    service = parse_service(content, unit=path.name, provided=cleaned.names, source=str(path))
    warnings.extend(service.warnings)
    launch, launch_warnings = unit_launch(service)
    warnings.extend(launch_warnings)
    return CapturedUnit(
        name=path.name,
        source=path,
        content=content.encode(),
        environment_files=tuple(env_files),
        # systemd-analyze may quote a line it read: never a value taken out
        warnings=tuple(scrub_text(warning, cleaned.values) for warning in warnings),
        launch=launch,
        models=models,
        secrets=cleaned.taken,
    )
