"""`repro unpack`: rebuild a bundle's environment on this box, verified and resumable.

Steps: verify -> preflight -> venv -> install -> patch -> services -> models ->
smoke. Nothing outside a staging directory is written until the bundle has
verified and the preflight has passed. Each finished step is recorded in
TARGET/.repro/state.toml, so a rerun continues where a failed or killed run
stopped, and a rerun after success changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

from repro.archive.extract import extract_archive
from repro.bundle.info import BundleInfo, load_bundle_info
from repro.bundle.manifest import MANIFEST_NAME, ProgressSink
from repro.bundle.manifestcheck import CheckReport
from repro.bundle.manifesttree import verify_directory
from repro.bundle.patchset import load_patchset
from repro.bundle.signing import SIGNATURE_NAME, SignaturePolicy, verify_signature
from repro.bundle.vault import VaultEntry, load_vault
from repro.errors import (
    BundleFormatError,
    InputError,
    InstallError,
    PreflightError,
    ReproError,
    SmokeError,
    UsageError,
    VerificationError,
)
from repro.hashing import sha256_file
from repro.install.atomic import atomic_write, exclusive_lock, remove_temp_leftovers
from repro.install.drift import Drift, patched_state, target_drift, target_info
from repro.install.fetch import ResumableHTTPStream
from repro.install.installer import (
    InstallPlan,
    choose_installer,
    create_venv,
    install_lock,
    verify_installed,
)
from repro.install.models import ModelCheck, check_models
from repro.install.patching import PatchResult, apply_patches, unpatch
from repro.install.preflight import PreflightInputs, PreflightReport, describe, run_preflight
from repro.install.services import (
    RenderedUnit,
    RequiredSecret,
    check_units,
    render_units,
    required_secrets,
)
from repro.install.smoke import SmokeStep
from repro.install.sources import check_lock_options, package_sources
from repro.install.staging import LOCK_SUFFIX, moved_away, staging_dir
from repro.install.state import STATE_DIR, STEPS, BundleIdentity, UnpackState, open_state
from repro.install.targetsite import site_packages_of, startup_files
from repro.install.unitinstall import (
    SYSTEMD_DIR,
    install_unit_files,
    place_units,
    refuse_conflicts,
    reload_systemd,
)
from repro.install.workspace import (
    models_dir,
    path_values,
    plan_restore,
    restore_workspace,
    venv_dir,
)
from repro.snapshot.environment import normalize_name
from repro.snapshot.lock import read_requirements_lock
from repro.snapshot.services import render_unit
from repro.treecopy import copy_bundle_dir

StepStatus = Literal["done", "skipped", "failed", "already done"]
Events = Callable[[str, str, str], None]
BUNDLE_DIR = "bundle"
REPORT = "unpack-report.json"
LOCK = "unpack.lock"
# Steps that write into the target, recorded as started before they run, so that a rerun
# finds what a cut-short one left (models only reads; smoke writes only its logs).
UNDONE_WHEN_CUT_SHORT = frozenset({"venv", "install", "patch", "workspace", "services"})


@dataclass(frozen=True)
class UnpackOptions:
    bundle: str
    target: Path | None = None
    python: Path | None = None
    offline: bool = False
    installer: Literal["auto", "uv", "pip"] = "auto"
    cpu: bool = False
    force: bool = False
    dry_run: bool = False
    replace: bool = False
    models: Path | None = None
    install_units: bool = False
    units_dir: Path = SYSTEMD_DIR  # where --install-units puts them
    smoke: bool = True
    no_exec: bool = False
    signature: SignaturePolicy = field(default_factory=SignaturePolicy)
    jobs: int | None = None  # files hashed in parallel by the verification


@dataclass
class StepReport:
    name: str
    status: StepStatus
    detail: str = ""
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class UnpackReport:
    bundle: str
    name: str = ""
    version: str = ""
    target: str = ""
    steps: list[StepReport] = field(default_factory=list)
    preflight: PreflightReport | None = None
    patches: PatchResult | None = None
    models: list[ModelCheck] = field(default_factory=list)
    smoke: dict[str, Any] | None = None
    changed: bool = False
    plan: str | None = None  # --dry-run: what a real run would do
    pending: list[str] | None = None  # --dry-run: the steps a real run would do ([]: none)
    venv: str = ""
    drift: list[Drift] = field(default_factory=list)  # a rerun: what changed since
    would_run: list[str] = field(default_factory=list)  # --no-exec: what was not run
    secrets: list[RequiredSecret] = field(default_factory=list)  # credentials units need

    def to_json(self) -> dict[str, Any]:
        return {
            "bundle": self.bundle,
            "name": self.name,
            "version": self.version,
            "target": self.target,
            "venv": self.venv,
            "changed": self.changed,
            "drift": [d.to_json() for d in self.drift],
            "plan": self.plan,
            "pending": self.pending,
            "steps": [
                {"name": s.name, "status": s.status, "detail": s.detail, "facts": s.facts}
                for s in self.steps
            ],
            "preflight": self.preflight.to_json() if self.preflight else None,
            "patches": self.patches.to_json() if self.patches else None,
            "models": [m.to_json() for m in self.models],
            "smoke": self.smoke,
            "would_run": self.would_run,
            "secrets": [s.to_json() for s in self.secrets],
        }


# --- reading and verifying -----------------------------------------------------------


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


@contextlib.contextmanager
def _open_source(bundle: str) -> Iterator[tuple[BinaryIO | Path, str]]:
    if bundle == "-":
        yield sys.stdin.buffer, "<stdin>"
    elif _is_url(bundle):
        stream = ResumableHTTPStream(bundle)
        try:
            yield stream, bundle  # type: ignore[misc]
        finally:
            stream.close()
    else:
        path = Path(bundle)
        if not path.exists():
            raise InputError(f"{bundle}: no such file or directory")
        yield path, bundle


def _verified(report: CheckReport, where: str) -> None:
    if not report.passed(ignore_missing=False, strict=True):
        problems = [f"mismatched: {m.path}" for m in report.mismatched]
        problems += [f"missing: {p}" for p in report.missing]
        problems += [f"unlisted: {u.path}" for u in report.unlisted]
        problems += [f"line {m.lineno}: {m.reason}" for m in report.malformed]
        problems += [f"rejected: {r.path}: {r.reason}" for r in report.rejected]
        problems += [f"unreadable: {u.path}" for u in report.unreadable]
        raise VerificationError(
            f"{where}: the bundle does not verify against its {MANIFEST_NAME}:\n"
            + "\n".join(f"  - {p}" for p in problems[:50]),
            hint="the bundle is damaged or was changed after packing; get a good copy",
        )


def verify_bundle_dir(
    bundle_dir: Path,
    where: str,
    signature: SignaturePolicy | None = None,
    known: Mapping[str, str] | None = None,
    jobs: int | None = None,
) -> BundleInfo:
    """Signature first (when asked for), then every file against the manifest, then
    bundle.toml. `known`: digests taken while this process extracted the files (see
    `verify_directory`)."""
    if signature is not None and signature.active:
        manifest = bundle_dir / MANIFEST_NAME
        if not manifest.is_file():
            raise VerificationError(f"{where}: the bundle has no {MANIFEST_NAME}")
        sig = bundle_dir / SIGNATURE_NAME
        verify_signature(
            manifest.read_bytes(),
            sig.read_bytes() if sig.is_file() else None,
            signature,
            source=where,
        )
    _verified(
        verify_directory(bundle_dir, bundle_dir / MANIFEST_NAME, jobs=jobs, known=known), where
    )
    toml = bundle_dir / "bundle.toml"
    if not toml.is_file():
        raise VerificationError(f"{where}: the bundle has no bundle.toml")
    info = load_bundle_info(toml.read_bytes(), source=f"{where}: bundle.toml")
    check_bundle_contents(bundle_dir, where)
    return info


def check_bundle_contents(bundle_dir: Path, where: str) -> None:
    """Every file the later steps act on is parsed now, while nothing is written yet:
    the lock, patches.toml (paths inside site-packages) and the unit names."""
    lock = bundle_dir / "env" / "requirements.lock"
    if lock.is_file():
        try:
            parsed = read_requirements_lock(lock)
        except InputError as exc:  # a bundle member that is not a lock: an invalid bundle
            raise BundleFormatError(f"{where}: {exc.message}", hint=exc.hint) from exc
        check_lock_options(parsed, where)
    patches = bundle_dir / "patches" / "patches.toml"
    if patches.is_file():
        load_patchset(patches.read_bytes(), source=f"{where}: patches/patches.toml")
    _custom_vault_wheels(bundle_dir)
    _pack_report(bundle_dir)
    check_units(bundle_dir, where=where)


@contextlib.contextmanager
def read_bundle(
    bundle: str,
    staging_parent: Path,
    signature: SignaturePolicy | None = None,
    *,
    jobs: int | None = None,
    progress: ProgressSink | None = None,
) -> Iterator[tuple[Path, BundleInfo]]:
    """The verified bundle directory (a staging copy of ours) and its info, while the
    block runs.

    An archive is extracted into a staging directory and verified there (signature,
    then manifest): the signature and the manifest are an archive's last members, so
    nothing can be judged before the whole stream has been read into staging. A
    directory is copied into staging the same way (hashed while copied) and verified
    there: what is verified is what later steps read, whatever happens to the
    directory meanwhile. The staging directory is this run's (see
    repro.install.staging) until the block ends; then it is removed, unless the block
    moved it away. `progress` follows the extraction or copy (files and bytes)."""
    with staging_dir(staging_parent) as dest:
        if not _is_url(bundle) and bundle != "-" and Path(bundle).is_dir():
            lock = dest.with_name(f"{dest.name}{LOCK_SUFFIX}")
            copied = copy_bundle_dir(Path(bundle), dest, jobs=jobs, progress=progress, skip=[lock])
            yield dest, verify_bundle_dir(dest, bundle, signature, known=copied, jobs=jobs)
            return
        infos: list[BundleInfo] = []
        written: dict[str, str] = {}  # hashed while extracted: not read back to be checked

        def verify(top: Path) -> None:
            infos.append(verify_bundle_dir(top, bundle, signature, known=written, jobs=jobs))

        with _open_source(bundle) as (source, name):
            extract_archive(
                source, dest, source_name=name, verify=verify, digests=written, progress=progress
            )
        yield dest, infos[0]


@contextlib.contextmanager
def opened_bundle(
    bundle: str, *, jobs: int | None = None, progress: ProgressSink | None = None
) -> Iterator[Path]:
    """The directory of `bundle` while the block runs: a directory is itself (read
    where it is, as `repro smoke --bundle DIR` always has); an archive file, '-' or an
    http(s) URL is extracted by the safe reader into a temporary directory, verified
    there, and removed afterwards."""
    if not _is_url(bundle) and bundle != "-" and Path(bundle).is_dir():
        yield Path(bundle)
        return
    with (
        tempfile.TemporaryDirectory(prefix="repro-bundle-") as parent,
        read_bundle(bundle, Path(parent), jobs=jobs, progress=progress) as (directory, _),
    ):
        yield directory


# --- steps -----------------------------------------------------------------------------


def _preflight_inputs(
    bundle_dir: Path, info: BundleInfo, options: UnpackOptions, target: Path
) -> PreflightInputs:
    lock = read_requirements_lock(bundle_dir / "env" / "requirements.lock")
    wheels_dir = bundle_dir / "env" / "wheels"
    vault_bytes = sum(p.stat().st_size for p in wheels_dir.glob("*.whl"))
    installed_bytes = _pack_report(bundle_dir).installed_bytes
    custom = _custom_vault_wheels(bundle_dir)
    return PreflightInputs(
        python_version=info.source.python,
        torch_arch_list=info.source.torch_arch_list,
        torch_cuda=info.source.torch_cuda,
        distributions=frozenset(pin.name for pin in lock.pins),
        vault_wheels=tuple(wheels_dir / name for name in custom),
        install_bytes=installed_bytes + vault_bytes,
        target=target,
        cpu=options.cpu,
        python=options.python,
    )


@dataclass(frozen=True)
class _PackFacts:
    """What unpack uses of env/pack-report.json."""

    installed_bytes: int = 0
    unmet: int = 0  # requirements `repro pack` found unmet in the source (pip check)


PACK_REPORT = "env/pack-report.json"


def _pack_report(bundle_dir: Path) -> _PackFacts:
    """env/pack-report.json's facts, checked: a JSON object, `installed_bytes` a
    non-negative integer, `unmet_requirements` a list (both optional)."""
    path = bundle_dir / PACK_REPORT
    if not path.is_file():
        return _PackFacts()
    try:
        document = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise BundleFormatError(f"{PACK_REPORT}: not valid JSON: {reason}") from None
    if not isinstance(document, dict):
        raise BundleFormatError(
            f"{PACK_REPORT}: must be a JSON object, not {type(document).__name__}"
        )
    size = document.get("installed_bytes", 0)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise BundleFormatError(
            f"{PACK_REPORT}: key 'installed_bytes' must be a non-negative integer, "
            f"not {json.dumps(size)[:40]}"
        )
    unmet = document.get("unmet_requirements", [])
    if not isinstance(unmet, list):
        raise BundleFormatError(
            f"{PACK_REPORT}: key 'unmet_requirements' must be a list, not {type(unmet).__name__}"
        )
    return _PackFacts(installed_bytes=size, unmet=len(unmet))


def _unmet_at_pack_time(bundle_dir: Path) -> int:
    """How many requirements `repro pack` found unmet in the source (pip check)."""
    return _pack_report(bundle_dir).unmet


def _vault_entries(bundle_dir: Path) -> tuple[VaultEntry, ...]:
    path = bundle_dir / "env" / "vault.toml"
    if not path.is_file():
        return ()
    return load_vault(path.read_bytes(), source="env/vault.toml")


def _vault_hashes(bundle_dir: Path) -> dict[str, tuple[str, ...]]:
    """Pin name -> the sha256 of the vault's wheels for it, as env/vault.toml lists them."""
    hashes: dict[str, tuple[str, ...]] = {}
    for entry in _vault_entries(bundle_dir):
        name = normalize_name(entry.name)
        hashes[name] = (*hashes.get(name, ()), entry.sha256)
    return hashes


