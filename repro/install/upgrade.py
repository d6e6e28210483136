"""An unpacked target moved in place to another bundle of the same name: what differs.

`plan_upgrade(recorded, new)` compares what the target recorded (its kept bundle:
manifest, lock, vault, patch set, workspace files, units) with the new bundle's
verified metadata and manifest, by digest, and says what changes: distributions
added, removed and changed (another version, or another wheel), patch entries to
take back and to apply, workspace files, units, model references, and which members
of the new bundle the upgrade reads (`needed`: every member whose digest differs, and
nothing else, so a delta bundle that carries only those is enough).
`assemble_kept` builds the new kept bundle from the old one and that member source.
The changes themselves are made by repro.install.releases (backed up first, journaled)
and the ordinary unpack stages (repro.install.unpack's upgrade path).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from repro.bundle import layout
from repro.bundle.info import load_bundle_info
from repro.bundle.lock import read_requirements_lock
from repro.bundle.manifest import read_manifest
from repro.bundle.patchset import PatchEntry, load_patchset
from repro.errors import InstallError
from repro.install.read.contents import vault_entries


@dataclass(frozen=True)
class DistChange:
    name: str  # canonical
    old: str | None  # version before (None: added)
    new: str | None  # version after (None: removed)

    def describe(self) -> str:
        if self.old is None:
            return f"{self.name} {self.new} (added)"
        if self.new is None:
            return f"{self.name} {self.old} (removed)"
        if self.old == self.new:
            return f"{self.name} {self.new} (another wheel)"
        return f"{self.name} {self.old} -> {self.new}"


@dataclass(frozen=True)
class UpgradePlan:
    """What an upgrade changes; every field computed from digests alone."""

    name: str
    old_version: str
    new_version: str
    added: tuple[DistChange, ...] = ()
    removed: tuple[DistChange, ...] = ()
    changed: tuple[DistChange, ...] = ()
    unchanged_dists: int = 0
    # site-packages paths of the patch entries taken back (old) and applied (new)
    unpatch: tuple[str, ...] = ()
    repatch: tuple[str, ...] = ()
    unchanged_patches: int = 0
    files_changed: tuple[str, ...] = ()  # workspace files, rel to the target
    files_removed: tuple[str, ...] = ()
    files_added: tuple[str, ...] = ()
    units_changed: tuple[str, ...] = ()
    units_removed: tuple[str, ...] = ()
    units_added: tuple[str, ...] = ()
    models_changed: bool = False
    needed: frozenset[str] = field(default_factory=frozenset)  # members read from NEW

    @property
    def dists_out(self) -> tuple[str, ...]:
        """Distributions whose installed files go (removed or changed)."""
        return tuple(d.name for d in (*self.removed, *self.changed))

    @property
    def dists_in(self) -> tuple[str, ...]:
        """Distributions whose wheels are installed (added or changed)."""
        return tuple(d.name for d in (*self.added, *self.changed))

    @property
    def anything(self) -> bool:
        return bool(
            self.added
            or self.removed
            or self.changed
            or self.unpatch
            or self.repatch
            or self.files_changed
            or self.files_removed
            or self.files_added
            or self.units_changed
            or self.units_removed
            or self.units_added
            or self.models_changed
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.old_version,
            "to": self.new_version,
            "dists": {
                "added": [d.describe() for d in self.added],
                "removed": [d.describe() for d in self.removed],
                "changed": [d.describe() for d in self.changed],
                "unchanged": self.unchanged_dists,
            },
            "patches": {
                "taken_back": list(self.unpatch),
                "applied": list(self.repatch),
                "unchanged": self.unchanged_patches,
            },
            "files": {
                "added": list(self.files_added),
                "changed": list(self.files_changed),
                "removed": list(self.files_removed),
            },
            "units": {
                "added": list(self.units_added),
                "changed": list(self.units_changed),
                "removed": list(self.units_removed),
            },
            "models_changed": self.models_changed,
            "members_read": len(self.needed),
        }

    def summary(self) -> str:
        parts = []
        for label, items in (("added", self.added), ("removed", self.removed)):
            if items:
                parts.append(f"{label} {', '.join(d.describe() for d in items)}")
        if self.changed:
            parts.append(f"changed {', '.join(d.describe() for d in self.changed)}")
        parts.append(f"{self.unchanged_dists} distribution(s) untouched")
        if self.unpatch or self.repatch:
            parts.append(
                f"patches: {len(self.unpatch)} taken back, {len(self.repatch)} applied, "
                f"{self.unchanged_patches} untouched"
            )
        files = len(self.files_added) + len(self.files_changed) + len(self.files_removed)
        if files:
            parts.append(f"{files} workspace file(s)")
        units = len(self.units_added) + len(self.units_changed) + len(self.units_removed)
        if units:
            parts.append(f"{units} unit(s)")
        return f"{self.old_version} -> {self.new_version}: " + "; ".join(parts)


# --- what a bundle records, read from its metadata (never from a wheel) ---------------


def manifest_of(bundle: Path) -> dict[str, str]:
    """member -> sha256 of a bundle directory's MANIFEST.sha256."""
    return {
        entry.path: entry.digest
        for entry in read_manifest(layout.at(bundle, layout.MANIFEST)).entries
    }


