"""`repro unpack`: rebuild a bundle's environment on this box, verified and resumable.

Stages: verify (repro.install.read.bundle) -> preflight -> venv -> install -> kernels -> patch ->
workspace -> caches -> services -> models -> smoke (repro.install.stages) -> report
(repro.install.report). Nothing outside a staging directory is written until the
bundle has verified and the preflight has passed. Each finished step is recorded in
TARGET/.repro/state.toml, so a rerun continues where a failed or killed run
stopped, and a rerun after success changes nothing.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from repro.bundle import layout
from repro.bundle.info import BundleInfo
from repro.bundle.manifest import ProgressSink
from repro.errors import InputError, InstallError, ReproError, UsageError, VerificationError
from repro.hashing import sha256_file
from repro.install import stages
from repro.install.deploy.restore import venv_dir
from repro.install.deploy.services import RequiredSecret, required_secrets
from repro.install.drift import KEPT_BUNDLE, kept_bundle, target_drift, target_info
from repro.install.inplace import apply_upgrade, fresh_install_facts, upgraded_state
from repro.install.options import Events, UnpackOptions
from repro.install.read.bundle import is_directory, read_bundle
from repro.install.read.delta import delta_target_decision
from repro.install.read.staging import moved_away
from repro.install.releases import begin as begin_release
from repro.install.releases import (
    drop_leftovers,
    interrupted_upgrade,
    pending_rollback,
    undo_interrupted,
)
from repro.install.releases import finish as finish_release
from repro.install.report import StageResult, StepRecorder, StepReport, UnpackReport
from repro.install.smoke import SmokeStep
from repro.install.state import (
    STATE_DIR,
    STEPS,
    BundleIdentity,
    UnpackState,
    load_state,
    open_state,
)
from repro.install.transaction.atomic import exclusive_lock, remove_temp_leftovers
from repro.install.transaction.patching import unpatch
from repro.install.upgrade import manifest_of, plan_upgrade
from repro.install.venv.guard import trusted_interpreter
from repro.install.venv.site import site_packages_of
from repro.install.venv.streamed import StagedVenv, StreamedInstall

__all__ = ["UnpackOptions", "UnpackReport", "unpack", "unpatch_target"]

LOCK = "unpack.lock"


def unpack(
    options: UnpackOptions,
    *,
    events: Events | None = None,
    smoke: SmokeStep | None = None,
    progress: ProgressSink | None = None,
) -> UnpackReport:
    """Rebuild `options.bundle`; `events` hears each step, `smoke` climbs the ladder,
    `progress` follows the bundle's extraction (files and bytes)."""
    emit = events or (lambda step, status, detail: None)
    staging_parent = _existing_ancestor(
        (options.target.parent if options.target else Path.cwd()).resolve()
    )
    options.signature.checked()
    if options.target is not None and options.target.is_symlink():
        raise UsageError(
            f"--target {options.target} is a symbolic link; refusing to write through it",
            hint="pass the real directory, or a path that does not exist yet",
        )
    streamed = (
        StreamedInstall(options)
        if StreamedInstall.wanted_for(options)
        and not is_directory(options.bundle)
        and options.base is None
        else None
    )
    with read_bundle(
        options.bundle,
        staging_parent,
        options.signature,
        jobs=options.jobs,
        progress=progress,
        streamed=streamed,
        base=options.base,
    ) as (bundle_dir, info):
        staged = streamed.outcome() if streamed is not None else None
        return _unpack_verified(options, bundle_dir, info, emit, smoke, staged)


def _delta_in_place(
    options: UnpackOptions, info: BundleInfo, target: Path, identity: BundleIdentity
) -> None:
    """A delta read without --base: only what it carries is in staging, so it may only
    be applied in place (the upgrade reads no member the target already holds), onto
    a target that holds its base; refused before the target is touched otherwise. A
    target already at the delta's bundle is a rerun (nothing to do); one whose upgrade
    was cut short is checked again once that upgrade is undone."""
    assert info.base is not None
    state = load_state(target) if target.is_dir() else None
    if state is not None and state.bundle == identity:
        return
    if interrupted_upgrade(target) is not None:
        return
    delta_target_decision(info.base, target, delta=options.bundle).raise_unless_ok()