def _custom_vault_wheels(bundle_dir: Path) -> list[str]:
    """Vault wheels that are there because no index serves them (not only --wheels all);
    each a file name inside env/wheels/ (load_vault refuses any other)."""
    entries = _vault_entries(bundle_dir)
    return sorted(e.filename for e in entries if not e.index_serves)


class _Run:
    """One unpack run: the state, the report, and how steps are recorded."""

    def __init__(self, report: UnpackReport, state: UnpackState, events: Events) -> None:
        self.report = report
        self.state = state
        self.events = events
        self.running: str | None = None

    def skip_if_done(self, step: str) -> bool:
        """True when `step` finished in an earlier run; otherwise it starts now, and is
        recorded as started before it changes anything."""
        if self.state.is_done(step):
            self.report.steps.append(StepReport(step, "already done"))
            self.events(step, "already done", "")
            return True
        self.running = step
        if step in UNDONE_WHEN_CUT_SHORT:
            self.state.mark_started(step)
        self.events(step, "started", "")
        return False

    def failed(self, error: ReproError) -> None:
        """Record the step that raised, so the saved report names it."""
        if self.running is not None:
            self.report.steps.append(StepReport(self.running, "failed", error.message))
            self.events(self.running, "failed", error.message.splitlines()[0])
            self.running = None

    def done(self, step: str, detail: str, **facts: Any) -> None:
        self.state.mark_done(step, **facts)
        self.report.steps.append(StepReport(step, "done", detail, facts))
        self.report.changed = True
        self.running = None
        self.events(step, "done", detail)

    def skipped(self, step: str, detail: str) -> None:
        # Not recorded as done: a later run without --no-smoke runs the ladder.
        self.state.clear_started()
        self.report.steps.append(StepReport(step, "skipped", detail))
        self.running = None
        self.events(step, "skipped", detail)

    def save(self) -> None:
        path = self.state.target / STATE_DIR / REPORT
        atomic_write(path, (json.dumps(self.report.to_json(), indent=2) + "\n").encode())


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
    report = UnpackReport(bundle=options.bundle)
    staging_parent = _existing_ancestor(
        (options.target.parent if options.target else Path.cwd()).resolve()
    )
    options.signature.checked()
    if options.target is not None and options.target.is_symlink():
        raise UsageError(
            f"--target {options.target} is a symbolic link; refusing to write through it",
            hint="pass the real directory, or a path that does not exist yet",
        )
    with read_bundle(
        options.bundle, staging_parent, options.signature, jobs=options.jobs, progress=progress
    ) as (bundle_dir, info):
        return _unpack_verified(options, bundle_dir, info, report, emit, smoke)


