"""Stages `start`, `probe` and `environment`: the workspace's config and interpreter,
the facts its probe reports, and the background jobs that run while the files are hashed.

The jobs (pip freeze, the units, repro's own wheel inputs, the target's tags and install
scheme, pip check) start here, each as soon as its inputs are known; a later stage takes
a job's result where it needs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import Executor, Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from repro.bundle import layout
from repro.bundle.environment import EnvironmentFacts
from repro.bundle.lock import IndexConfig, Pin
from repro.bundle.signing import find_ssh_keygen
from repro.config import Config
from repro.errors import UsageError
from repro.redaction import is_secret_name
from repro.snapshot.facts.environment import find_interpreter
from repro.snapshot.facts.freeze import pins_from_facts, run_pip_freeze
from repro.snapshot.facts.indexcheck import target_tags
from repro.snapshot.facts.indexes import read_index_config
from repro.snapshot.facts.installed import InstalledDist, list_installed, scheme_paths
from repro.snapshot.facts.modulefiles import probe_target
from repro.snapshot.facts.requirements import UnmetRequirement, check_environment
from repro.snapshot.stages.options import PackOptions, Progress, default_cache_dir
from repro.snapshot.stages.output import output_is_file
from repro.snapshot.workspace import unitcapture
from repro.snapshot.workspace.discovery import workspace_config
from repro.wheel.scheme import SchemePaths

if TYPE_CHECKING:
    from packaging.tags import Tag

    from repro.snapshot.tool.wheels import ToolWheelInputs


@dataclass(frozen=True)
class Start:
    """The pack's inputs, checked: nothing long has run yet."""

    options: PackOptions  # with `source` absolute
    config: Config
    python: Path
    import_modules: bool
    cache_dir: Path
    secret_values: tuple[str, ...]  # values of the environment's credential variables


@dataclass(frozen=True)
class Probed:
    facts: EnvironmentFacts
    freeze: Future[subprocess.CompletedProcess[str]]  # the target's pip freeze


@dataclass(frozen=True)
class Environment:
    """What the installed environment declares, and the jobs reading the rest."""

    pins: tuple[Pin, ...]
    indexes: IndexConfig
    dists: tuple[InstalledDist, ...]
    source_python: str  # the bundle's Python, x.y
    tool_python: str  # pack's own Python, x.y
    units: Future[list[unitcapture.CapturedUnit]]
    tool_inputs: Future[ToolWheelInputs] | None  # None: no tool wheels
    tags: Future[list[Tag]]  # the target's tags: the wheels to vault, the files to list
    scheme: Future[SchemePaths] | None  # None: nothing is vaulted
    unmet: Future[tuple[UnmetRequirement, ...]]  # pip check's findings


def start(options: PackOptions) -> Start:
    """Check SOURCE, --sign and -o before the long part; read repro.toml; find the python."""
    # Every recorded path is taken against the workspace, never the current directory.
    options = replace(options, source=Path(os.path.abspath(options.source)))
    source = options.source
    if not source.exists():
        raise UsageError(f"{source}: no such directory")
    if not source.is_dir():
        raise UsageError(f"{source}: not a directory", hint="SOURCE is a workspace directory")
    if options.sign is not None:
        if not options.sign.is_file():
            raise UsageError(f"{options.sign}: no such private key file (--sign)")
        find_ssh_keygen()  # refuse before the long part, not after it
    output_is_file(options)  # refuses -o x.zip before the long part
    config = workspace_config(source)
    python = find_interpreter(source, options.python or config.env.python or _venv_python(config))
    import_modules = (
        config.env.import_modules if options.import_modules is None else options.import_modules
    )
    return Start(
        options=options,
        config=config,
        python=python,
        import_modules=import_modules,
        cache_dir=options.cache_dir or default_cache_dir(),
        secret_values=tuple(v for k, v in os.environ.items() if is_secret_name(k)),
    )


def probe(start: Start, background: Executor, say: Progress) -> Probed:
    # The target's pip freeze needs nothing from the probe: it starts first and runs
    # while the probe and then the scan go on.
    say("freezing the pinned stack")
    freeze = background.submit(run_pip_freeze, start.python)
    importing = " (importing the key modules)" if start.import_modules else ""
    say(f"probing {start.python}{importing}")
    facts = probe_target(start.python, import_modules=start.import_modules)
    return Probed(facts, freeze)


def environment(start: Start, facts: EnvironmentFacts, background: Executor) -> Environment:
    """Pins, indexes and installed distributions; starts the jobs that run while the files
    are hashed (runs of the target interpreter and reads of small inputs)."""
    options, python = start.options, start.python
    units = background.submit(capture_units, options, start.config, facts)
    tool_inputs = background.submit(_tool_wheel_inputs) if options.tool_wheels else None
    tags = background.submit(target_tags, python)
    scheme = background.submit(scheme_paths, python) if options.wheels != "none" else None
    pins = pins_from_facts(facts)
    indexes = read_index_config(Path(facts.python.prefix), source=options.source)
    site = Path(facts.python.purelib)
    dists = list_installed(site)
    if Path(facts.python.platlib) != site:
        dists += list_installed(Path(facts.python.platlib))
    # pip check's findings, from the METADATA files while the files are hashed
    unmet = background.submit(check_environment, python, dists)
    return Environment(
        pins=pins,
        indexes=indexes,
        dists=tuple(dists),
        # setup_env.sh on the bundle's own Python: its tags, where it is not pack's
        source_python=".".join(facts.python.version.split(".")[:2]),
        tool_python=f"{sys.version_info[0]}.{sys.version_info[1]}",
        units=units,
        tool_inputs=tool_inputs,
        tags=tags,
        scheme=scheme,
        unmet=unmet,
    )


def capture_units(
    options: PackOptions, config: Config, facts: EnvironmentFacts
) -> list[unitcapture.CapturedUnit]:
    """The units to carry, read with the source's paths turned into variables; a job of
    its own (stage `environment`), run while the files are hashed."""
    paths = list(config.services.units)
    if not paths:
        paths = unitcapture.discover_units(layout.at(options.source, layout.SERVICES))
    paths += unitcapture.resolve_unit_names([*config.services.system, *options.units])
    configured = [config.models.drafter] if config.models.drafter else []
    mapping = unitcapture.PathMap.build(
        venv=Path(facts.python.prefix),
        home=options.source.resolve(),
        model_dirs=[*configured, *config.models.others.values()],
    )
    return [unitcapture.capture_unit(path, mapping) for path in paths]


def _tool_wheel_inputs() -> ToolWheelInputs:
    # imported here: importlib.metadata is slow to load
    from repro.snapshot.tool.wheels import tool_wheel_inputs

    return tool_wheel_inputs()


def _venv_python(config: Config) -> Path | None:
    return config.env.venv / "bin" / "python" if config.env.venv else None
