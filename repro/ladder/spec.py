"""Build a LadderSpec from a bundle directory (bundle.toml, patches/patches.toml).

A deliberately small reader of the few keys the ladder needs; the bundle's
full loader lives elsewhere.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from repro import _toml
from repro.bundle.info import MAX_TIMEOUT_S
from repro.errors import BundleFormatError, InputError
from repro.ladder.model import (
    ENGINES,
    RUNG_NAMES,
    AppliedPatch,
    LadderSpec,
    LaunchSpec,
    Timeouts,
)
from repro.servecmd import PortNotANumber, serve_command
from repro.unitexec import parse_service

LAUNCH_ENGINES = ("sglang", "vllm", "openai")
VARIABLES = ("REPRO_VENV", "REPRO_HOME", "REPRO_MODELS")
_VARIABLE = re.compile(r"\$\{(REPRO_[A-Z]+)\}")


def _load(path: Path) -> dict[str, Any]:
    try:
        return _toml.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"{path}: file not found") from exc
    except _toml.TOMLDecodeError as exc:
        raise BundleFormatError(f"{path}: not valid TOML: {exc}") from exc


def _table(document: Mapping[str, Any], key: str, path: Path) -> Mapping[str, Any]:
    value = document.get(key, {})
    if not isinstance(value, dict):
        raise BundleFormatError(f"{path}: [{key}] must be a table")
    return value


def guess_engine(command: str) -> str:
    if "sglang" in command:
        return "sglang"
    return "vllm" if "vllm" in command else "openai"


def port_from_argv(argv: tuple[str, ...]) -> int | None:
    for index, arg in enumerate(argv):
        if arg == "--port" and index + 1 < len(argv) and argv[index + 1].isdigit():
            return int(argv[index + 1])
        if arg.startswith("--port=") and arg[len("--port=") :].isdigit():
            return int(arg[len("--port=") :])
    return None


def launch_from_table(entry: Mapping[str, Any], where: str) -> LaunchSpec:
    """One ``[[launch.commands]]`` entry: name, argv or shell, port, engine."""
    name = entry.get("name")
    argv = entry.get("argv")
    shell = entry.get("shell")
    if not isinstance(name, str) or not name:
        raise BundleFormatError(f"{where}: a launch command needs a name")
    if (argv is None) == (shell is None):
        raise BundleFormatError(f"{where}: launch command {name!r} needs argv or shell (one)")
    if argv is not None and not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        raise BundleFormatError(f"{where}: launch command {name!r}: argv must be strings")
    if shell is not None and not isinstance(shell, str):
        raise BundleFormatError(f"{where}: launch command {name!r}: shell must be a string")
    command_text = " ".join(argv) if argv is not None else str(shell)
    port = entry.get("port")
    if port is None and argv is not None:
        port = port_from_argv(tuple(argv))
    if not isinstance(port, int) or not 0 < port < 65536:
        raise BundleFormatError(f"{where}: launch command {name!r} needs a port (1-65535)")
    engine = entry.get("engine", guess_engine(command_text))
    if engine not in LAUNCH_ENGINES:
        raise BundleFormatError(
            f"{where}: launch command {name!r}: engine must be one of {', '.join(LAUNCH_ENGINES)}"
        )
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise BundleFormatError(f"{where}: launch command {name!r}: env must be a table of strings")
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise BundleFormatError(f"{where}: launch command {name!r}: cwd must be a string")
    unit = entry.get("unit")
    if unit is not None and not isinstance(unit, str):
        raise BundleFormatError(f"{where}: launch command {name!r}: unit must be a string")
    return LaunchSpec(
        name=name,
        port=port,
        engine=engine,
        argv=tuple(argv) if argv is not None else None,
        shell=shell,
        env=dict(env),
        cwd=Path(cwd) if cwd is not None else None,
        unit=unit,
    )


def fill_variables(launch: LaunchSpec, variables: Mapping[str, str]) -> LaunchSpec:
    """${REPRO_VENV}, ${REPRO_HOME} and ${REPRO_MODELS} filled in argv, shell, env and
    cwd from `variables`; those it does not give stay as they are."""

    def fill(text: str) -> str:
        return _VARIABLE.sub(lambda m: variables.get(m.group(1), m.group(0)), text)

    return replace(
        launch,
        argv=tuple(fill(arg) for arg in launch.argv) if launch.argv is not None else None,
        shell=fill(launch.shell) if launch.shell is not None else None,
        env={name: fill(value) for name, value in launch.env.items()},
        cwd=Path(fill(str(launch.cwd))) if launch.cwd is not None else None,
    )


def unfilled_variables(launch: LaunchSpec) -> tuple[str, ...]:
    """The ${REPRO_*} variables a launch still names."""
    texts = [*(launch.argv or ()), launch.shell or "", *launch.env.values(), str(launch.cwd or "")]
    return tuple(sorted({m.group(1) for text in texts for m in _VARIABLE.finditer(text)}))


def launch_from_command(command: str, port: int | None, engine: str | None) -> LaunchSpec:
    """``--launch "CMD"``: split like a shell would, without a shell."""
    argv = tuple(shlex.split(command))
    if not argv:
        raise InputError("--launch: empty command")
    chosen = port if port is not None else port_from_argv(argv)
    if chosen is None:
        raise InputError(
            "--launch: cannot tell the port", hint="pass --port N or put --port N in the command"
        )
    return LaunchSpec("cli", chosen, engine or guess_engine(command), argv=argv)


def launch_from_unit(
    unit: Path,
    port: int | None,
    engine: str | None,
    variables: Mapping[str, str] | None = None,
) -> LaunchSpec:
    """``--service NAME``: a systemd unit's ExecStart=, Environment= and
    WorkingDirectory=, read as systemd would (repro.unitexec)."""
    try:
        text = unit.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{unit}: cannot read the unit file: {exc.strerror}") from exc
    service = parse_service(text, unit=unit.name)
    if not service.argv:
        raise InputError(f"{unit}: no ExecStart= line")
    try:
        serve = serve_command(service.argv)
    except PortNotANumber as exc:
        raise InputError(
            f"{unit}: ExecStart= --port {exc} is not a port number", hint="pass --port N"
        ) from exc
    chosen = port if port is not None else serve.port if serve is not None else None
    if chosen is None:
        raise InputError(
            f"{unit}: cannot tell the port of {service.argv[0]}",
            hint="pass --port N or put --port N in the unit's ExecStart=",
        )
    directory = service.working_directory
    launch = LaunchSpec(
        name=unit.stem,
        port=chosen,
        engine=engine or (serve.engine if serve is not None else "openai"),
        argv=service.argv,
        env=dict(service.environment),
        cwd=Path(directory) if directory and directory.startswith(("/", "${")) else None,
        unit=unit.name,
    )
    return fill_variables(launch, variables or {})


def patched_files(bundle_dir: Path) -> tuple[AppliedPatch, ...]:
    path = bundle_dir / "patches" / "patches.toml"
    if not path.exists():
        return ()
    entries = _load(path).get("files", [])
    if not isinstance(entries, list):
        raise BundleFormatError(f"{path}: [[files]] must be an array of tables")
    found: list[AppliedPatch] = []
    for index, entry in enumerate(entries):
        where = f"{path}: files[{index}]"
        if not isinstance(entry, dict):
            raise BundleFormatError(f"{where}: must be a table")
        dist, rel, kind = entry.get("dist"), entry.get("path"), entry.get("kind", "modified")
        if not isinstance(dist, str) or not isinstance(rel, str):
            raise BundleFormatError(f"{where}: needs dist and path")
        if kind not in ("modified", "added", "deleted"):
            raise BundleFormatError(f"{where}: kind must be modified, added or deleted")
        digest = entry.get("patched_sha256")
        if kind != "deleted" and not isinstance(digest, str):
            raise BundleFormatError(f"{where}: needs patched_sha256")
        found.append(AppliedPatch(dist, rel, kind, digest if kind != "deleted" else None))
    return tuple(found)


def spec_from_bundle_dir(
    bundle_dir: Path,
    python: Path,
    *,
    cpu: bool = False,
    rungs: tuple[str, ...] | None = None,
    launch_name: str | None = None,
    timeouts: Timeouts | None = None,
    keep_going: bool = False,
    log_dir: Path | None = None,
    variables: Mapping[str, str] | None = None,
) -> LadderSpec:
    """Read bundle.toml's [source], [launch] and [ladder], and patches/patches.toml.

    `variables` fills ${REPRO_VENV}, ${REPRO_HOME} and ${REPRO_MODELS} in the launch
    commands (argv, shell, env, cwd) with the target's paths."""
    path = bundle_dir / "bundle.toml"
    document = _load(path)
    source = _table(document, "source", path)
    ladder = _table(document, "ladder", path)
    launch_table = _table(document, "launch", path)

    expected_python = source.get("python")
    if expected_python is not None and not isinstance(expected_python, str):
        raise BundleFormatError(f"{path}: [source] python must be a string like '3.12.1'")

    commands = launch_table.get("commands", [])
    if not isinstance(commands, list):
        raise BundleFormatError(f"{path}: [launch] commands must be an array of tables")
    launches = [
        fill_variables(launch_from_table(entry, str(path)), variables or {}) for entry in commands
    ]
    launch = _pick_launch(launches, launch_name, path)

    expected_text = ladder.get("expected_text")
    if expected_text is not None and not isinstance(expected_text, str):
        raise BundleFormatError(f"{path}: [ladder] expected_text must be a string")
    if launch is not None and expected_text is not None:
        launch = replace(launch, expected_text=expected_text)

    chosen_rungs = rungs if rungs is not None else _rungs(ladder, path)
    chosen_timeouts = timeouts or Timeouts()
    timeout_s = ladder.get("timeout_s")
    if timeouts is None and timeout_s is not None:
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, (int, float))
            or not math.isfinite(timeout_s)
            or not 0 < timeout_s <= MAX_TIMEOUT_S
        ):
            raise BundleFormatError(
                f"{path}: [ladder] timeout_s must be a positive number of seconds, at most "
                f"{MAX_TIMEOUT_S:g} (not {timeout_s!r})"
            )
        chosen_timeouts = replace(chosen_timeouts, server_ready=float(timeout_s))

    patches = patched_files(bundle_dir)
    engines = {item.engine for item in launches if item.engine in ENGINES}
    engines |= {p.dist for p in patches if p.dist in ENGINES}
    return LadderSpec(
        python=python,
        expected_python=expected_python,
        cpu=cpu,
        rungs=chosen_rungs,
        engines=tuple(sorted(engines)),
        patched_files=patches,
        launch=launch,
        timeouts=chosen_timeouts,
        keep_going=keep_going,
        log_dir=log_dir,
    )


def _rungs(ladder: Mapping[str, Any], path: Path) -> tuple[str, ...]:
    """The bundle's [ladder] rungs in ladder order; absent or empty: every rung."""
    value = ladder.get("rungs")
    if value is None or value == []:
        return RUNG_NAMES
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BundleFormatError(f"{path}: [ladder] rungs must be a list of rung names")
    unknown = [v for v in value if v not in RUNG_NAMES]
    if unknown:
        raise BundleFormatError(
            f"{path}: [ladder] rungs: unknown {', '.join(unknown)}",
            hint=f"choose from {', '.join(RUNG_NAMES)}",
        )
    return tuple(n for n in RUNG_NAMES if n in value)


def _pick_launch(launches: list[LaunchSpec], name: str | None, path: Path) -> LaunchSpec | None:
    if name is None:
        return launches[0] if launches else None
    for launch in launches:
        if launch.name == name:
            return launch
    known = ", ".join(item.name for item in launches) or "none"
    raise InputError(f"{path}: no launch command named {name!r} (known: {known})")