def _unpack_verified(
    options: UnpackOptions,
    bundle_dir: Path,
    info: BundleInfo,
    report: UnpackReport,
    emit: Events,
    smoke: SmokeStep | None,
) -> UnpackReport:
    report.name, report.version = info.name, info.version
    target = (options.target or Path.cwd() / info.top_dir).resolve()
    report.target = str(target)
    identity = BundleIdentity(info.name, info.version, sha256_file(bundle_dir / MANIFEST_NAME))
    report.steps.append(StepReport("verify", "done", f"{info.top_dir}: manifest verified"))
    emit("verify", "done", f"{info.top_dir}: every file matches MANIFEST.sha256")

    state = open_state(target, identity, replace=options.replace)
    run = _Run(report, state, emit)

    python: Path | None = None
    if not state.is_done("preflight") or options.dry_run:
        inputs = _preflight_inputs(bundle_dir, info, options, target)
        preflight = run_preflight(inputs)
        if options.force:
            preflight = preflight.forced()
        report.preflight = preflight
        for check in preflight.checks:
            emit(f"preflight {check.name}", check.status, check.detail)
        if preflight.failed:
            raise PreflightError(
                f"preflight failed for {info.top_dir}; nothing was installed:\n"
                + describe(preflight.failed),
                hint="fix the listed problems, or pass --force to go on anyway",
            )
        python = preflight.python
        if options.install_units and not options.no_exec:
            # A unit name the box already uses stops the run before anything is written.
            names = check_units(bundle_dir, where=info.top_dir)
            refuse_conflicts(place_units(names, options.units_dir), force=options.force)
        if options.dry_run:
            report.steps.append(StepReport("preflight", "done", "dry run: stopping here"))
            report.pending = _pending(state, options)
            report.plan = (
                _plan(bundle_dir, venv_dir(target, info), options)
                if report.pending
                else f"nothing to do: {target} already holds {info.name} {info.version}"
            )
            report.steps.append(StepReport("plan", "done", report.plan))
            return report
    else:
        python = Path(state.facts["preflight"]["python"])
        run.skip_if_done("preflight")

    if options.replace and state.done == [] and (target / STATE_DIR).exists():
        # Only now, with the bundle verified and the preflight passed, is the other
        # bundle's target removed.
        _wipe_target(target)
        state = open_state(target, identity, replace=True)
        run.state = state
    target.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(target / STATE_DIR / LOCK, what="unpacking"):
        # Read again under the lock: another run may have finished steps meanwhile.
        run.state = open_state(target, identity, replace=options.replace)
        _keep_bundle(bundle_dir, target / STATE_DIR / BUNDLE_DIR)
        return _install_steps(options, info, target, python, run, smoke)


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
    staging = kept.with_name(f".{BUNDLE_DIR}.{secrets.token_hex(4)}")
    shutil.copytree(bundle_dir, staging)
    staging.rename(kept)


