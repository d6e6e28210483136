"""An upgrade in place applied: only what `UpgradePlan` says differs is touched.

`apply_upgrade` runs under the target's lock, after NEW verified and its preflight
passed, inside a release (repro.install.releases) made first: every file it replaces
or removes goes into the release before it is touched. In order: the new kept bundle
is assembled (unchanged members linked from the old one, the others read from the
member source), the patch entries the plan takes back are restored to their
originals, the installed files of removed and changed distributions are moved out
(by their RECORD), the wheels of added and changed ones installed into the existing
venv (the vault installer when the vault holds a wheel for each of them, as a delta's
vault does: it carries only the changed wheels; else uv or pip-sync of the new lock,
which only adds what is missing), the workspace files and units that change are moved
out. The new
state.toml then records venv and install as done, and the ordinary unpack stages
(patch, workspace, services, models, smoke) finish the job as on a fresh target:
unchanged entries, files and units are found in place and left as they are.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w
from packaging.utils import canonicalize_name

from repro import _toml
from repro.bundle import layout
from repro.bundle.lock import read_requirements_lock
from repro.errors import InstallError
from repro.install.drift import KEPT_BUNDLE
from repro.install.options import Events
from repro.install.read.contents import vault_entries, vault_hashes
from repro.install.releases import BUNDLE, ReleaseWriter
from repro.install.state import STATE_DIR, UnpackState
from repro.install.transaction.atomic import atomic_unlink, atomic_write
from repro.install.upgrade import UpgradePlan, assemble_kept, patch_entries
from repro.install.venv.installer import (
    Installer,
    InstallPlan,
    RequestedInstaller,
    choose_installer,
    install_lock,
    verify_installed,
)
from repro.install.venv.site import site_packages_of
from repro.install.venv.sources import package_sources
from repro.install.venv.vault import (
    choose_wheels,
    describe_interpreter,
    install_from_vault,
    supported_tags,
)
from repro.wheel.record import read_dist_record

APPLIED = "applied.toml"
BACKUP = "backup"


@dataclass(frozen=True)
class Applied:
    """What apply_upgrade did, for the report and the install step's facts."""

    installer: Installer | None  # None: no wheel to install
    distributions: int
    removed_files: int
    installed_files: int  # written by the vault installer, RECORDs aside; 0 for uv, pip
    seconds: float


def _dist_info(site: Path, name: str) -> Path | None:
    for child in site.glob("*.dist-info"):
        dist = child.name[: -len(".dist-info")].rsplit("-", 1)[0]
        if canonicalize_name(dist) == name:
            return child
    return None


def _uninstall(writer: ReleaseWriter, target: Path, venv: Path, site: Path, name: str) -> int:
    """The installed files of `name` (its RECORD) moved into the release; the directories
    they leave empty removed. Returns how many files moved."""
    info = _dist_info(site, name)
    if info is None:
        return 0
    moved = 0
    parents: set[Path] = set()
    root = venv.resolve()
    for entry in read_dist_record(info):
        path = Path(os.path.normpath(site / entry.path))
        if not path.is_relative_to(root):
            raise InstallError(
                f"{info}/RECORD: {entry.path} is outside the venv; refusing to remove it",
                hint="the venv was changed by hand; rebuild it with --replace",
            )
        if path.exists() or path.is_symlink():
            writer.keep(path.relative_to(target).as_posix(), move=True)
            moved += 1
        parents.add(path.parent)
    parents.add(info)
    for parent in sorted(parents, key=lambda p: len(p.parts), reverse=True):
        if parent.is_relative_to(root) and parent != root:
            writer.remove_dir_if_empty(
                parent.relative_to(target).as_posix(), stop=_top(parent, venv, site, target)
            )
    return moved


def _top(path: Path, venv: Path, site: Path, target: Path) -> str:
    """Where pruning empty directories stops: site-packages, or the venv's root."""
    stop = site if path.is_relative_to(site) else venv
    return stop.relative_to(target).as_posix()