def _dists(bundle: Path) -> dict[str, tuple[str, tuple[str, ...]]]:
    """canonical name -> (version, the sorted sha256 of its vault wheels)."""
    lock = read_requirements_lock(layout.at(bundle, layout.REQUIREMENTS_LOCK))
    wheels: dict[str, list[str]] = {}
    for entry in vault_entries(bundle):
        wheels.setdefault(canonicalize_name(entry.name), []).append(
            f"{entry.version}:{entry.sha256}"
        )
    return {
        canonicalize_name(pin.name): (
            pin.version,
            tuple(sorted(w for w in wheels.get(canonicalize_name(pin.name), []))),
        )
        for pin in lock.pins
    }


def patch_entries(bundle: Path) -> dict[str, PatchEntry]:
    path = layout.at(bundle, layout.PATCHES_TOML)
    if not path.is_file():
        return {}
    patchset = load_patchset(path.read_bytes(), source=layout.PATCHES_TOML)
    return {entry.path: entry for entry in patchset.entries}


def _same_patch(a: PatchEntry, b: PatchEntry) -> bool:
    return (
        a.dist,
        canonicalize_name(a.dist),
        a.version,
        a.kind,
        a.pristine_sha256,
        a.patched_sha256,
        a.executable,
    ) == (
        b.dist,
        canonicalize_name(b.dist),
        b.version,
        b.kind,
        b.pristine_sha256,
        b.patched_sha256,
        b.executable,
    )