def _install_steps(
    options: UnpackOptions,
    info: BundleInfo,
    target: Path,
    python: Path | None,
    run: _Run,
    smoke: SmokeStep | None,
) -> UnpackReport:
    state, report = run.state, run.report
    kept = target / STATE_DIR / BUNDLE_DIR
    if not state.is_done("preflight"):
        assert python is not None
        run.done("preflight", "every check passed", python=str(python))
    venv = venv_dir(target, info)
    report.venv = str(venv)
    try:
        _recover_interrupted(run, target, venv)
        installer = choose_installer(options.installer)
        interpreter = venv / "bin" / "python"
        if not run.skip_if_done("venv"):
            assert python is not None
            if options.no_exec:
                _refuse_startup_files(venv, seeded=(), before="creating the venv")
            create_venv(python, venv, installer)
            # What the venv's own seeding put there: the baseline a --no-exec rerun of
            # the install step compares with.
            seeded = startup_files(venv)
            run.done(
                "venv",
                f"fresh venv at {venv} ({installer})",
                installer=installer,
                startup_files=seeded,
            )
        if not run.skip_if_done("install"):
            if options.no_exec:
                seeded = state.facts.get("venv", {}).get("startup_files", [])
                _refuse_startup_files(venv, seeded=seeded, before="running the installer")
            lock = read_requirements_lock(kept / "env" / "requirements.lock")
            sources = package_sources(
                lock, vault=kept / "env" / "wheels", offline=options.offline, where=str(kept)
            )
            run.events("install", "sources", sources.describe())
            plan = InstallPlan(
                lock=kept / "env" / "requirements.lock",
                wheels=sources.vault,
                indexes=(sources.index_url,) if sources.index_url else (),
                extra_indexes=sources.extra_index_urls,
                find_links=sources.find_links,
                offline=sources.offline,
                vault_hashes=_vault_hashes(kept) if sources.vault is not None else {},
                binary_only=options.no_exec,
            )
            install_lock(interpreter, plan, installer)
            pins = {pin.name: pin.version for pin in lock.pins}
            verify_installed(interpreter, pins)
            detail = f"{len(pins)} distributions installed at the pinned versions"
            unmet = _unmet_at_pack_time(kept)
            if unmet:
                detail += (
                    f"; {unmet} requirement(s) were unmet at pack time and are unmet here too "
                    "(env/pack-report.json)"
                )
            run.done("install", detail, distributions=len(pins))
        if not run.skip_if_done("patch"):
            patchset = load_patchset(
                (kept / "patches" / "patches.toml").read_bytes(), source="patches/patches.toml"
            )
            site = site_packages_of(interpreter)
            result = apply_patches(
                patchset, kept / "patches", site, python=interpreter, state_dir=target / STATE_DIR
            )
            report.patches = result
            run.done(
                "patch",
                f"{len(result.written)} written, {len(result.deleted)} deleted, "
                f"{len(result.skipped)} already applied, {len(result.via_diff)} through diffs",
                files=patched_state(site, kept, options.jobs),
            )
        if not run.skip_if_done("workspace"):
            planned = plan_restore(kept, info)
            written, present = restore_workspace(kept, target, planned, force=options.force)
            run.done(
                "workspace",
                f"{len(written)} workspace file(s) restored under {target}"
                + (f", {len(present)} already there" if present else ""),
                files={item.rel: item.sha256 for item in planned},
            )
        if not run.skip_if_done("services"):
            units = render_units(
                kept,
                target,
                venv=venv,
                home=target,
                models=models_dir(target, options.models),
            )
            detail = f"{len(units)} unit(s) rendered into {target / 'services'}"
            facts: dict[str, Any] = {}
            if (options.install_units or options.no_exec) and units:
                detail += _install_or_show_units(run, units, options, facts)
            run.done(
                "services",
                detail,
                units=[u.name for u in units],
                rendered={
                    u.path.relative_to(target).as_posix(): sha256_file(u.path) for u in units
                },
                **facts,
            )
        report.secrets = required_secrets(kept, target)
        _say_secrets(run, report.secrets)
        if not run.skip_if_done("models"):
            checks = check_models(info.models, options.models, home=target)
            report.models = checks
            summary = ", ".join(f"{c.name}: {c.status}" for c in checks) or "no model references"
            run.done("models", summary)
        # Before the ladder: a rung would fail on a drifted file with a vaguer message.
        _check_drift(run, target, options.jobs)
        if not run.skip_if_done("smoke"):
            values = path_values(target, info, options.models)
            for line in launch_lines(info, values):
                if options.no_exec:
                    report.would_run.append(line)
                    run.events("smoke server", "would run", line)
                elif options.smoke and smoke is not None:
                    run.events("smoke server", "will run", line)
            if options.no_exec:
                run.skipped("smoke", NO_EXEC_SMOKE)
            elif not options.smoke or smoke is None:
                run.skipped("smoke", "--no-smoke" if not options.smoke else "no ladder available")
            else:
                report.smoke = smoke(interpreter, kept, info, values)
                if report.smoke.get("passed"):
                    run.done("smoke", str(report.smoke.get("summary", "the smoke ladder passed")))
                else:
                    raise SmokeError(
                        f"the smoke ladder failed in {target}: {report.smoke.get('summary', '')}",
                        hint=f"see {target / STATE_DIR / REPORT}; fix, then run unpack again",
                    )
    except ReproError as exc:
        run.failed(exc)
        _save_after_failure(run, exc)
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
        _save_after_failure(run, error)
        raise error from exc
    run.save()
    return report


