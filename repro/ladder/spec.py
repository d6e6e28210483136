"""Build a LadderSpec from a bundle directory (bundle.toml, patches/patches.toml,
env/kernels.toml).

Each file is read by the bundle's own loader (repro.bundle.info, repro.bundle.patchset,
repro.bundle.kernels),
so the ladder takes what pack wrote and refuses what unpack and check refuse.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from repro.bundle import layout
from repro.bundle.info import BundleInfo, LaunchCommand, load_bundle_info
from repro.bundle.kernels import load_kernels
from repro.bundle.patchset import load_patchset
from repro.errors import BundleFormatError, InputError, PortNotANumber
from repro.ladder import registry
from repro.ladder.registry import in_ladder_order, unknown_rungs
from repro.ladder.types import (
    ENGINES,
    AppliedPatch,
    KernelCheck,
    LadderSpec,
    LaunchSpec,
    Timeouts,
)
from repro.ladder.variables import fill_variables
from repro.servecmd import serve_command
from repro.units.command import parse_service


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise InputError(f"{path}: file not found") from exc
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from exc


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


def launch_from_info(command: LaunchCommand) -> LaunchSpec:
    """One ``[[launch.commands]]`` entry of a loaded bundle.toml."""
    return LaunchSpec(
        name=command.name,
        port=command.port,
        engine=command.engine,
        argv=command.argv,
        shell=command.shell,
        env=dict(command.env),
        cwd=Path(command.cwd) if command.cwd is not None else None,
        unit=command.unit,
    )


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
    WorkingDirectory=, read as systemd would (repro.units.command)."""
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
    """The files patches/patches.toml says the patches changed; none without that file."""
    path = layout.at(bundle_dir, layout.PATCHES_TOML)
    if not path.exists():
        return ()
    patchset = load_patchset(_read(path), source=str(path))
    return tuple(
        AppliedPatch(entry.dist, entry.path, entry.kind, entry.patched_sha256)
        for entry in patchset.entries
    )


def kernel_checks(bundle_dir: Path) -> tuple[KernelCheck, ...]:
    """The kernel sources env/kernels.toml lists, each with its check command (empty:
    none); none without that file."""
    path = layout.at(bundle_dir, layout.KERNELS_TOML)
    if not path.exists():
        return ()
    audit = load_kernels(_read(path), source=str(path))
    return tuple(KernelCheck(source.name, source.check) for source in audit.sources)


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
    """Read bundle.toml's [source], [launch] and [ladder], patches/patches.toml and
    env/kernels.toml.

    `variables` fills ${REPRO_VENV}, ${REPRO_HOME} and ${REPRO_MODELS} in the launch
    commands (argv, shell, env, cwd) with the target's paths; ${REPRO_HOME} is also
    where the kernel checks run."""
    path = layout.at(bundle_dir, layout.BUNDLE_TOML)
    info = load_bundle_info(_read(path), source=str(path))
    launches = [
        fill_variables(launch_from_info(command), variables or {})
        for command in info.launch.commands
    ]
    launch = _pick_launch(launches, launch_name, path)
    expected_text = info.ladder.expected_text
    if launch is not None and expected_text is not None:
        launch = replace(launch, expected_text=expected_text)
    chosen_timeouts = timeouts or Timeouts(server_ready=info.ladder.timeout_s)
    patches = patched_files(bundle_dir)
    engines = {item.engine for item in launches if item.engine in ENGINES}
    engines |= {p.dist for p in patches if p.dist in ENGINES}
    return LadderSpec(
        python=python,
        expected_python=info.source.python or None,
        cpu=cpu,
        rungs=rungs if rungs is not None else _rungs(info, path),
        engines=tuple(sorted(engines)),
        patched_files=patches,
        launch=launch,
        timeouts=chosen_timeouts,
        keep_going=keep_going,
        log_dir=log_dir,
        kernels=kernel_checks(bundle_dir),
        home=Path(variables["REPRO_HOME"]) if variables and "REPRO_HOME" in variables else None,
    )


def _rungs(info: BundleInfo, path: Path) -> tuple[str, ...]:
    """The bundle's [ladder] rungs in ladder order; absent or empty: every rung."""
    value = info.ladder.rungs
    if not value:
        return registry.RUNG_NAMES
    unknown = unknown_rungs(value)
    if unknown:
        raise BundleFormatError(
            f"{path}: [ladder] rungs: unknown {', '.join(unknown)}",
            hint=f"choose from {', '.join(registry.RUNG_NAMES)}",
        )
    return in_ladder_order(value)


def _pick_launch(launches: list[LaunchSpec], name: str | None, path: Path) -> LaunchSpec | None:
    if name is None:
        return launches[0] if launches else None
    for launch in launches:
        if launch.name == name:
            return launch
    known = ", ".join(item.name for item in launches) or "none"
    raise InputError(f"{path}: no launch command named {name!r} (known: {known})")