def _prefixed(manifest: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {m[len(prefix) :]: d for m, d in manifest.items() if m.startswith(prefix)}


def plan_upgrade(recorded: Path, new: Path, new_manifest: Mapping[str, str]) -> UpgradePlan:
    """What moving a target that holds the kept bundle `recorded` to the bundle whose
    verified metadata is in `new` (a directory holding at least its metadata and every
    member whose digest differs) changes. `new_manifest`: member -> sha256 of NEW."""
    old_manifest = manifest_of(recorded)
    old_info = load_bundle_info(
        layout.at(recorded, layout.BUNDLE_TOML).read_bytes(), source="kept bundle.toml"
    )
    new_info = load_bundle_info(
        layout.at(new, layout.BUNDLE_TOML).read_bytes(), source=layout.BUNDLE_TOML
    )
    needed = frozenset(m for m, d in new_manifest.items() if old_manifest.get(m) != d)

    old_d, new_d = _dists(recorded), _dists(new)
    added = tuple(DistChange(n, None, new_d[n][0]) for n in sorted(new_d.keys() - old_d.keys()))
    removed = tuple(DistChange(n, old_d[n][0], None) for n in sorted(old_d.keys() - new_d.keys()))
    changed = tuple(
        DistChange(n, old_d[n][0], new_d[n][0])
        for n in sorted(old_d.keys() & new_d.keys())
        if old_d[n] != new_d[n]
    )
    moved = {d.name for d in (*removed, *changed)}

    old_p, new_p = patch_entries(recorded), patch_entries(new)

    def content_changed(path: str) -> bool:
        """The entry's carried full file or diff differs (digest of its members)."""
        a, b = old_p.get(path), new_p.get(path)
        if a is None or b is None:
            return True
        members = [m for m in (a.full_member, a.diff_member) if m]
        members += [m for m in (b.full_member, b.diff_member) if m]
        return any(
            old_manifest.get(layout.in_patches(m)) != new_manifest.get(layout.in_patches(m))
            for m in members
        )

    unpatch = tuple(
        sorted(
            p
            for p, e in old_p.items()
            if canonicalize_name(e.dist) in moved
            or p not in new_p
            or not _same_patch(e, new_p[p])
            or content_changed(p)
        )
    )
    repatch = tuple(
        sorted(
            p
            for p, e in new_p.items()
            if p in unpatch or p not in old_p or canonicalize_name(e.dist) in moved
        )
    )
    unchanged_patches = len([p for p in new_p if p not in repatch])

    old_f = _prefixed(old_manifest, layout.FILES + "/")
    new_f = _prefixed(new_manifest, layout.FILES + "/")
    old_u = _prefixed(old_manifest, layout.SERVICES + "/")
    new_u = _prefixed(new_manifest, layout.SERVICES + "/")
    return UpgradePlan(
        name=new_info.name,
        old_version=old_info.version,
        new_version=new_info.version,
        added=added,
        removed=removed,
        changed=changed,
        unchanged_dists=len(new_d) - len(added) - len(changed),
        unpatch=unpatch,
        repatch=repatch,
        unchanged_patches=unchanged_patches,
        files_added=tuple(sorted(new_f.keys() - old_f.keys())),
        files_removed=tuple(sorted(old_f.keys() - new_f.keys())),
        files_changed=tuple(sorted(k for k in old_f.keys() & new_f.keys() if old_f[k] != new_f[k])),
        units_added=tuple(sorted(new_u.keys() - old_u.keys())),
        units_removed=tuple(sorted(old_u.keys() - new_u.keys())),
        units_changed=tuple(sorted(k for k in old_u.keys() & new_u.keys() if old_u[k] != new_u[k])),
        models_changed=old_info.models != new_info.models
        or _prefixed(old_manifest, layout.MODELS + "/")
        != _prefixed(new_manifest, layout.MODELS + "/"),
        needed=needed,
    )


def assemble_kept(
    recorded: Path,
    source: Path,
    new_manifest: Mapping[str, str],
    dest: Path,
    *,
    wheels_needed: frozenset[str] = frozenset(),
) -> None:
    """The new kept bundle at `dest`: each member of NEW whose digest the old kept bundle
    recorded is linked (else copied) from it, every other from `source`; a vault wheel
    neither holds is left out unless named in `wheels_needed` (the wheels of the
    distributions the upgrade installs), as the kept bundle of a fresh unpack drops its
    wheels once installed."""
    old_manifest = manifest_of(recorded)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for member, digest in sorted(new_manifest.items()):
        out = dest / member
        out.parent.mkdir(parents=True, exist_ok=True)
        fresh = source / member
        old = recorded / member
        if fresh.is_file():
            shutil.copy2(fresh, out)
        elif old_manifest.get(member) == digest and old.is_file():
            try:
                os.link(old, out)
            except OSError:
                shutil.copy2(old, out)
        elif member.startswith(layout.WHEELS + "/") and member not in wheels_needed:
            continue
        else:
            raise InstallError(
                f"{member}: the upgrade needs it, and neither the new bundle nor the "
                f"target's kept bundle ({recorded}) holds it",
                hint="unpack the full bundle, or a delta whose base is what the target holds",
            )
    for meta in layout.MANIFEST_NAMES:
        if (source / meta).is_file():
            shutil.copy2(source / meta, dest / meta)