def _install_or_show_units(
    run: _Run, units: Sequence[RenderedUnit], options: UnpackOptions, facts: dict[str, Any]
) -> str:
    """--install-units: print each unit's every command, then install them (a unit
    repro did not install is replaced only with --force, and backed up). --no-exec:
    the same lines, as would_run, and nothing installed. The step's detail suffix."""
    placements = place_units([u.name for u in units], options.units_dir)
    label = "would run" if options.no_exec else "will run"
    for unit, placement in zip(units, placements, strict=True):
        lines = [
            f"install {unit.path} as {placement.dest} ({placement.describe()})",
            *unit.command_lines(),
        ]
        for line in lines:
            if options.no_exec:
                run.report.would_run.append(line)
            run.events("services", label, line)
    if options.no_exec:
        return "; --no-exec: not installed"
    installed = install_unit_files(
        placements, [u.path.read_bytes() for u in units], force=options.force
    )
    reload_systemd(options.units_dir)
    backups = {str(i.dest): str(i.backup) for i in installed if i.backup is not None}
    facts["installed"] = [str(i.dest) for i in installed]
    facts["backups"] = backups
    for dest, backup in backups.items():
        run.events("services", "backed up", f"{dest} to {backup} (--force)")
    return f"; installed {', '.join(str(i.dest) for i in installed)}" + "".join(
        f"; {dest} was backed up to {backup}" for dest, backup in backups.items()
    )