def _unpack_verified(
    options: UnpackOptions,
    bundle_dir: Path,
    info: BundleInfo,
    emit: Events,
    smoke: SmokeStep | None,
    staged: StagedVenv | None = None,
) -> UnpackReport:
    _still_no_link(options.target)
    target = (options.target or Path.cwd() / info.top_dir).resolve()
    manifest = sha256_file(layout.at(bundle_dir, layout.MANIFEST))
    identity = BundleIdentity(info.name, info.version, manifest)
    if info.base is not None and options.base is None:
        _delta_in_place(options, info, target, identity)
    report = UnpackReport(
        bundle=options.bundle,
        name=info.name,
        version=info.version,
        target=str(target),
        steps=(StepReport("verify", "done", f"{info.top_dir}: manifest verified"),),
    )
    emit("verify", "done", f"{info.top_dir}: every file matches {layout.MANIFEST}")

    if not options.replace:
        upgraded = upgrade_in_place(
            options, bundle_dir, info, identity, target, report, emit, smoke
        )
        if upgraded is not None:
            return upgraded
    state = open_state(target, identity, replace=options.replace)
    run = StepRecorder(report, state, emit)

    python: Path | None = None
    if not state.is_done("preflight") or options.dry_run:
        preflight = stages.preflight(bundle_dir, info, options, target, emit, staged=staged)
        run.report = replace(run.report, preflight=preflight)
        python = preflight.python
        if options.dry_run:
            run.report = run.report.with_step(
                StepReport("preflight", "done", "dry run: stopping here")
            )
            pending = stages.pending(state, options)
            plan = (
                stages.plan(bundle_dir, venv_dir(target, info), options)
                if pending
                else f"nothing to do: {target} already holds {info.name} {info.version}"
            )
            report = replace(run.report, pending=pending, plan=plan)
            return report.with_step(StepReport("plan", "done", plan))
    else:
        python = Path(state.facts["preflight"]["python"])
        run.skip_if_done("preflight")

    if options.replace and state.done == [] and (target / STATE_DIR).exists():
        # Only now, with the bundle verified and the preflight passed, is the other
        # bundle's target removed.
        _wipe_target(target)
        run.state = open_state(target, identity, replace=True)
    _still_no_link(options.target)
    target.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(target / STATE_DIR / LOCK, what="unpacking"):
        # Read again under the lock: another run may have finished steps meanwhile.
        run.state = open_state(target, identity, replace=options.replace)
        kept = target / STATE_DIR / KEPT_BUNDLE
        _keep_bundle(bundle_dir, kept)
        if not run.state.is_done("install"):
            _restore_vault(bundle_dir, kept)
        return _run_stages(options, info, target, python, run, smoke, staged)


def upgrade_in_place(
    options: UnpackOptions,
    bundle_dir: Path,
    info: BundleInfo,
    identity: BundleIdentity,
    target: Path,
    report: UnpackReport,
    emit: Events,
    smoke: SmokeStep | None,
) -> UnpackReport | None:
    """`target` holds another bundle of the same name (or an upgrade cut short): it is
    moved to this one in place (repro.install.upgrade, inplace, releases). None: not an
    upgrade, the ordinary unpack goes on (a fresh target, a resume, nothing to do)."""
    if pending_rollback(target) is not None:
        raise UsageError(
            f"{target}: a rollback was cut short; run `repro rollback {target}` again first"
        )
    existing = load_state(target)
    interrupted = interrupted_upgrade(target) is not None
    if not interrupted and (
        existing is None or existing.bundle == identity or existing.bundle.name != info.name
    ):
        return None
    if options.dry_run:
        return _upgrade_dry_run(options, bundle_dir, info, target, report, emit, interrupted)
    target.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(target / STATE_DIR / LOCK, what="unpacking"):
        if undo_interrupted(target):
            emit("upgrade", "undone", "an upgrade cut short was undone; upgrading again")
        drop_leftovers(target)
        existing = load_state(target)
        if existing is None or existing.bundle == identity:
            return None  # back where it was: the ordinary run resumes or does nothing
        if info.base is not None and options.base is None:  # a delta: onto its base only
            delta_target_decision(info.base, target, delta=options.bundle).raise_unless_ok()
        return _upgrade_locked(options, bundle_dir, info, identity, target, report, emit, smoke)


