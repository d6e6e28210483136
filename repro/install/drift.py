"""Has an unpacked target drifted from its bundle since unpack finished its steps?

Checked: the venv's own files (pyvenv.cfg, bin/python*) against what the venv step
made (repro.install.venv.guard; the interpreter is not started when they differ), the
installed distributions against the lock (a distribution the kernels step rebuilt for
this box against the wheel it built: `rebuilt`), every patched file against
its patched sha256 (a deleted one must stay deleted), the restored workspace files
and the rendered units against what unpack wrote, and each model where the one rule
finds it now against where the models step found it. Each difference names the file
and both hashes; nothing is changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from repro.bundle import layout
from repro.bundle.info import BundleInfo, load_bundle_info
from repro.bundle.lock import read_requirements_lock
from repro.bundle.manifest import ProgressSink
from repro.bundle.patchset import PatchEntry, load_patchset
from repro.errors import InputError
from repro.hashing import hash_files
from repro.install.deploy.models import default_place, locate_model
from repro.install.deploy.restore import venv_dir
from repro.install.state import STATE_DIR, UnpackState, load_state
from repro.install.venv.guard import recorded, trusted_interpreter, venv_differences
from repro.install.venv.installer import compare_installed
from repro.install.venv.site import read_installed, site_packages_of, venv_site_dirs

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


def _digests(paths: Sequence[Path], jobs: int | None = None) -> list[str]:
    """What each path is now: its sha256 (hashed `jobs` files at a time), "missing",
    "not a regular file" (a link or a directory is never what unpack wrote), or why it
    could not be read."""
    regular = [path for path in paths if not path.is_symlink() and path.is_file()]
    hashed = dict(zip(regular, hash_files(regular, jobs=jobs), strict=True))
    out = []
    for path in paths:
        result = hashed.get(path)
        if result is None:
            out.append("missing" if not path.exists() else "not a regular file")
        else:
            out.append(result.digest or f"unreadable: {result.error}")
    return out


def kept_bundle(target: Path) -> Path:
    return target / STATE_DIR / KEPT_BUNDLE


def target_info(target: Path) -> tuple[UnpackState, BundleInfo]:
    state = load_state(target)
    toml = layout.at(kept_bundle(target), layout.BUNDLE_TOML)
    if state is None or not toml.is_file():
        raise InputError(
            f"{target}: not an unpacked repro target (no {STATE_DIR}/state.toml and bundle)",
            hint="give the --target directory that `repro unpack` wrote",
        )
    return state, load_bundle_info(toml.read_bytes(), source=str(toml))


def venv_drift(venv: Path, state: UnpackState) -> list[Drift]:
    """The venv's own files (pyvenv.cfg, bin/python*) unlike what the venv step made:
    while there is any, the venv's interpreter is not started (it would read them)."""
    return [
        Drift("venv", str(venv / d.path), d.expected, d.found)
        for d in venv_differences(venv, recorded(state))
    ]


def rebuilt(state: UnpackState) -> list[dict[str, Any]]:
    """What the kernels step rebuilt for this box (name, version, wheel, sha256, archs):
    their files are the built wheel's, by design not the bundle's."""
    facts = state.facts.get("kernels", {}) if state.is_done("kernels") else {}
    found = facts.get("rebuilt", []) if isinstance(facts, dict) else []
    return [r for r in found if isinstance(r, dict) and isinstance(r.get("name"), str)]


def describe_rebuilt(state: UnpackState) -> list[str]:
    """One line per distribution rebuilt for this box, for `repro verify`."""
    return [
        f"{r['name']} {r.get('version', '?')}: rebuilt for this box from the bundle's source "
        f"({', '.join(r.get('archs', []))}; wheel {r.get('wheel', '?')}, sha256 "
        f"{r.get('sha256', '?')})"
        for r in rebuilt(state)
    ]


def installed_drift(
    target: Path, info: BundleInfo, bundle: Path, state: UnpackState | None = None
) -> list[Drift]:
    venv = venv_dir(target, info)
    interpreter = venv / "bin" / "python"
    if not interpreter.exists():
        return [Drift("venv", str(interpreter), "the rebuilt interpreter", "missing")]
    interpreter = trusted_interpreter(target, venv)
    lock = read_requirements_lock(layout.at(bundle, layout.REQUIREMENTS_LOCK))
    wanted: dict[str, str] = {canonicalize_name(pin.name): pin.version for pin in lock.pins}
    for item in rebuilt(state) if state is not None else []:
        wanted[canonicalize_name(item["name"])] = str(item.get("version", ""))
    diff = compare_installed(wanted, read_installed(interpreter))
    out = [Drift("distribution", name, wanted[name], "not installed") for name in diff.missing]
    out += [Drift("distribution", name, "not in the lock", "installed") for name in diff.extra]
    out += [Drift("distribution", name, want, got) for name, want, got in diff.wrong_version]
    return out


def _patch_entries(bundle: Path) -> list[PatchEntry]:
    path = layout.at(bundle, layout.PATCHES_TOML)
    return list(load_patchset(path.read_bytes(), source=str(path)).entries)


def _now(site_packages: Path, entries: Sequence[PatchEntry], jobs: int | None) -> dict[str, str]:
    found = _digests([site_packages / e.path for e in entries], jobs)
    return {e.path: digest for e, digest in zip(entries, found, strict=True)}