NO_EXEC_SMOKE = (
    "--no-exec: no rung runs (each starts the rebuilt interpreter, which runs the .pth "
    "files of its site-packages)"
)


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


def _save_after_failure(run: _Run, error: ReproError) -> None:
    """Save the report of a failed run. The step's own error is what the operator needs:
    a report that cannot be written too (the same full disk) is added to its message,
    never put in its place."""
    try:
        run.save()
    except OSError as exc:
        where = run.state.target / STATE_DIR / REPORT
        error.message += (
            f"\n(the report {where} could not be written either: {exc.strerror or exc})"
        )


def _recover_interrupted(run: _Run, target: Path, venv: Path) -> None:
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
    for leftover in (target / STATE_DIR).glob(f".{BUNDLE_DIR}.*"):  # a cut-short copy
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


def _check_drift(run: _Run, target: Path, jobs: int | None) -> None:
    """A rerun (some step already done): what those steps made is checked again, so a
    local edit since is reported instead of "nothing to do"."""
    if not any(step.status == "already done" for step in run.report.steps):
        return
    drift = target_drift(target, jobs=jobs)
    run.report.drift = drift
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


def launch_lines(info: BundleInfo, values: Mapping[str, str]) -> list[str]:
    """The bundle's server launch commands with the target's paths filled in, exactly as
    the server rung would run them (it runs the first)."""
    lines = []
    for command in info.launch.commands:
        argv = command.argv if command.argv else ("/bin/sh", "-c", command.shell or "")
        filled = [render_unit(arg, dict(values)) for arg in argv]
        lines.append(f"server {command.name} (port {command.port}): {shlex.join(filled)}")
    return lines