def _unpatch(writer: ReleaseWriter, target: Path, site: Path, paths: tuple[str, ...]) -> int:
    """The patch entries the plan takes back: each patched file kept in the release,
    its original restored from .repro/backup (a file the patch added removed), its
    record and backup gone, as if it had never been applied."""
    state_dir = target / STATE_DIR
    applied_path = state_dir / APPLIED
    if not paths or not applied_path.is_file():
        return 0
    doc = _toml.loads(applied_path.read_text(encoding="utf-8"))
    records = {r["path"]: r for r in doc.get("files", [])}
    done = 0
    for rel in paths:
        record = records.pop(rel, None)
        if record is None:
            continue
        where = site / rel
        writer.keep(where.relative_to(target).as_posix(), move=False)
        backup = state_dir / BACKUP / rel
        if record.get("existed"):
            try:
                original = backup.read_bytes()
            except OSError as exc:
                raise InstallError(
                    f"{backup}: the original of the patched {rel} is not there to restore "
                    f"({exc.strerror or exc})",
                    hint="the target's .repro/backup was changed; unpack the new bundle with "
                    "--replace at this target, or at a fresh one",
                ) from exc
            atomic_write(where, original, mode=int(record.get("mode", 0o644)))
        else:
            atomic_unlink(where) if where.exists() else None
        backup.unlink(missing_ok=True)
        done += 1
    if records:
        atomic_write(
            applied_path,
            tomli_w.dumps({"files": [records[k] for k in sorted(records)]}).encode(),
        )
    else:
        atomic_unlink(applied_path)
        shutil.rmtree(state_dir / BACKUP, ignore_errors=True)
    return done