def _upgrade_dry_run(
    options: UnpackOptions,
    bundle_dir: Path,
    info: BundleInfo,
    target: Path,
    report: UnpackReport,
    emit: Events,
    interrupted: bool,
) -> UnpackReport:
    preflight = stages.preflight(bundle_dir, info, options, target, emit)
    plan = plan_upgrade(kept_bundle(target), bundle_dir, manifest_of(bundle_dir))
    text = ("an upgrade cut short would be undone first; " if interrupted else "") + (
        f"would upgrade in place: {plan.summary()}"
    )
    report = replace(report, preflight=preflight, upgrade=plan.to_json(), plan=text)
    report = replace(
        report, pending=tuple(s for s in stages.pending(_no_state(target, info), options))
    )
    return report.with_step(StepReport("plan", "done", text))


def _no_state(target: Path, info: BundleInfo) -> UnpackState:
    return UnpackState(target, BundleIdentity(info.name, info.version, ""))


def _upgrade_locked(
    options: UnpackOptions,
    bundle_dir: Path,
    info: BundleInfo,
    identity: BundleIdentity,
    target: Path,
    report: UnpackReport,
    emit: Events,
    smoke: SmokeStep | None,
) -> UnpackReport:
    old = load_state(target)
    assert old is not None
    # "caches" is newer than some targets' state.toml: one without it is finished
    unfinished = [s for s in STEPS[1:-1] if not old.is_done(s) and s != "caches"]
    if unfinished:
        raise UsageError(
            f"{target} holds {old.bundle.name} {old.bundle.version}, whose unpack did not "
            f"finish ({', '.join(unfinished)} not done); it cannot be upgraded in place",
            hint=f"finish it (`repro unpack` of {old.bundle.version} again), or --replace",
        )
    if old.facts.get("kernels", {}).get("rebuilt"):
        raise UsageError(
            f"{target}: its kernels were rebuilt for this box; an upgrade in place does not "
            "carry them over yet",
            hint="unpack with --replace",
        )
    drift = tuple(target_drift(target, jobs=options.jobs))
    if drift and not options.force:
        raise VerificationError(
            f"{target} has drifted from {old.bundle.name} {old.bundle.version} since it was "
            f"unpacked ({len(drift)} difference(s)); refusing to upgrade it in place:\n"
            + "\n".join(f"  - {d.describe()}" for d in drift[:50]),
            hint="`repro verify TARGET` lists them; --force overwrites them (each is named)",
        )
    for item in drift:
        emit("upgrade", "overwrites", item.describe())
    preflight = stages.preflight(bundle_dir, info, options, target, emit)
    python = preflight.python
    assert python is not None
    new_manifest = manifest_of(bundle_dir)
    plan = plan_upgrade(kept_bundle(target), bundle_dir, new_manifest)
    emit("upgrade", "plan", plan.summary())
    venv = venv_dir(target, info)
    interpreter = trusted_interpreter(target, venv, state=old)
    keep = options.keep_releases
    writer = begin_release(target, to=old.bundle, came=identity, keep=keep)
    try:
        applied = apply_upgrade(
            plan,
            bundle_dir,
            new_manifest,
            target,
            writer=writer,
            venv=venv,
            interpreter=interpreter,
            requested=options.installer,
            offline=options.offline,
            keep_bundle=options.keep_bundle,
            jobs=options.jobs,
            events=emit,
        )
        state = UnpackState(target, identity)
        upgraded_state(old, state, python, applied, fresh_install_facts(bundle_dir))
        report = replace(
            report,
            preflight=preflight,
            upgrade={**plan.to_json(), "installer": applied.installer},
            changed=True,
            drift=drift,
        ).with_step(StepReport("upgrade", "done", plan.summary()))
        run = StepRecorder(report, state, emit)
        result = _run_stages(options, info, target, python, run, smoke, None)
    except BaseException:
        undo_interrupted(target)
        raise
    dropped = finish_release(target, writer, keep=keep)
    detail = f"{old.bundle.version} kept in {writer.path}" if keep else "no release kept"
    if dropped:
        detail += f"; dropped the release(s) {', '.join(dropped)} (--keep-releases {keep})"
    emit("upgrade", "release", detail)
    if keep == 0:
        shutil.rmtree(writer.path, ignore_errors=True)
    return result


