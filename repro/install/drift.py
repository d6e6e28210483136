"""Has an unpacked target drifted from its bundle since unpack finished its steps?

Checked: the installed distributions against the lock, every patched file against
its patched sha256 (a deleted one must stay deleted), the restored workspace files
and the rendered units against what unpack wrote. Each difference names the file
and both hashes; nothing is changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from repro.bundle import BundleInfo, load_bundle_info
from repro.errors import InputError
from repro.hashing import sha256_file
from repro.install.installer import compare_installed
from repro.install.state import STATE_DIR, UnpackState, load_state
from repro.install.targetsite import read_installed, site_packages_of
from repro.install.workspace import venv_dir
from repro.patchset import load_patchset
from repro.snapshot.lock import read_requirements_lock

KEPT_BUNDLE = "bundle"


@dataclass(frozen=True)
class Drift:
    what: str  # "distribution", "patched file", "workspace file", "unit"
    path: str
    expected: str
    found: str

    def describe(self) -> str:
        return f"{self.what} {self.path}: expected {self.expected}, found {self.found}"

    def to_json(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "path": self.path,
            "expected": self.expected,
            "found": self.found,
        }


def _hash_or_missing(path: Path) -> str:
    if path.is_symlink() or not path.is_file():
        return "missing" if not path.exists() else "not a regular file"
    return sha256_file(path)


def kept_bundle(target: Path) -> Path:
    return target / STATE_DIR / KEPT_BUNDLE


def target_info(target: Path) -> tuple[UnpackState, BundleInfo]:
    state = load_state(target)
    toml = kept_bundle(target) / "bundle.toml"
    if state is None or not toml.is_file():
        raise InputError(
            f"{target}: not an unpacked repro target (no {STATE_DIR}/state.toml and bundle)",
            hint="give the --target directory that `repro unpack` wrote",
        )
    return state, load_bundle_info(toml.read_bytes(), source=str(toml))


def installed_drift(target: Path, info: BundleInfo, bundle: Path) -> list[Drift]:
    interpreter = venv_dir(target, info) / "bin" / "python"
    if not interpreter.exists():
        return [Drift("venv", str(interpreter), "the rebuilt interpreter", "missing")]
    lock = read_requirements_lock(bundle / "env" / "requirements.lock")
    wanted: dict[str, str] = {canonicalize_name(pin.name): pin.version for pin in lock.pins}
    diff = compare_installed(wanted, read_installed(interpreter))
    out = [Drift("distribution", name, wanted[name], "not installed") for name in diff.missing]
    out += [Drift("distribution", name, "not in the lock", "installed") for name in diff.extra]
    out += [Drift("distribution", name, want, got) for name, want, got in diff.wrong_version]
    return out


def patched_state(site_packages: Path, bundle: Path) -> dict[str, str]:
    """What each patched file is now (sha256, or "missing"): recorded by the patch step,
    since a file patched through its diff differs from the bundle's patched bytes."""
    path = bundle / "patches" / "patches.toml"
    patchset = load_patchset(path.read_bytes(), source=str(path))
    return {e.path: _hash_or_missing(site_packages / e.path) for e in patchset.entries}


def patch_drift(site_packages: Path, bundle: Path, recorded: dict[str, str]) -> list[Drift]:
    path = bundle / "patches" / "patches.toml"
    patchset = load_patchset(path.read_bytes(), source=str(path))
    out = []
    for entry in patchset.entries:
        found = _hash_or_missing(site_packages / entry.path)
        expected = recorded.get(entry.path)
        if expected is None:
            expected = "missing" if entry.kind == "deleted" else str(entry.patched_sha256)
        if found != expected:
            shown = "deleted" if expected == "missing" else expected
            out.append(Drift("patched file", f"{entry.dist}: {entry.path}", shown, found))
    return out


def recorded_drift(target: Path, what: str, recorded: dict[str, str]) -> list[Drift]:
    """Files unpack wrote and recorded (rel -> sha256) that differ now."""
    out = []
    for rel, digest in sorted(recorded.items()):
        found = _hash_or_missing(target / rel)
        if found != digest:
            out.append(Drift(what, rel, digest, found))
    return out


def target_drift(target: Path, site_packages: Path | None = None) -> list[Drift]:
    """Every difference between TARGET and the bundle it was unpacked from, for the
    steps unpack finished there."""
    state, info = target_info(target)
    bundle = kept_bundle(target)
    drift: list[Drift] = []
    if state.is_done("install"):
        drift += installed_drift(target, info, bundle)
    if state.is_done("patch"):
        interpreter = venv_dir(target, info) / "bin" / "python"
        if site_packages is None and interpreter.exists():
            site_packages = site_packages_of(interpreter)
        if site_packages is not None:
            recorded = dict(state.facts.get("patch", {}).get("files", {}))
            drift += patch_drift(site_packages, bundle, recorded)
    if state.is_done("workspace"):
        files = state.facts.get("workspace", {}).get("files", {})
        drift += recorded_drift(target, "workspace file", dict(files))
    if state.is_done("services"):
        units = state.facts.get("services", {}).get("rendered", {})
        drift += recorded_drift(target, "unit", dict(units))
    return drift
