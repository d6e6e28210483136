"""Unpack's stages after the bundle verified, each a function of frozen inputs.

preflight -> (dry run: plan) -> venv -> install -> kernels -> patch -> workspace ->
caches -> services -> models -> smoke, each named as the unpack step it runs. Each stage
returns what it did as a frozen `StageResult` (or, the preflight, its report);
`repro.install.unpack` runs them in order under the target's lock and records each
(repro.install.report). A stage tells its caller what it is doing through
`StageInputs.events`; it never touches the report or state.toml.

Over 400 lines on purpose: every stage is here, so their order and what each hands the
next read top to bottom; the work of each lives in its own module (installer,
venv/vault, transaction/patching, deploy/restore, deploy/services, deploy/models, smoke).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.utils import canonicalize_name

from repro.bundle import layout
from repro.bundle.info import BundleInfo, ModelRef
from repro.bundle.lock import LockFile, read_requirements_lock
from repro.bundle.patchset import load_patchset
from repro.errors import InstallError, PreflightError, SmokeError, UsageError
from repro.gpu.arch import sm_name
from repro.gpu.info import GpuInventory, query_gpus
from repro.hashing import sha256_file
from repro.install.deploy.caches import carried_caches, restore_caches, target_facts
from repro.install.deploy.models import ModelCheck, check_models, model_placements
from repro.install.deploy.restore import (
    models_dir,
    path_values,
    plan_restore,
    restore_workspace,
    venv_dir,
)
from repro.install.deploy.services import RenderedUnit, check_rendering, check_units, render_units
from repro.install.deploy.unitinstall import (
    install_unit_files,
    place_units,
    refuse_conflicts,
    reload_systemd,
)
from repro.install.drift import patched_state
from repro.install.kernels.rebuild import (
    Rebuild,
    decide_rebuilds,
    rebuild_distribution,
)
from repro.install.options import Events, UnpackOptions
from repro.install.preflight import (
    Check,
    PreflightInputs,
    PreflightReport,
    check_kernel_toolchain,
    describe,
    run_preflight,
)
from repro.install.read.contents import (
    custom_vault_wheels,
    kernel_audit,
    pack_facts,
    vault_entries,
    vault_hashes,
    vault_wheel_files,
)
from repro.install.report import REPORT, StageResult
from repro.install.smoke import SmokeStep
from repro.install.state import STATE_DIR, STEPS, VENV_RECORD, UnpackState
from repro.install.transaction.patching import apply_patches
from repro.install.venv.bytecode import compile_bytecode
from repro.install.venv.guard import record_venv, trusted_interpreter
from repro.install.venv.installer import (
    Installer,
    InstallPlan,
    choose_installer,
    create_venv,
    install_lock,
    verify_installed,
)
from repro.install.venv.site import site_dirs_of, site_packages_of, startup_files
from repro.install.venv.sources import package_sources
from repro.install.venv.streamed import StagedVenv, adopt, relative_layout
from repro.install.venv.vault import (
    choose_wheels,
    describe_interpreter,
    in_flight_budget,
    install_from_vault,
    supported_tags,
)
from repro.ladder.types import UnreadyModel
from repro.units.render import render_unit

NO_EXEC_SMOKE = (
    "--no-exec: no rung runs (each starts the rebuilt interpreter, which runs the .pth "
    "files of its site-packages)"
)


# --- before the target is written: preflight and the dry run ---------------------------


def preflight_inputs(
    bundle_dir: Path,
    info: BundleInfo,
    options: UnpackOptions,
    target: Path,
    staged: StagedVenv | None = None,
) -> PreflightInputs:
    lock = read_requirements_lock(layout.at(bundle_dir, layout.REQUIREMENTS_LOCK))
    return PreflightInputs(
        python_version=info.source.python,
        torch_arch_list=info.source.torch_arch_list,
        torch_cuda=info.source.torch_cuda,
        distributions=frozenset(pin.name for pin in lock.pins),
        vault_wheels=tuple(
            layout.at(bundle_dir, layout.wheel(name)) for name in custom_vault_wheels(bundle_dir)
        ),
        # unpacked while the bundle streamed in: the venv's bytes are on this disk already
        install_bytes=0 if staged is not None else disk_need(bundle_dir, lock, options),
        target=target,
        cpu=options.cpu,
        python=options.python,
        kernels=kernel_audit(bundle_dir),
        rebuild_kernels=options.rebuild_kernels,
    )


def disk_need(bundle_dir: Path, lock: LockFile, options: UnpackOptions) -> int:
    """Bytes the install adds to the disk, the verified bundle (staging) already there.

    uv and pip: the venv, and the installer's unpacked copy of each wheel (its cache).
    The vault installer: the venv; unless --keep-bundle, less each wheel it removes once
    unpacked, plus the wheels in flight (repro.install.venv.vault's budget)."""
    installed = pack_facts(bundle_dir).installed_bytes
    sizes = {p.name: p.stat().st_size for p in vault_wheel_files(bundle_dir)}
    vault_bytes = sum(sizes.values())
    by_pin = {(canonicalize_name(e.name), e.version) for e in vault_entries(bundle_dir)}
    covered = all((canonicalize_name(p.name), p.version) in by_pin for p in lock.pins)
    if options.installer not in ("auto", "vault") or not covered:
        return installed + vault_bytes
    if options.keep_bundle:
        return installed
    in_flight = max(in_flight_budget(vault_bytes), max(sizes.values(), default=0))
    return max(0, installed - vault_bytes) + in_flight


def preflight(
    bundle_dir: Path,
    info: BundleInfo,
    options: UnpackOptions,
    target: Path,
    events: Events,
    *,
    staged: StagedVenv | None = None,
) -> PreflightReport:
    """Every check on this box (failures as warnings under --force), each told to
    `events`; a failed one stops the run before anything is written. So does a unit
    name the box already uses, under --install-units. `staged`: wheels unpacked while
    the bundle streamed in, for the interpreter the preflight must choose again."""
    inventory = query_gpus()
    report = run_preflight(
        preflight_inputs(bundle_dir, info, options, target, staged), inventory=inventory
    )
    report = _with_kernel_checks(report, bundle_dir, options, inventory)
    if staged is not None and report.python is not None and report.python != staged.python:
        raise InstallError(
            f"the preflight chose {report.python}, but the wheels were unpacked for "
            f"{staged.python} while the bundle streamed in; nothing was installed",
            hint="run unpack again (with --python to choose the interpreter)",
        )
    if options.force:
        report = report.forced()
    for check in report.checks:
        events(f"preflight {check.name}", check.status, check.detail)
    if report.failed:
        raise PreflightError(
            f"preflight failed for {info.top_dir}; nothing was installed:\n"
            + describe(report.failed),
            hint="fix the listed problems, or pass --force to go on anyway",
        )
    # the target's paths written into the units, read back: refused before any write
    check_rendering(
        bundle_dir,
        target,
        venv=venv_dir(target, info),
        home=target,
        models=models_dir(target, options.models),
        placed=placements(info, options, target),
        caches=bool(carried_caches(bundle_dir)),
    )
    if options.install_units and not options.no_exec:
        names = check_units(bundle_dir, where=info.top_dir)
        refuse_conflicts(place_units(names, options.units_dir), force=options.force)
    return report


def planned_rebuilds(
    bundle_dir: Path, options: UnpackOptions, inventory: GpuInventory
) -> tuple[Rebuild, ...]:
    """The carried kernel sources the kernels step will build on this box."""
    capabilities = [gpu.capability for gpu in inventory.gpus]
    return decide_rebuilds(kernel_audit(bundle_dir), capabilities, options.rebuild_kernels)


def _with_kernel_checks(
    report: PreflightReport, bundle_dir: Path, options: UnpackOptions, inventory: GpuInventory
) -> PreflightReport:
    """The preflight's report with the kernels step's needs: the toolchain for what it
    will rebuild, a GPU for --rebuild-kernels always. --no-exec refuses a rebuild (the
    build runs the bundle's code) before anything is written."""
    rebuilds = planned_rebuilds(bundle_dir, options, inventory)
    names = [r.source.name for r in rebuilds]
    if rebuilds and options.no_exec:
        raise UsageError(
            f"--no-exec: the kernels step would build {', '.join(names)} from the bundle's "
            "source (its build runs the bundle's code): refused, nothing was installed",
            hint="pass --rebuild-kernels never with --no-exec (the preflight then names each "
            "distribution with no code for this box's GPUs), or run without --no-exec",
        )
    checks = [_rebuilt_there(check, names) for check in report.checks]
    if rebuilds and not inventory.gpus:
        checks.append(
            Check(
                "kernels",
                "fail",
                f"--rebuild-kernels always: no GPU visible to build {', '.join(names)} for",
                hint="run on the box with the GPUs, or pass --rebuild-kernels auto",
            )
        )
    elif rebuilds:
        checks.append(
            Check(
                "kernels",
                "pass",
                "; ".join(f"{r.source.name} {r.source.version}: {r.reason}" for r in rebuilds)
                + ": rebuilt from the carried source after the install",
            )
        )
        checks += check_kernel_toolchain(names, report.python)
    return PreflightReport(tuple(checks), report.python)


def _rebuilt_there(check: Check, rebuilt: Sequence[str]) -> Check:
    """A GPU check that fails for a distribution the kernels step rebuilds here (named by
    its distribution or its vault wheel: `gpu 0 cudalib-0.1-....whl`) is a warning: the
    rebuild makes the code this GPU lacks, and is judged again after it."""
    words = check.name.split()
    if check.status != "fail" or len(words) != 3 or words[0] != "gpu":
        return check
    if canonicalize_name(words[2].split("-", 1)[0]) not in rebuilt:
        return check
    return Check(
        check.name,
        "warn",
        f"{check.detail}; rebuilt from the bundle's source after the install",
    )


def pending(state: UnpackState, options: UnpackOptions) -> tuple[str, ...]:
    """The steps a real run would do now: those not done in an earlier run (the ladder
    only when it would run: --no-smoke never marks it done)."""
    steps = [step for step in STEPS if step != "verify" and not state.is_done(step)]
    return tuple(step for step in steps if step != "smoke" or options.smoke)


def plan(bundle_dir: Path, venv: Path, options: UnpackOptions) -> str:
    """--dry-run: what a real run would do, in one sentence."""
    lock = read_requirements_lock(layout.at(bundle_dir, layout.REQUIREMENTS_LOCK))
    wheels = vault_wheel_files(bundle_dir)
    patches = load_patchset(
        layout.at(bundle_dir, layout.PATCHES_TOML).read_bytes(), source=layout.PATCHES_TOML
    )
    services = layout.at(bundle_dir, layout.SERVICES)
    units = sorted(p.name for p in services.glob("*") if p.is_file())
    mode = "offline, from the vault" if options.offline else "from the bundle's indexes"
    return (
        f"would create a venv at {venv} and install {len(lock.pins)} distributions "
        f"({mode}; {len(wheels)} vault wheels), apply {len(patches.entries)} patched files, "
        f"render {len(units)} unit(s)"
    )


# --- the stages that write the target --------------------------------------------------


@dataclass(frozen=True)
class StageInputs:
    """What the stages after the preflight read: all fixed before the first runs."""

    options: UnpackOptions
    info: BundleInfo
    target: Path
    kept: Path  # the verified bundle, kept in the target
    venv: Path
    python: Path | None  # the interpreter the preflight chose for the venv
    installer: Installer
    events: Events
    ladder: SmokeStep | None = None
    staged: StagedVenv | None = None  # wheels unpacked while the bundle streamed in

    @property
    def interpreter(self) -> Path:
        """The venv's bin/python, once its pyvenv.cfg and bin/python* are checked to be
        the ones the venv step made (repro.install.venv.guard): every stage that starts
        the target interpreter takes it from here, so none starts one a wheel changed."""
        return trusted_interpreter(self.target, self.venv)


def make_venv(inputs: StageInputs) -> StageResult:
    """A fresh venv; what its own seeding put in site-packages is recorded, the
    baseline a --no-exec rerun of the install step compares with."""
    assert inputs.python is not None
    venv = inputs.venv
    if inputs.options.no_exec:
        _refuse_startup_files(venv, seeded=(), before="creating the venv")
    create_venv(inputs.python, venv, inputs.installer)
    seeded = startup_files(venv)
    # what the venv step made, before any wheel is installed: later starts compare with it
    made = record_venv(venv).to_facts()
    return StageResult(
        f"fresh venv at {venv} ({inputs.installer})",
        {"installer": inputs.installer, "startup_files": seeded, VENV_RECORD: made},
    )


def install(inputs: StageInputs, *, seeded: Sequence[str]) -> StageResult:
    """Exactly the bundle's lock, from the sources repro chose (never the lock's own
    option lines), then the installed set read back and compared with the lock.
    `seeded`: the venv stage's startup files."""
    kept, options = inputs.kept, inputs.options
    if options.no_exec:
        _refuse_startup_files(inputs.venv, seeded=seeded, before="running the installer")
    lock_path = layout.at(kept, layout.REQUIREMENTS_LOCK)
    lock = read_requirements_lock(lock_path)
    sources = package_sources(
        lock, vault=layout.at(kept, layout.WHEELS), offline=options.offline, where=str(kept)
    )
    inputs.events("install", "sources", sources.describe())
    if inputs.staged is not None:
        return _adopt_staged(inputs, lock, inputs.staged)
    if inputs.installer == "vault":
        return _install_vault(inputs, lock)
    install_plan = InstallPlan(
        lock=lock_path,
        wheels=sources.vault,
        indexes=(sources.index_url,) if sources.index_url else (),
        extra_indexes=sources.extra_index_urls,
        find_links=sources.find_links,
        offline=sources.offline,
        vault_hashes=vault_hashes(kept) if sources.vault is not None else {},
        binary_only=options.no_exec,
    )
    install_lock(inputs.interpreter, install_plan, inputs.installer)
    pins = {pin.name: pin.version for pin in lock.pins}
    verify_installed(inputs.interpreter, pins)
    detail = f"{len(pins)} distributions installed at the pinned versions"
    return StageResult(_with_unmet(detail, kept), {"distributions": len(pins)})


def _with_unmet(detail: str, kept: Path) -> str:
    """The install's detail, with the requirements pack found unmet in the source."""
    unmet = pack_facts(kept).unmet
    if not unmet:
        return detail
    return (
        f"{detail}; {unmet} requirement(s) were unmet at pack time and are unmet here too "
        f"({layout.PACK_REPORT})"
    )


def _vault_installed(
    inputs: StageInputs, lock: LockFile, size: int, seconds: float, *, streamed: bool
) -> StageResult:
    """The vault installer's result, once the installed set is checked against the lock."""
    pins = {pin.name: pin.version for pin in lock.pins}
    verify_installed(inputs.interpreter, pins)
    when = " while the bundle streamed in" if streamed else ""
    detail = (
        f"{len(pins)} distributions installed at the pinned versions, the vault's wheels "
        f"unpacked by repro{when} ({size / 2**30:.2f} GiB in {seconds:.1f} s)"
    )
    facts: dict[str, object] = {"distributions": len(pins), "installer": "vault"}
    if streamed:
        facts["streamed"] = True
    return StageResult(_with_unmet(detail, inputs.kept), facts)


def vault_covers(kept: Path, python: Path | None) -> bool:
    """True when the vault holds, for every pin, a wheel `python` takes: `auto` then
    installs with the vault installer."""
    if python is None or not layout.at(kept, layout.WHEELS).is_dir():
        return False
    lock = read_requirements_lock(layout.at(kept, layout.REQUIREMENTS_LOCK))
    tags = supported_tags(describe_interpreter(python))
    return not choose_wheels(lock.pins, layout.at(kept, layout.WHEELS), tags).missing


def pick_installer(options: UnpackOptions, kept: Path, python: Path | None) -> Installer:
    return choose_installer(options.installer, lambda: vault_covers(kept, python))


def _install_vault(inputs: StageInputs, lock: LockFile) -> StageResult:
    """The lock from the vault's own wheels, each unpacked by repro (and, unless
    --keep-bundle, removed from the kept bundle once unpacked)."""
    vault = layout.at(inputs.kept, layout.WHEELS)
    tags = supported_tags(describe_interpreter(inputs.interpreter))
    choice = choose_wheels(lock.pins, vault, tags)
    if choice.missing:
        raise InstallError(
            f"--installer vault: {vault} has no wheel this Python takes for "
            f"{len(choice.missing)} pin(s): " + ", ".join(choice.missing[:20]),
            hint="pack with --wheels all on the same Python, or unpack with --installer uv "
            "or pip (online, from the bundle's indexes)",
        )
    started = time.monotonic()
    result = install_from_vault(
        inputs.interpreter,
        choice.wheels,
        vault_hashes(inputs.kept),
        jobs=inputs.options.jobs,
        drop=not inputs.options.keep_bundle,
    )
    size = sum(item.bytes for item in result.installed)
    return _vault_installed(inputs, lock, size, time.monotonic() - started, streamed=False)


def _adopt_staged(inputs: StageInputs, lock: LockFile, staged: StagedVenv) -> StageResult:
    """The wheels the vault installer unpacked while the bundle streamed in, moved from
    staging into the venv just made; then the installed set checked as always."""
    described = describe_interpreter(inputs.interpreter)
    adopt(staged, inputs.venv, relative_layout(described.scheme))
    size = sum(item.bytes for item in staged.installed)
    return _vault_installed(inputs, lock, size, staged.seconds, streamed=True)


def kernels(inputs: StageInputs) -> StageResult:
    """The carried kernel sources this box needs rebuilt (repro.install.kernels.rebuild),
    each built in the venv, judged native for every GPU here and installed in place of
    the bundle's build."""
    mode = inputs.options.rebuild_kernels
    audit = kernel_audit(inputs.kept)
    if audit is None or not audit.sources:
        return StageResult("the bundle carries no kernel source", {"rebuilt": []})
    carried = ", ".join(s.name for s in audit.sources)
    if mode == "never":
        return StageResult(f"--rebuild-kernels never: {carried} not rebuilt", {"rebuilt": []})
    inventory = query_gpus()
    capabilities = [gpu.capability for gpu in inventory.gpus]
    rebuilds = decide_rebuilds(audit, capabilities, mode)
    if not rebuilds:
        return StageResult(
            f"{carried}: native code for every GPU here already; not rebuilt", {"rebuilt": []}
        )
    if not capabilities:
        raise InstallError(
            f"--rebuild-kernels {mode}: no GPU visible to build {carried} for "
            f"({inventory.error or 'nvidia-smi lists none'})",
            hint="run on the box with the GPUs, or pass --rebuild-kernels never",
        )
    if inputs.options.no_exec:
        raise InstallError("--no-exec: a kernel rebuild runs the bundle's code; refused")
    done = []
    for rebuild in rebuilds:
        inputs.events("kernels", "building", f"{rebuild.source.name}: {rebuild.reason}")
        done.append(
            rebuild_distribution(
                rebuild,
                kept=inputs.kept,
                interpreter=inputs.interpreter,
                venv=inputs.venv,
                state_dir=inputs.target / STATE_DIR,
                capabilities=capabilities,
            )
        )
    targets = ", ".join(sm_name(c) for c in sorted(set(capabilities)))
    detail = "; ".join(
        f"rebuilt {r.name} {r.version} for {targets} in {r.seconds:.1f} s "
        f"(its code: {', '.join(r.archs)}; log {r.log})"
        for r in done
    )
    return StageResult(detail, {"rebuilt": [r.to_facts() for r in done]})


def patch(inputs: StageInputs) -> StageResult:
    """The hand patches, all or none; what each patched file is now is recorded."""
    kept = inputs.kept
    patchset = load_patchset(
        layout.at(kept, layout.PATCHES_TOML).read_bytes(), source=layout.PATCHES_TOML
    )
    site = site_packages_of(inputs.interpreter)
    result = apply_patches(
        patchset,
        layout.at(kept, layout.PATCHES),
        site,
        python=inputs.interpreter,
        state_dir=inputs.target / STATE_DIR,
    )
    done = StageResult(
        f"{len(result.written)} written, {len(result.deleted)} deleted, "
        f"{len(result.skipped)} already applied, {len(result.via_diff)} through diffs",
        {"files": patched_state(site, kept, inputs.options.jobs)},
        patches=result,
    )
    return _with_bytecode(inputs, done) if inputs.options.compile_bytecode else done


def _with_bytecode(inputs: StageInputs, result: StageResult) -> StageResult:
    """`--compile-bytecode`: the venv's site-packages compiled once its files are final
    (the install, a kernel rebuild and the patches are in), in the patch step's facts."""
    inputs.events("patch", "compiling", "the venv's bytecode (--compile-bytecode)")
    compiled = compile_bytecode(
        inputs.interpreter, site_dirs_of(inputs.interpreter), jobs=inputs.options.jobs
    )
    return replace(
        result,
        detail=f"{result.detail}; {compiled.describe()}",
        facts={**result.facts, "bytecode": compiled.to_facts()},
    )


def workspace(inputs: StageInputs) -> StageResult:
    """The workspace's files and model configs, each at its place under the target."""
    target = inputs.target
    planned = plan_restore(inputs.kept, inputs.info)
    written, present = restore_workspace(inputs.kept, target, planned, force=inputs.options.force)
    return StageResult(
        f"{len(written)} workspace file(s) restored under {target}"
        + (f", {len(present)} already there" if present else ""),
        {"files": {item.rel: item.sha256 for item in planned}},
    )


def caches(inputs: StageInputs) -> StageResult:
    """The bundle's compile caches whose key holds on this box, restored under
    TARGET/cache/ (repro.install.deploy.caches); each other one left out with the line
    that says which part of its key differs. --no-exec: the venv's versions are read
    from its files, which runs nothing of it."""
    carried = carried_caches(inputs.kept)
    if not carried:
        return StageResult("the bundle carries no compile cache", {"caches": {}})
    here = target_facts(inputs.interpreter, query_gpus(), cpu=inputs.options.cpu)
    outcomes = restore_caches(inputs.kept, inputs.target, here, carried)
    for outcome in outcomes:
        inputs.events("caches", "restored" if outcome.restored else "left out", outcome.line)
    restored = [o.kind for o in outcomes if o.restored]
    detail = "\n".join(o.line for o in outcomes)
    return StageResult(
        detail,
        {"caches": {o.kind: o.to_facts() for o in outcomes}, "restored": restored},
    )


def services(inputs: StageInputs, *, caches: bool = False) -> StageResult:
    """The units rendered into TARGET/services; with --install-units also installed,
    each command printed first (--no-exec: printed only). `caches`: the caches step
    restored some, and the units read their variables."""
    target, options = inputs.target, inputs.options
    placed = placements(inputs.info, options, target)
    rendered = render_units(
        inputs.kept,
        target,
        venv=inputs.venv,
        home=target,
        models=models_dir(target, options.models),
        placed=placed,
        caches=caches,
    )
    detail = f"{len(rendered)} unit(s) rendered into {layout.at(target, layout.SERVICES)}"
    installed: Mapping[str, object] = {}
    would_run: tuple[str, ...] = ()
    if (options.install_units or options.no_exec) and rendered:
        suffix, installed, would_run = _install_or_show_units(inputs, rendered)
        detail += suffix
    return StageResult(
        detail,
        {
            "units": [u.name for u in rendered],
            "rendered": {
                u.path.relative_to(target).as_posix(): sha256_file(u.path) for u in rendered
            },
            # each found model's unit text and the place the units name for it
            "models": dict(placed),
            **installed,
        },
        would_run=would_run,
    )


def _install_or_show_units(
    inputs: StageInputs, rendered: Sequence[RenderedUnit]
) -> tuple[str, Mapping[str, object], tuple[str, ...]]:
    """--install-units: print each unit's every command, then install them (a unit
    repro did not install is replaced only with --force, and backed up). --no-exec:
    the same lines, as would_run, and nothing installed. The step's detail suffix,
    its facts and the lines not run."""
    options, events = inputs.options, inputs.events
    placements = place_units([u.name for u in rendered], options.units_dir)
    label = "would run" if options.no_exec else "will run"
    shown: list[str] = []
    for unit, placement in zip(rendered, placements, strict=True):
        lines = [
            f"install {unit.path} as {placement.dest} ({placement.describe()})",
            *unit.command_lines(),
        ]
        for line in lines:
            shown.append(line)
            events("services", label, line)
    if options.no_exec:
        return "; --no-exec: not installed", {}, tuple(shown)
    installed = install_unit_files(
        placements, [u.path.read_bytes() for u in rendered], force=options.force
    )
    reload_systemd(options.units_dir)
    backups = {str(i.dest): str(i.backup) for i in installed if i.backup is not None}
    facts = {"installed": [str(i.dest) for i in installed], "backups": backups}
    for dest, backup in backups.items():
        events("services", "backed up", f"{dest} to {backup} (--force)")
    suffix = f"; installed {', '.join(str(i.dest) for i in installed)}" + "".join(
        f"; {dest} was backed up to {backup}" for dest, backup in backups.items()
    )
    return suffix, facts, ()


def placements(info: BundleInfo, options: UnpackOptions, target: Path) -> dict[str, str]:
    """Each found model's unit text and the place where the one rule found it
    (repro.install.deploy.models.locate_model): what units and launch commands name."""
    checks = check_models(info.models, options.models, home=target)
    return model_placements(info.models, checks)


def models(inputs: StageInputs) -> StageResult:
    """Where each model the bundle references is on this box (read only), by the one
    rule the units were rendered with (weights by size and safetensors header, by
    sha256 with --verify-weights); state.toml records where each was found, for
    `repro verify`."""
    options = inputs.options
    checks = tuple(
        check_models(
            inputs.info.models,
            options.models,
            home=inputs.target,
            verify_weights=options.verify_weights,
            jobs=options.jobs,
            progress=options.weights_progress,
        )
    )
    summary = "; ".join(_model_line(c) for c in checks) or "no model references"
    facts: dict[str, object] = {
        "found": {c.name: c.path for c in checks if c.found and c.path is not None},
        "status": {c.name: c.status for c in checks},
    }
    if options.models is not None:
        facts["models_dir"] = str(options.models.absolute())
    return StageResult(summary, facts, models=checks)


def _model_line(check: ModelCheck) -> str:
    if check.status == "found":
        return f"{check.name}: found at {check.path}"
    return f"{check.name}: {check.status}: {check.detail}"


def smoke(inputs: StageInputs, checks: Sequence[ModelCheck] = ()) -> StageResult:
    """The smoke ladder in the rebuilt environment; under --no-exec its launch lines
    are printed and no rung runs. A failed ladder is the result's failure. `checks`:
    this run's models step (a resumed run, whose models step an earlier run did,
    looks again); a launch command naming a model not found as packed is not run."""
    options, events, target = inputs.options, inputs.events, inputs.target
    if not checks:
        checks = check_models(inputs.info.models, options.models, home=target)
    placed = model_placements(inputs.info.models, checks)
    values = path_values(target, inputs.info, options.models, placed)
    lines = tuple(launch_lines(inputs.info, values))
    for line in lines:
        if options.no_exec:
            events("smoke server", "would run", line)
        elif options.smoke and inputs.ladder is not None:
            events("smoke server", "will run", line)
    if options.no_exec:
        return StageResult(NO_EXEC_SMOKE, status="skipped", would_run=lines)
    if not options.smoke or inputs.ladder is None:
        reason = "--no-smoke" if not options.smoke else "no ladder available"
        return StageResult(reason, status="skipped")
    unready = unready_models(inputs.info.models, checks)
    outcome = inputs.ladder(inputs.interpreter, inputs.kept, inputs.info, values, unready)
    if outcome.passed:
        return StageResult(outcome.summary, smoke=outcome)
    failure = SmokeError(
        f"the smoke ladder failed in {target}: {outcome.summary}",
        hint=f"see {target / STATE_DIR / REPORT}; fix, then run unpack again",
    )
    return StageResult(outcome.summary, smoke=outcome, failure=failure)


def unready_models(
    refs: Sequence[ModelRef], checks: Sequence[ModelCheck]
) -> tuple[UnreadyModel, ...]:
    """The models not found as packed, each with the words a launch command names it
    by: the place the models step found it or would have it (what its unit names) and
    its repository id."""
    out = []
    for ref, check in zip(refs, checks, strict=True):
        if check.status == "found":
            continue
        words = tuple(w for w in (check.path, ref.repo_id) if w)
        out.append(UnreadyModel(ref.name, check.status, check.detail, check.fetch, words))
    return tuple(out)


def launch_lines(info: BundleInfo, values: Mapping[str, str]) -> list[str]:
    """The bundle's server launch commands with the target's paths filled in, exactly as
    the server rung would run them (it runs the first)."""
    lines = []
    for command in info.launch.commands:
        argv = command.argv if command.argv else ("/bin/sh", "-c", command.shell or "")
        filled = [render_unit(arg, dict(values)) for arg in argv]
        lines.append(f"server {command.name} (port {command.port}): {shlex.join(filled)}")
    return lines


def _refuse_startup_files(venv: Path, *, seeded: Sequence[str], before: str) -> None:
    """--no-exec: the installer (and `python -m venv` on an existing directory) starts
    the venv's interpreter with site processing, which runs every .pth file and
    sitecustomize in its site-packages. Any there that the venv's own seeding did not
    make came from an earlier, interrupted run of this bundle's install: refuse."""
    found = [name for name in startup_files(venv) if name not in seeded]
    if found:
        raise InstallError(
            f"{venv}: refusing under --no-exec before {before}: its site-packages holds "
            "startup files an earlier, interrupted install put there, which the installer "
            "would run when it starts the interpreter:\n"
            + "\n".join(f"  - {venv / name}" for name in found),
            hint=f"remove {venv} and unpack again, or run without --no-exec",
        )