def patched_state(site_packages: Path, bundle: Path, jobs: int | None = None) -> dict[str, str]:
    """What each patched file is now (sha256, or "missing"): recorded by the patch step,
    since a file patched through its diff differs from the bundle's patched bytes."""
    return _now(site_packages, _patch_entries(bundle), jobs)


def patch_drift(
    site_packages: Path, bundle: Path, recorded: dict[str, str], jobs: int | None = None
) -> list[Drift]:
    entries = _patch_entries(bundle)
    now = _now(site_packages, entries, jobs)
    out = []
    for entry in entries:
        found = now[entry.path]
        expected = recorded.get(entry.path)
        if expected is None:
            expected = "missing" if entry.kind == "deleted" else str(entry.patched_sha256)
        if found != expected:
            shown = "deleted" if expected == "missing" else expected
            out.append(Drift("patched file", f"{entry.dist}: {entry.path}", shown, found))
    return out


def recorded_drift(
    target: Path, what: str, recorded: dict[str, str], jobs: int | None = None
) -> list[Drift]:
    """Files unpack wrote and recorded (rel -> sha256) that differ now."""
    rows = sorted(recorded.items())
    now = _digests([target / rel for rel, _ in rows], jobs)
    out = []
    for (rel, digest), found in zip(rows, now, strict=True):
        if found != digest:
            out.append(Drift(what, rel, digest, found))
    return out


def target_drift(
    target: Path,
    site_packages: Path | None = None,
    jobs: int | None = None,
    *,
    weights: bool = False,
    progress: ProgressSink | None = None,
) -> list[Drift]:
    """Every difference between TARGET and the bundle it was unpacked from, for the
    steps unpack finished there; `jobs` files are hashed at a time. With `weights`, the
    models' weight files against their pins too (every byte read)."""
    state, info = target_info(target)
    bundle = kept_bundle(target)
    venv = venv_dir(target, info)
    drift: list[Drift] = []
    # a venv whose own files changed is reported and its interpreter never started:
    # the installed set is not read, and site-packages is found on disk
    changed = venv_drift(venv, state) if state.is_done("venv") else []
    drift += changed
    if state.is_done("install") and not changed:
        drift += installed_drift(target, info, bundle, state)
    if state.is_done("patch"):
        interpreter = venv / "bin" / "python"
        if site_packages is None and changed:
            site_packages = next(iter(venv_site_dirs(venv)), None)
        elif site_packages is None and interpreter.exists():
            site_packages = site_packages_of(trusted_interpreter(target, venv, state=state))
        if site_packages is not None:
            recorded = dict(state.facts.get("patch", {}).get("files", {}))
            drift += patch_drift(site_packages, bundle, recorded, jobs)
    if state.is_done("workspace"):
        files = state.facts.get("workspace", {}).get("files", {})
        drift += recorded_drift(target, "workspace file", dict(files), jobs)
    if state.is_done("services"):
        units = state.facts.get("services", {}).get("rendered", {})
        drift += recorded_drift(target, "unit", dict(units), jobs)
    if state.is_done("models"):
        drift += model_drift(
            target,
            info,
            state.facts.get("models", {}),
            weights=weights,
            jobs=jobs,
            progress=progress,
        )
    return drift


def model_drift(
    target: Path,
    info: BundleInfo,
    recorded: Any,
    *,
    weights: bool = False,
    jobs: int | None = None,
    progress: ProgressSink | None = None,
) -> list[Drift]:
    """Each model where the one rule (repro.install.deploy.models.locate_model, with the
    --models unpack was given) finds it now, against where the models step found it
    (state.toml): moved, gone or changed (its small files, its weights' sizes and
    safetensors headers; with `weights` every pinned file's sha256, `jobs` files at a
    time, `progress` hearing the bytes). A model missing at unpack that is now in the
    place its unit names (the fix the models step printed) is not drift; found
    elsewhere, it is: the unit does not name that place."""
    facts = recorded if isinstance(recorded, dict) else {}
    models = facts.get("models_dir")
    models_dir = Path(models) if isinstance(models, str) else None
    found = facts.get("found", {}) if isinstance(facts.get("found"), dict) else {}
    status = facts.get("status", {}) if isinstance(facts.get("status"), dict) else {}
    if not status and not weights:
        return []  # a state.toml from before repro recorded where models were found
    out = []
    for ref in info.models:
        now = locate_model(
            ref, models_dir, target, verify_weights=weights, jobs=jobs, progress=progress
        )
        was_status = str(status.get(ref.name, "found" if ref.name in found else "missing"))
        if was_status == "found":
            was = str(found.get(ref.name, "?"))
            if now.status != "found" or now.path != was:
                out.append(Drift("model", ref.name, was, f"{now.status} ({now.detail})"))
            continue
        place = default_place(ref, models_dir, target)  # None: the Hugging Face cache
        expected = str(place) if place is not None else "the Hugging Face cache"
        elsewhere = place is not None and now.path != str(place)
        if now.found and (now.status != "found" or elsewhere):
            out.append(
                Drift(
                    "model", ref.name, f"{was_status} ({expected})", f"{now.status} ({now.detail})"
                )
            )
    return out