def apply_upgrade(
    plan: UpgradePlan,
    member_source: Path,
    new_manifest: Mapping[str, str],
    target: Path,
    *,
    writer: ReleaseWriter,
    venv: Path,
    interpreter: Path,
    requested: RequestedInstaller,
    offline: bool,
    keep_bundle: bool,
    jobs: int | None,
    events: Events,
) -> Applied:
    """Change the target from what it holds to NEW where `plan` says they differ; every
    file replaced or removed is kept by `writer` first. The installer (`requested`;
    `auto`: the vault installer when the vault has a wheel for every distribution the
    upgrade installs) is judged on those distributions alone, not on the whole lock: a
    delta's vault holds only the wheels that changed. The stages after the install
    (patch, workspace, services, models) are left to the caller."""
    started = time.monotonic()
    state_dir = target / STATE_DIR
    kept = state_dir / KEPT_BUNDLE
    new_lock = read_requirements_lock(layout.at(member_source, layout.REQUIREMENTS_LOCK))
    needed_wheels = frozenset(m for m in plan.needed if m.startswith(layout.WHEELS + "/"))
    next_kept = state_dir / f".{KEPT_BUNDLE}.{secrets.token_hex(4)}"
    assemble_kept(kept, member_source, new_manifest, next_kept, wheels_needed=needed_wheels)
    os.rename(kept, writer.path / BUNDLE)
    os.rename(next_kept, kept)
    events("upgrade", "bundle", f"the kept bundle is {plan.name} {plan.new_version} now")

    site = site_packages_of(interpreter)
    old_entries = set(plan.unpatch)
    taken = _unpatch(writer, target, site, plan.unpatch)
    # files the new patch set writes over where the target has them: kept first
    for rel in plan.repatch:
        if rel not in old_entries:
            writer.keep((site / rel).relative_to(target).as_posix(), move=False)
    if taken:
        events("upgrade", "patches", f"{taken} patched file(s) taken back")

    removed = 0
    for name in plan.dists_out:
        removed += _uninstall(writer, target, venv, site, name)
    if plan.dists_out:
        events("upgrade", "removed", ", ".join(plan.dists_out) + f" ({removed} files)")

    installed_files = 0
    used: Installer | None = None
    pins = [p for p in new_lock.pins if canonicalize_name(p.name) in set(plan.dists_in)]
    if pins:
        vault = layout.at(kept, layout.WHEELS)
        tags = supported_tags(describe_interpreter(interpreter))
        choice = choose_wheels(pins, vault, tags)
        installer = choose_installer(requested, lambda: not choice.missing)
        if installer == "vault":
            if choice.missing:
                raise InstallError(
                    f"{vault} has no wheel this Python takes for: {', '.join(choice.missing)}",
                    hint="unpack with --installer uv or pip (online), or pack --wheels all",
                )
            result = install_from_vault(
                interpreter, choice.wheels, vault_hashes(kept), jobs=jobs, drop=not keep_bundle
            )
            installed_files = sum(one.files for one in result.installed)
            used = "vault"
        else:
            sources = package_sources(new_lock, vault=vault, offline=offline, where=str(kept))
            install_lock(
                interpreter,
                InstallPlan(
                    lock=layout.at(kept, layout.REQUIREMENTS_LOCK),
                    wheels=sources.vault,
                    indexes=(sources.index_url,) if sources.index_url else (),
                    extra_indexes=sources.extra_index_urls,
                    find_links=sources.find_links,
                    offline=sources.offline,
                    vault_hashes=vault_hashes(kept) if sources.vault is not None else {},
                ),
                installer,
            )
            used = installer
        events("upgrade", "installed", f"{', '.join(plan.dists_in)} ({used} installer)")
    verify_installed(interpreter, {p.name: p.version for p in new_lock.pins})

    for rel in (*plan.files_changed, *plan.files_removed):
        writer.keep(rel, move=True)
    services = layout.at(target, layout.SERVICES)
    if plan.units_added or plan.units_changed or plan.units_removed:
        if services.is_dir():
            for path in sorted(p for p in services.rglob("*") if p.is_file()):
                writer.keep(path.relative_to(target).as_posix(), move=False)
        for name in plan.units_removed:
            writer.keep(
                layout.at(target, layout.unit(name)).relative_to(target).as_posix(), move=True
            )
            drop_in = services / f"{name}.d"
            if drop_in.is_dir():
                for path in sorted(drop_in.rglob("*"), reverse=True):
                    if path.is_file():
                        writer.keep(path.relative_to(target).as_posix(), move=True)
                shutil.rmtree(drop_in, ignore_errors=True)
    if patch_entries(kept) == {} and not (state_dir / APPLIED).exists():
        shutil.rmtree(state_dir / BACKUP, ignore_errors=True)
    return Applied(
        installer=used,
        distributions=len(new_lock.pins),
        removed_files=removed,
        installed_files=installed_files,
        seconds=time.monotonic() - started,
    )


def fresh_install_facts(bundle: Path) -> dict[str, Any]:
    """The install step's facts a fresh unpack of `bundle` records: the vault installer's
    when its vault lists a wheel for every pin."""
    lock = read_requirements_lock(layout.at(bundle, layout.REQUIREMENTS_LOCK))
    listed = {(canonicalize_name(e.name), e.version) for e in vault_entries(bundle)}
    facts: dict[str, Any] = {"distributions": len(lock.pins)}
    if all((canonicalize_name(p.name), p.version) in listed for p in lock.pins):
        facts["installer"] = "vault"
    return facts


def upgraded_state(
    old: UnpackState,
    new: UnpackState,
    python: Path,
    applied: Applied,
    install_facts: Mapping[str, Any],
) -> None:
    """The new bundle's state: preflight, venv (the same venv) and install done, as a
    fresh unpack records them; the later steps run as on a fresh target."""
    new.done = ["preflight", "venv", "install"]
    new.facts = {
        "preflight": {"python": str(python)},
        "venv": old.facts.get("venv", {}),
        "install": dict(install_facts),
    }
    new.started = None
    new.failed = None
    new.save()
    del applied
