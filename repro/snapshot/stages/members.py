"""Stage `members`: every member of the bundle, gathered from the stages before, then
the archive written in one pass (`write`), each member hashed as it is written and the
manifest last.

The members are gathered in two steps: those read from the source first, since the
archive's timestamp is the newest of their mtimes (or SOURCE_DATE_EPOCH); then those
that carry the timestamp (bundle.toml, REPRODUCE.md, repro's own wheels, setup_env.sh)
and the pack report, which holds every warning.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from repro import __version__
from repro.archive.writer import source_date_epoch
from repro.bundle import layout
from repro.bundle.delta import BaseRef
from repro.bundle.environment import EnvironmentFacts
from repro.bundle.info import BundleInfo, VaultNames, dump_bundle_info
from repro.bundle.manifest import ProgressSink
from repro.bundle.patchset import dump_patchset
from repro.bundle.vault import ALL_WHEELS_REASON
from repro.redaction import scrub_text
from repro.snapshot.facts.requirements import UnmetRequirement, describe_unmet
from repro.snapshot.scan.compare import ScanReport
from repro.snapshot.scan.patches import CollectedPatch
from repro.snapshot.stages import info as info_stage
from repro.snapshot.stages.caches import Caches
from repro.snapshot.stages.kernels import Kernels
from repro.snapshot.stages.kernelsources import KernelSources
from repro.snapshot.stages.locks import Locks
from repro.snapshot.stages.options import DeltaSummary, Progress
from repro.snapshot.stages.output import SUFFIX, Target
from repro.snapshot.stages.probe import Environment, Start
from repro.snapshot.stages.report import pack_report
from repro.snapshot.stages.scanning import Patched
from repro.snapshot.stages.vaulting import Vaulted
from repro.snapshot.stages.workspace import WorkspaceParts
from repro.snapshot.write.bundle import Generated, Members, write_bundle
from repro.snapshot.write.reproduce import render_reproduce, render_setup_env

if TYPE_CHECKING:
    from packaging.tags import Tag

    from repro.snapshot.tool.targetwheels import BootstrapWheels
    from repro.snapshot.tool.wheels import ToolWheelInputs


@dataclass(frozen=True)
class Assembled:
    members: Members
    info: BundleInfo
    epoch: int  # every member's mtime
    warnings: tuple[str, ...]  # sorted, each once, no credential in any
    unmet: tuple[UnmetRequirement, ...]
    # a delta (stage `delta`): the members taken from the base, by digest, and a summary
    listed: Mapping[str, str] = field(default_factory=dict)
    delta: DeltaSummary | None = None


def assemble(
    start: Start,
    facts: EnvironmentFacts,
    env: Environment,
    target: Target,
    scan: ScanReport,
    stages: tuple[Patched, Vaulted, Locks, WorkspaceParts],
    *,
    kernels: Kernels,
    sources: KernelSources,
    caches: Caches | None = None,
    temp: Path,
    say: Progress,
    base: tuple[BaseRef, str] | None = None,
) -> Assembled:
    """All members, from the results of the stages before (`scan` only for its counts).

    `base` (a delta: the base's identity and bundle.toml `created`) goes into
    bundle.toml's `[base]`, and repro's own wheels are made with the base's timestamp, so
    that the same repro gives the same wheels as the base holds."""
    patched, vaulted, locks, workspace = stages
    warnings = [*patched.warnings, *vaulted.warnings, *workspace.warnings, *locks.warnings]
    warnings += kernels.warnings
    warnings += sources.warnings
    caches = caches or Caches()
    warnings += caches.warnings
    unmet = env.unmet.result()
    unmet_warning = describe_unmet(unmet)
    if unmet_warning is not None:
        warnings.append(unmet_warning)

    members = Members()
    for rel, wheel in vaulted.members().items():
        members.add(rel, wheel)
    for rel, data in locks.members.items():
        members.add(rel, data)
    members.add(layout.ENVIRONMENT, facts.to_json().encode())
    for rel, data in kernels.members().items():
        members.add(rel, data)
    _add_patches(members, patched.patches)
    _add_workspace(members, workspace, start.options.source)
    _add_kernel_sources(members, sources)
    for rel, content in caches.members().items():
        members.add(rel, content)

    source_mtime = members.newest_mtime(generated=(temp, start.cache_dir))
    epoch = source_date_epoch(default=max(source_mtime, info_stage.record_mtime(facts)))
    info = info_stage.describe_bundle(
        target, start.config, facts, workspace, start.options.source, epoch
    )
    wheels = vaulted.report.wheels
    if wheels:
        # the wheels' names ahead of them, for a reader of a stream (env/vault.toml follows)
        info = replace(
            info,
            vault=VaultNames(
                tuple(sorted(w.filename for w in wheels)),
                tuple(sorted(w.filename for w in wheels if w.reason == ALL_WHEELS_REASON)),
            ),
        )
    tool_epoch = epoch
    if base is not None:
        info = replace(info, base=base[0])
        tool_epoch = _epoch_of(base[1])
    members.add(layout.BUNDLE_TOML, dump_bundle_info(info))
    # the canonical name, never -o's: the archive's bytes do not depend on -o
    bundle_file = f"{info.top_dir}{SUFFIX[target.compression]}"
    reproduce = info_stage.reproduce_facts(
        info,
        facts,
        bundle_file,
        vaulted.report,
        patched.patches,
        workspace,
        kernel_sources=sources.described(),
    )
    members.add(layout.REPRODUCE, render_reproduce(reproduce).encode())
    wheel_pythons = [env.tool_python]
    if env.tool_inputs is not None:
        say("adding repro's own wheels for setup_env.sh")
        bootstrap = _bootstrap_wheels(
            start.cache_dir / "tool-wheels",
            env.tool_inputs.result(),
            epoch=tool_epoch,
            facts=facts,
            tags=env.tags.result(),
            download=start.options.download,
        )
        warnings += bootstrap.warnings
        wheel_pythons = list(bootstrap.pythons)
        for wheel_path in bootstrap.wheels:
            members.add(layout.tool_wheel(wheel_path.name), wheel_path)
    members.add(
        layout.SETUP_ENV,
        render_setup_env(
            tool_version=__version__,
            tool_python=env.tool_python,
            source_python=env.source_python,
            wheel_pythons=wheel_pythons,
        ).encode(),
        executable=True,
    )
    # A warning may quote what it read (a URL, a unit line): never a credential.
    warnings = sorted({scrub_text(warning, start.secret_values) for warning in warnings})
    left_out = (*workspace.left_out, *caches.left_out)
    members.add(layout.PACK_REPORT, pack_report(scan, warnings, unmet, left_out))
    if start.options.sbom:
        _add_sbom(members)
    return Assembled(members, info, epoch, tuple(warnings), unmet)


def write(
    assembled: Assembled,
    target: Target,
    start: Start,
    *,
    progress: ProgressSink | None,
    say: Progress,
) -> int:
    """Write the archive (to stdout when the target has no path); its size in bytes."""
    say(f"writing {target.output or 'stdout'}")
    return write_bundle(
        assembled.members,
        target.output,
        top=assembled.info.top_dir,
        mtime=assembled.epoch,
        compression=target.compression,
        sign=start.options.sign,
        jobs=start.options.jobs,
        progress=progress,
        listed=assembled.listed,
    )


def _epoch_of(created: str) -> int:
    """bundle.toml's `created` (RFC 3339, UTC, `Z`) as seconds since the epoch."""
    return int(datetime.fromisoformat(created[:19] + "+00:00").timestamp())


def _add_patches(members: Members, patches: Sequence[CollectedPatch]) -> None:
    entries = []
    for patch in patches:
        entries.append(patch.entry)
        full = patch.entry.full_member
        if full is not None and patch.full is not None:
            members.add(layout.in_patches(full), patch.full, executable=patch.entry.executable)
        diff = patch.entry.diff_member
        if diff is not None and patch.diff is not None:
            members.add(layout.in_patches(diff), patch.diff.encode())
    members.add(layout.PATCHES_TOML, dump_patchset(entries))


def _add_workspace(members: Members, workspace: WorkspaceParts, source: Path) -> None:
    for unit in workspace.units:
        members.add(layout.unit(unit.name), unit.content)
        for env_file in unit.environment_files:
            members.add(layout.unit(env_file.bundle_name), env_file.content)
    for ref in workspace.models:
        for filename, path in ref.copied:
            members.add(layout.model_file(ref.name, filename), path)
    for path in workspace.carried:
        members.add(layout.carried_file(path.relative_to(source).as_posix()), path)


def _add_kernel_sources(members: Members, sources: KernelSources) -> None:
    """kernels/<dist>/: each carried tree, its files' executable bits kept (a build's
    scripts). Their `[[sources]]` are in env/kernels.toml, which the kernels stage writes."""
    for rel, path in sources.members().items():
        members.add(rel, path, executable=bool(path.stat().st_mode & 0o100))


def _add_sbom(members: Members) -> None:
    """env/sbom.cdx.json, made once every other member is written: from their bytes (the
    lock files' as rendered before it) and digests, as `repro sbom` makes it from the
    bundle."""
    from repro.bundle.sbom import SBOM_MEMBER, render_sbom  # cyclonedx: only when asked for

    written = {rel: c for rel, c in members.items.items() if isinstance(c, bytes)}

    def render(digests: Mapping[str, str], made: Mapping[str, bytes]) -> bytes:
        return render_sbom({**written, **made}, digests)

    members.add(SBOM_MEMBER, Generated(render))


def _bootstrap_wheels(
    cache_root: Path,
    inputs: ToolWheelInputs,
    *,
    epoch: int,
    facts: EnvironmentFacts,
    tags: Sequence[Tag] | None,
    download: bool,
) -> BootstrapWheels:
    """tool/wheels: repro's own wheels, and those the bundle's Python needs besides."""
    from repro.snapshot.tool.targetwheels import TargetPython, bootstrap_wheels
    from repro.snapshot.tool.wheels import tool_wheels

    own = tool_wheels(cache_root, source_date_epoch=epoch, inputs=inputs)
    target = None
    if tags is not None:
        target = TargetPython(facts.python.version, facts.python.implementation, tuple(tags))
    own_python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return bootstrap_wheels(own, own_python, cache_root, inputs, target, download=download)
