"""Turn `repro smoke` options into a LadderSpec (no click here: plain values in)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from repro.bundle import layout
from repro.errors import UsageError
from repro.ladder.registry import RUNG_NAMES
from repro.ladder.spec import launch_from_command, launch_from_unit, spec_from_bundle_dir
from repro.ladder.types import LadderSpec, LaunchSpec, Timeouts

# unpack keeps the verified bundle in TARGET/.repro/bundle (repro.install.state.STATE_DIR;
# not imported: the ladder does not depend on the unpack side)
KEPT_BUNDLE_PARENT = ".repro"


@dataclass(frozen=True)
class SmokeOptions:
    venv: Path | None = None
    python: Path | None = None
    bundle: Path | None = None
    rungs: tuple[str, ...] | None = None
    cpu: bool = False
    keep_going: bool = False
    launch: str | None = None
    service: str | None = None
    port: int | None = None
    engine: str | None = None
    timeout: float | None = None
    log_dir: Path | None = None
    home: Path | None = None  # ${REPRO_HOME}: the deployed workspace
    models: Path | None = None  # ${REPRO_MODELS}: where the model weights are


def target_python(venv: Path | None, python: Path | None) -> Path:
    if venv is not None and python is not None:
        raise UsageError("give --venv or --python, not both")
    if python is not None:
        return python
    if venv is None and os.environ.get("VIRTUAL_ENV"):
        venv = Path(os.environ["VIRTUAL_ENV"])
    if venv is None:
        raise UsageError(
            "which environment? give --venv DIR or --python PATH",
            hint="the ladder runs inside the target environment, not in repro's own",
        )
    candidate = venv / "bin" / "python"
    if not candidate.exists():
        raise UsageError(f"{venv}: no bin/python here; is this a virtual environment?")
    return candidate


def _unit_path(name: str, bundle: Path | None) -> Path:
    names = [name] if name.endswith(".service") else [f"{name}.service", name]
    folders = [layout.at(bundle, layout.SERVICES)] if bundle is not None else []
    folders.append(Path("/etc/systemd/system"))
    for folder in folders:
        for candidate in names:
            if (folder / candidate).is_file():
                return folder / candidate
    where = ", ".join(str(f) for f in folders)
    raise UsageError(f"--service {name}: no unit file {names[0]} in {where}")


def launch_variables(options: SmokeOptions, python: Path) -> dict[str, str]:
    """The target's values of ${REPRO_VENV} (the venv's prefix), ${REPRO_HOME} (--home,
    or TARGET for a bundle kept by unpack in TARGET/.repro/bundle) and ${REPRO_MODELS}
    (--models), for the launch commands of a bundle."""
    variables: dict[str, str] = {}
    venv = options.venv
    if venv is None and python.parent.name == "bin":
        venv = python.parent.parent
    if venv is not None:
        variables["REPRO_VENV"] = str(venv.absolute())
    home = options.home
    bundle = options.bundle.absolute() if options.bundle is not None else None
    if home is None and bundle is not None and bundle.parent.name == KEPT_BUNDLE_PARENT:
        home = bundle.parent.parent
    if home is not None:
        variables["REPRO_HOME"] = str(home.absolute())
    if options.models is not None:
        variables["REPRO_MODELS"] = str(options.models.absolute())
    return variables


def _launch(options: SmokeOptions, variables: dict[str, str]) -> LaunchSpec | None:
    if options.launch is not None and options.service is not None:
        raise UsageError("give --launch or --service, not both")
    if options.launch is not None:
        return launch_from_command(options.launch, options.port, options.engine)
    if options.service is not None:
        unit = _unit_path(options.service, options.bundle)
        return launch_from_unit(unit, options.port, options.engine, variables)
    return None


def spec_from_options(options: SmokeOptions) -> LadderSpec:
    python = target_python(options.venv, options.python)
    timeouts = Timeouts()
    if options.timeout is not None:
        timeouts = replace(timeouts, server_ready=options.timeout)
    variables = launch_variables(options, python)
    explicit_launch = _launch(options, variables)
    if options.bundle is not None:
        spec = spec_from_bundle_dir(
            options.bundle,
            python,
            cpu=options.cpu,
            rungs=options.rungs,
            timeouts=timeouts if options.timeout is not None else None,
            keep_going=options.keep_going,
            log_dir=options.log_dir,
            variables=variables,
        )
        launch = explicit_launch or spec.launch
        if launch is not None and explicit_launch is None:
            if options.port is not None:
                launch = replace(launch, port=options.port)
            if options.engine is not None:
                launch = replace(launch, engine=options.engine)
        if launch is not None and spec.launch is not None and launch is not spec.launch:
            launch = replace(launch, expected_text=spec.launch.expected_text)
        return replace(spec, launch=launch)
    return LadderSpec(
        python=python,
        cpu=options.cpu,
        rungs=options.rungs or RUNG_NAMES,
        launch=explicit_launch,
        timeouts=timeouts,
        keep_going=options.keep_going,
        log_dir=options.log_dir,
    )
