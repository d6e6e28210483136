"""Stage `workspace`: what the bundle carries beside the environment (systemd units,
model references, the files repro.toml picks) and what it leaves out, with why."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.archive.tarformat import uncarried_name
from repro.bundle import layout
from repro.bundle.environment import EnvironmentFacts
from repro.bundle.info import Engine, LaunchCommand, LaunchInfo
from repro.bundle.manifest import printable_path
from repro.bundle.modelplace import hf_caches
from repro.config import Config
from repro.redaction import scrub_text
from repro.servecmd import DEFAULT_PORTS
from repro.snapshot.stages.options import PackOptions, Progress
from repro.snapshot.stages.probe import Environment, Start
from repro.snapshot.workspace import unitcapture
from repro.snapshot.workspace.leftout import (
    LeftOut,
    LeftOutKind,
    split_by_size,
    split_secrets,
    uncovered_entries,
    weights_left_out,
)
from repro.snapshot.workspace.models import (
    ModelReference,
    absent_model,
    absent_warning,
    describe_model,
    hub_model,
    infer_identities,
)
from repro.snapshot.workspace.weights import WeightHashing

_PORT = re.compile(r"--port[ =](\d+)")


@dataclass(frozen=True)
class WorkspaceParts:
    units: tuple[unitcapture.CapturedUnit, ...]
    models: tuple[ModelReference, ...]
    carried: tuple[Path, ...]  # workspace files for files/
    left_out: tuple[LeftOut, ...]
    warnings: tuple[str, ...]


def gather(
    start: Start, facts: EnvironmentFacts, env: Environment, say: Progress | None = None
) -> WorkspaceParts:
    """The units (captured by the job `probe.capture_units`), the models, the carried
    files, and every workspace entry none of them covers as left out."""
    options, config, secret_values = start.options, start.config, start.secret_values
    source = options.source
    units = env.units.result()
    warnings: list[str] = []
    for unit in units:
        warnings += unit.warnings
    warnings += _launch_secret_warnings(config)
    hashing = WeightHashing(
        enabled=options.hash_weights,
        cache_dir=start.cache_dir,
        rehash=options.rehash,
        jobs=options.jobs,
        say=say,
    )
    models, model_warnings = _models(options, config, units, secret_values, hashing)
    warnings += model_warnings
    sized, left_out = split_by_size(config.files.matched, source)
    for link, refusal in config.files.refused:
        # shown with \xNN escapes: a name that is not UTF-8 is one reason to be here
        warnings.append(f"{printable_path(str(link))}: {refusal}; not carried")
        rel = link.relative_to(source).as_posix()
        kind: LeftOutKind = "bad-name" if uncarried_name(rel) else "not-a-file"
        left_out.append(LeftOut(printable_path(rel), refusal, kind))
    left_out += weights_left_out([m for m in models if _inside(m)])
    carried, credentials = split_secrets(sized, source, secret_values)
    warnings += [f"{source / item.path}: {item.reason}" for item in credentials]
    left_out += credentials
    covered = [Path(facts.python.prefix), *carried, *config.files.matched]
    covered += [unit.source for unit in units] + [
        layout.at(source, layout.SERVICES),
        layout.at(source, layout.PATCHES),
    ]
    covered += [source / m.local_path for m in models if _inside(m)]
    if config.patches.workspace is not None:
        covered.append(config.patches.workspace.dir)
    left_out += uncovered_entries(source, covered)
    return WorkspaceParts(
        units=tuple(units),
        models=tuple(models),
        carried=tuple(carried),
        left_out=tuple(left_out),
        warnings=tuple(warnings),
    )


def _models(
    options: PackOptions,
    config: Config,
    units: Sequence[unitcapture.CapturedUnit] = (),
    secret_values: Sequence[str] = (),
    hashing: WeightHashing | None = None,
) -> tuple[list[ModelReference], list[str]]:
    """References of repro.toml's [models], the workspace's drafter/, and every model a
    unit's ExecStart= names (by its directory name), there or not; with warnings. A
    model absent here is recorded as not present, its identity inferred where the
    workspace says it (repro.snapshot.workspace.models.infer_identities)."""
    refs: list[ModelReference] = []
    drafter = config.models.drafter
    if drafter is None and (options.source / "drafter").is_dir():
        drafter = options.source / "drafter"

    def describe(path: Path, name: str, role: str) -> ModelReference:
        if not path.is_dir():
            return absent_model(str(path), name=name, role=role, workspace=options.source)
        return describe_model(
            path,
            name=name,
            role=role,
            workspace=options.source,
            secret_values=secret_values,
            hashing=hashing,
        )

    if drafter is not None:
        refs.append(describe(drafter, "drafter", "drafter"))
    for name, path in sorted(config.models.others.items()):
        refs.append(describe(path, name, "target"))
    cache = hf_caches()
    for name, repo_id in sorted(config.models.hub.items()):
        refs.append(hub_model(repo_id, name=name, role="target", caches=cache, hashing=hashing))
    known = {_resolved(path) for path in [*config.models.others.values(), drafter] if path}
    hub_ids = set(config.models.hub.values())
    names = {ref.name for ref in refs}
    warnings: list[str] = []
    for model in unitcapture.models_named_by_units(units):
        if model.repo_id is not None and model.repo_id in hub_ids:
            continue
        if model.repo_id is None and _resolved(model.path) in known:
            continue
        if model.name in names:
            warnings.append(
                f"{model.path}: a unit names it, but another model is already called "
                f"{model.name!r}; not referenced (name it in repro.toml [models])"
            )
            continue
        if model.repo_id is not None:
            refs.append(
                hub_model(
                    model.repo_id,
                    name=model.name,
                    role=model.role,
                    caches=cache,
                    hashing=hashing,
                )
            )
            hub_ids.add(model.repo_id)
        else:
            refs.append(describe(model.path, model.name, model.role))
            known.add(_resolved(model.path))
        names.add(model.name)
    refs = infer_identities(refs)
    for ref in refs:
        warnings += ref.warnings()
        if not ref.present:
            warnings.append(absent_warning(ref))
    return refs, warnings


def _inside(model: ModelReference) -> bool:
    """The model was recorded relative to the workspace (a repository id has no path)."""
    return bool(model.local_path) and not model.local_path.startswith("/")


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(path))


def launch(config: Config, units: Sequence[unitcapture.CapturedUnit] = ()) -> LaunchInfo:
    """repro.toml's [launch] commands; without them, one per unit that runs a server."""
    if not config.launch.commands:
        return LaunchInfo(tuple(unit.launch for unit in units if unit.launch is not None))
    commands = []
    for index, text in enumerate(config.launch.commands):
        engine: Engine = "sglang" if "sglang" in text else "vllm" if "vllm" in text else "openai"
        port_match = _PORT.search(text)
        port = int(port_match.group(1)) if port_match else DEFAULT_PORTS[engine]
        if config.ladder.port is not None:
            port = config.ladder.port
        shell = scrub_text(text)  # see _launch_secret_warnings
        commands.append(
            LaunchCommand(name=f"launch-{index + 1}", port=port, engine=engine, shell=shell)
        )
    return LaunchInfo(tuple(commands))


def _launch_secret_warnings(config: Config) -> list[str]:
    """repro.toml [launch] commands that hold a credential: it is <redacted> in the
    bundle; the command should read it from the environment instead."""
    return [
        f"repro.toml [launch] command {index + 1} holds a credential (a token or a URL "
        "with user:password); it is <redacted> in the bundle: write ${NAME} in the "
        "command and set NAME in the environment"
        for index, text in enumerate(config.launch.commands)
        if scrub_text(text) != text
    ]