def _still_no_link(given: Path | None) -> None:
    """--target, checked not to be a link when unpack started, is still none: one planted
    in its parent while the bundle was verified (or the preflight ran) is never resolved
    or written through."""
    if given is not None and given.is_symlink():
        raise UsageError(
            f"--target {given} became a symbolic link (to {os.readlink(given)}) while the "
            "bundle was verified; refusing to write through it",
            hint="remove it, and unpack into a --target whose parent only you can write",
        )


def _keep_bundle(bundle_dir: Path, kept: Path) -> None:
    """The verified bundle (our own staging copy) stays in the target, for resume and
    unpatch: moved when it is on the same filesystem, else copied."""
    if kept.exists():
        return
    try:
        bundle_dir.rename(kept)
    except OSError:
        pass
    else:
        moved_away(bundle_dir)
        return
    staging = kept.with_name(f".{KEPT_BUNDLE}.{secrets.token_hex(4)}")
    shutil.copytree(bundle_dir, staging)
    staging.rename(kept)


def _restore_vault(bundle_dir: Path, kept: Path) -> None:
    """A kept bundle whose wheels an earlier run removed, and whose install must run
    again (a state edited by hand, an install cut short after them): the wheels come
    back from this run's verified copy."""
    wheels = layout.at(kept, layout.WHEELS)
    fresh = layout.at(bundle_dir, layout.WHEELS)
    if not fresh.is_dir():
        return
    if not wheels.exists():
        shutil.copytree(fresh, wheels.with_name(f".{wheels.name}.partial"), dirs_exist_ok=True)
        wheels.with_name(f".{wheels.name}.partial").rename(wheels)
        return
    # the vault installer removes each wheel once unpacked: a run cut short in the
    # install leaves some; the others come back one by one
    for wheel in fresh.iterdir():
        if wheel.is_file() and not (wheels / wheel.name).exists():
            partial = wheels / f".{wheel.name}.partial"
            shutil.copyfile(wheel, partial)
            partial.rename(wheels / wheel.name)


