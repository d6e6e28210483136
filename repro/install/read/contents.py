"""What unpack reads of a verified bundle besides bundle.toml, each member checked.

`check_bundle_contents` parses every member the later stages act on while nothing is
written yet (the verification calls it), so a malformed member is refused before the
target is touched; the readers below are what those stages use.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from repro.bundle import layout
from repro.bundle.kernels import KernelAudit, load_kernels
from repro.bundle.lock import read_requirements_lock
from repro.bundle.patchset import load_patchset
from repro.bundle.vault import VaultEntry, load_vault
from repro.errors import BundleFormatError, InputError
from repro.install.deploy.caches import carried_caches
from repro.install.deploy.services import check_units
from repro.install.venv.sources import check_lock_options


def check_bundle_contents(bundle_dir: Path, where: str) -> None:
    """Every file the later steps act on is parsed now, while nothing is written yet:
    the lock, patches.toml (paths inside site-packages), env/caches.toml and the unit
    names."""
    lock = layout.at(bundle_dir, layout.REQUIREMENTS_LOCK)
    if lock.is_file():
        try:
            parsed = read_requirements_lock(lock)
        except InputError as exc:  # a bundle member that is not a lock: an invalid bundle
            raise BundleFormatError(f"{where}: {exc.message}", hint=exc.hint) from exc
        check_lock_options(parsed, where)
    patches = layout.at(bundle_dir, layout.PATCHES_TOML)
    if patches.is_file():
        load_patchset(patches.read_bytes(), source=f"{where}: {layout.PATCHES_TOML}")
    custom_vault_wheels(bundle_dir)
    kernel_audit(bundle_dir)
    carried_caches(bundle_dir)
    pack_facts(bundle_dir)
    check_units(bundle_dir, where=where)


@dataclass(frozen=True)
class PackFacts:
    """What unpack uses of env/pack-report.json."""

    installed_bytes: int = 0
    unmet: int = 0  # requirements `repro pack` found unmet in the source (pip check)


def pack_facts(bundle_dir: Path) -> PackFacts:
    """env/pack-report.json's facts, checked: a JSON object, `installed_bytes` a
    non-negative integer, `unmet_requirements` a list (both optional)."""
    name = layout.PACK_REPORT
    path = layout.at(bundle_dir, name)
    if not path.is_file():
        return PackFacts()
    try:
        document = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise BundleFormatError(f"{name}: not valid JSON: {reason}") from None
    if not isinstance(document, dict):
        raise BundleFormatError(f"{name}: must be a JSON object, not {type(document).__name__}")
    size = document.get("installed_bytes", 0)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise BundleFormatError(
            f"{name}: key 'installed_bytes' must be a non-negative integer, "
            f"not {json.dumps(size)[:40]}"
        )
    unmet = document.get("unmet_requirements", [])
    if not isinstance(unmet, list):
        raise BundleFormatError(
            f"{name}: key 'unmet_requirements' must be a list, not {type(unmet).__name__}"
        )
    return PackFacts(installed_bytes=size, unmet=len(unmet))


def kernel_audit(bundle_dir: Path) -> KernelAudit | None:
    """env/kernels.toml, checked; None for a bundle packed before the audit."""
    path = layout.at(bundle_dir, layout.KERNELS_TOML)
    if not path.is_file():
        return None
    return load_kernels(path.read_bytes(), source=layout.KERNELS_TOML)


def vault_entries(bundle_dir: Path) -> tuple[VaultEntry, ...]:
    path = layout.at(bundle_dir, layout.VAULT_TOML)
    if not path.is_file():
        return ()
    return load_vault(path.read_bytes(), source=layout.VAULT_TOML)


def vault_hashes(bundle_dir: Path) -> dict[str, tuple[str, ...]]:
    """Pin name -> the sha256 of the vault's wheels for it, as env/vault.toml lists them."""
    return hashes_by_pin(vault_entries(bundle_dir))


def hashes_by_pin(entries: Iterable[VaultEntry]) -> dict[str, tuple[str, ...]]:
    """Normalized pin name -> the sha256 of each listed wheel of it."""
    hashes: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        name = canonicalize_name(entry.name)
        hashes[name] = (*hashes.get(name, ()), entry.sha256)
    return hashes


def custom_vault_wheels(bundle_dir: Path) -> list[str]:
    """Vault wheels that are there because no index serves them (not only --wheels all);
    each a file name inside env/wheels/ (load_vault refuses any other)."""
    entries = vault_entries(bundle_dir)
    return sorted(e.filename for e in entries if not e.index_serves)


def vault_wheel_files(bundle_dir: Path) -> list[Path]:
    """Every wheel file in the vault (env/wheels/*.whl), sorted."""
    return sorted(layout.at(bundle_dir, layout.WHEELS).glob("*.whl"))