def _wipe_target(target: Path) -> None:
    """--replace: remove an earlier repro target (never a directory repro did not make)."""
    if not (target / STATE_DIR / "state.toml").exists():
        raise UsageError(f"{target} is not a repro target; refusing to remove it")
    shutil.rmtree(target)


def _say_secrets(run: _Run, secrets: Sequence[RequiredSecret]) -> None:
    """One event per environment file that still lacks a credential a unit reads."""
    missing: dict[Path, list[RequiredSecret]] = {}
    for item in secrets:
        if not item.provided:
            missing.setdefault(item.file, []).append(item)
    for file, items in missing.items():
        names = ", ".join(item.name for item in items)
        run.events(
            "services",
            "needs",
            f"{items[0].unit} needs {names}: taken out at pack time; set "
            f"{'them' if len(items) > 1 else 'it'} in {file} (mode 0600) before starting it",
        )


def _pending(state: UnpackState, options: UnpackOptions) -> list[str]:
    """The steps a real run would do now: those not done in an earlier run (the ladder
    only when it would run: --no-smoke never marks it done)."""
    steps = [step for step in STEPS if step != "verify" and not state.is_done(step)]
    return [step for step in steps if step != "smoke" or options.smoke]


def _plan(bundle_dir: Path, target: Path, options: UnpackOptions) -> str:
    lock = read_requirements_lock(bundle_dir / "env" / "requirements.lock")
    wheels = sorted(p.name for p in (bundle_dir / "env" / "wheels").glob("*.whl"))
    patches = load_patchset(
        (bundle_dir / "patches" / "patches.toml").read_bytes(), source="patches.toml"
    )
    units = sorted(p.name for p in (bundle_dir / "services").glob("*") if p.is_file())
    mode = "offline, from the vault" if options.offline else "from the bundle's indexes"
    return (
        f"would create a venv at {target} and install {len(lock.pins)} distributions "
        f"({mode}; {len(wheels)} vault wheels), apply {len(patches.entries)} patched files, "
        f"render {len(units)} unit(s)"
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
    restored = unpatch(target / STATE_DIR, site_packages_of(interpreter), force=force)
    state.forget("patch")
    return restored