def _drop_vault(kept: Path, events: Events) -> None:
    """Once the install is recorded, the vault's wheels leave the kept bundle: the
    target then holds the venv, not a second copy of it. Renamed first, so a kill
    leaves either the whole directory or a name that the next run removes."""
    wheels = layout.at(kept, layout.WHEELS)
    dropping = wheels.with_name(f".{wheels.name}.dropping")
    if wheels.is_dir():
        files = [p for p in wheels.iterdir() if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        wheels.rename(dropping)
        if not files:  # each was removed as it was unpacked
            shutil.rmtree(dropping, ignore_errors=True)
            return
        events(
            "install",
            "removed",
            f"the kept bundle's {len(files)} wheel(s) ({size / 2**20:.1f} MiB) removed: the "
            "venv holds them now (--keep-bundle keeps them)",
        )
    shutil.rmtree(dropping, ignore_errors=True)


def _run_stages(
    options: UnpackOptions,
    info: BundleInfo,
    target: Path,
    python: Path | None,
    run: StepRecorder,
    smoke: SmokeStep | None,
    staged: StagedVenv | None,
) -> UnpackReport:
    """The stages that write the target, in order, each skipped when an earlier run
    finished it; the report is saved whether they pass or fail. `staged`: the wheels
    unpacked while the bundle streamed in, which the install step moves into the venv."""
    if not run.state.is_done("preflight"):
        assert python is not None
        run.done("preflight", "every check passed", python=str(python))
    venv = venv_dir(target, info)
    run.report = replace(run.report, venv=str(venv))

    def stage(step: str, body: Callable[[], StageResult]) -> None:
        run.run(step, body)

    try:
        _recover_interrupted(run, target, venv)
        inputs = stages.StageInputs(
            options=options,
            info=info,
            target=target,
            kept=target / STATE_DIR / KEPT_BUNDLE,
            venv=venv,
            python=python,
            installer=(
                "vault"
                if staged is not None
                else stages.pick_installer(options, target / STATE_DIR / KEPT_BUNDLE, python)
            ),
            events=run.events,
            ladder=smoke,
            staged=staged,
        )
        stage("venv", lambda: stages.make_venv(inputs))
        stage("install", lambda: stages.install(inputs, seeded=_seeded(run)))
        if not options.keep_bundle:
            _drop_vault(inputs.kept, run.events)
        stage("kernels", lambda: stages.kernels(inputs))
        stage("patch", lambda: stages.patch(inputs))
        stage("workspace", lambda: stages.workspace(inputs))
        stage("caches", lambda: stages.caches(inputs))
        stage("services", lambda: stages.services(inputs, caches=_restored_caches(run)))
        secrets_needed = tuple(required_secrets(inputs.kept, target))
        run.report = replace(run.report, secrets=secrets_needed)
        _say_secrets(run.events, secrets_needed)
        stage("models", lambda: stages.models(inputs))
        # Before the ladder: a rung would fail on a drifted file with a vaguer message.
        _check_drift(run, target, options.jobs)
        stage("smoke", lambda: stages.smoke(inputs, run.report.models))
    except ReproError as exc:
        run.failed(exc)
        run.save_after_failure(exc)
        raise
    except OSError as exc:
        # The machine said no in the middle of a step (a full disk, a permission): the
        # install failed, and the step and the cause say where.
        error = InstallError(
            f"{run.running or 'unpack'}: {exc.strerror or exc}"
            + (f" ({exc.filename})" if exc.filename else ""),
            hint="free the space or fix the cause, then run unpack again: it resumes at this step",
        )
        run.failed(error)
        run.save_after_failure(error)
        raise error from exc
    run.save()
    return run.report


def _restored_caches(run: StepRecorder) -> bool:
    """Whether the caches step (this run's or an earlier one's) restored any."""
    restored = run.state.facts.get("caches", {}).get("restored", [])
    return bool(restored)


def _seeded(run: StepRecorder) -> list[str]:
    """The startup files the venv's own seeding made, as the venv step recorded them."""
    seeded: list[str] = run.state.facts.get("venv", {}).get("startup_files", [])
    return seeded


def _recover_interrupted(run: StepRecorder, target: Path, venv: Path) -> None:
    """Undo what an earlier run left half made when it was killed (or failed) in a step.

    The temporary files of atomic writes a kill cut short are removed (in .repro/
    always: a kill may come while the state itself is written). A venv is kept only
    once the install into it has finished: after a run stopped in the venv or the
    install step the venv is removed and the two steps run again from nothing, so a
    distribution half unpacked by a killed installer cannot pass for installed (the
    installer would see its metadata and leave it as it is). Rebuilding is as correct
    as it gets and, with the installer's cache warm, about as fast as checking every
    installed file against its RECORD, which would still miss files written before
    the RECORD was."""
    state = run.state
    interrupted = state.started
    remove_temp_leftovers(target if interrupted is not None else target / STATE_DIR)
    for leftover in (target / STATE_DIR).glob(f".{KEPT_BUNDLE}.*"):  # a cut-short copy
        shutil.rmtree(leftover, ignore_errors=True)
    unfinished = interrupted in ("venv", "install") or (
        state.is_done("venv") and not state.is_done("install")
    )
    if not unfinished:
        return
    try:
        _remove_venv(target, venv)
    except OSError as exc:
        raise InstallError(
            f"{venv}: cannot remove the venv an earlier run left unfinished: {exc}",
            hint="remove it by hand, then run unpack again",
        ) from exc
    state.forget("venv")
    run.events(
        "venv",
        "redo",
        f"an earlier run stopped in the {interrupted or 'install'} step; "
        f"{venv} is removed and built again",
    )


def _remove_venv(target: Path, venv: Path) -> None:
    """Remove an unfinished venv; at the target itself (a bundle of format 1), everything
    but repro's own state (no later step has written there yet)."""
    if venv == target:
        for child in target.iterdir():
            if child.name == STATE_DIR:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    elif venv.is_symlink() or venv.is_file():
        venv.unlink()
    elif venv.exists():
        shutil.rmtree(venv)


def _check_drift(run: StepRecorder, target: Path, jobs: int | None) -> None:
    """A rerun (some step already done): what those steps made is checked again, so a
    local edit since is reported instead of "nothing to do"."""
    if not any(step.status == "already done" for step in run.report.steps):
        return
    drift = tuple(target_drift(target, jobs=jobs))
    run.report = replace(run.report, drift=drift)
    changed = [d for d in drift if d.what == "venv"]
    if changed:
        # the venv's own files: its interpreter is not started again (repro.install.venv.guard)
        raise InstallError(
            f"{target}: refusing to start its interpreter: the venv's own files are not the "
            "ones the venv step made:\n" + "\n".join(f"  - {d.describe()}" for d in changed),
            hint="remove the target (or unpack with --replace) to build it again",
        )
    if drift:
        raise VerificationError(
            f"{target} has drifted from {run.report.name} {run.report.version} since it was "
            f"unpacked ({len(drift)} difference(s)):\n"
            + "\n".join(f"  - {d.describe()}" for d in drift[:50]),
            hint="`repro verify TARGET` lists them again; `repro unpatch` and unpack restore "
            "the patched files, --replace rebuilds the target",
        )
    run.events("verify target", "done", "the target still matches the bundle")


def _existing_ancestor(path: Path) -> Path:
    """Where the staging directory goes: beside the target when its parent exists, else
    in the nearest directory that does (so verifying creates no directory of its own)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _wipe_target(target: Path) -> None:
    """--replace: remove an earlier repro target (never a directory repro did not make)."""
    if not (target / STATE_DIR / "state.toml").exists():
        raise UsageError(f"{target} is not a repro target; refusing to remove it")
    shutil.rmtree(target)


def _say_secrets(events: Events, needed: Sequence[RequiredSecret]) -> None:
    """One event per environment file that still lacks a credential a unit reads."""
    missing: dict[Path, list[RequiredSecret]] = {}
    for item in needed:
        if not item.provided:
            missing.setdefault(item.file, []).append(item)
    for file, items in missing.items():
        names = ", ".join(item.name for item in items)
        events(
            "services",
            "needs",
            f"{items[0].unit} needs {names}: taken out at pack time; set "
            f"{'them' if len(items) > 1 else 'it'} in {file} (mode 0600) before starting it",
        )


def unpatch_target(target: Path, *, force: bool = False) -> list[str]:
    """`repro unpatch`: restore the originals of the patched files in an unpacked target.

    The patch step (and the steps after it) is forgotten in state.toml, so the
    next `repro unpack` of the same bundle applies the patches again: to pristine
    files in full, to files edited since then through their diffs.
    """
    state, info = target_info(target)
    interpreter = venv_dir(target, info) / "bin" / "python"
    if not interpreter.exists():
        raise InputError(
            f"{target}: its rebuilt venv is gone (no {interpreter})",
            hint="run `repro unpack` of its bundle into it again",
        )
    # started without site processing, but it reads pyvenv.cfg: checked first
    checked = trusted_interpreter(target, venv_dir(target, info), state=state)
    restored = unpatch(target / STATE_DIR, site_packages_of(checked), force=force)
    state.forget("patch")
    return restored
