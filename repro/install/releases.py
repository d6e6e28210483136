"""TARGET/.repro/releases/<version>/: what an upgrade replaced, kept to go back.

A release is made before an upgrade changes anything and holds what going back needs:
`paths.json` (every path under the target, `.repro/` aside, as it was), `tree/` (each
file the upgrade replaces or removes, moved or copied there at its relative path
before it is touched: the removed distributions' installed files, the patched files
taken back, workspace files, units), `state/` (state.toml, applied.toml, the patch
backups and the report, copied) and `bundle/` (the kept bundle it replaced, moved).
`release.toml` says which bundle it returns to (`to`, the version it holds) and from
which (`from`), its sequence number, and `ready` once it is complete enough to undo.

Undoing a release (`undo`) removes every path not in `paths.json`, moves `tree/`'s
files back, restores `state/` and `bundle/`, and drops the release. Every part of it
can be cut short and run again, so an upgrade killed anywhere is undone by the next
run (which then upgrades again), and a rollback killed anywhere is finished by running
it again: the journal (`upgrade-journal.toml`, `rollback-journal.toml` in .repro/)
names the release it works on.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from repro import _toml
from repro.errors import InstallError, UsageError
from repro.install.state import STATE_DIR, STATE_FILE, BundleIdentity
from repro.install.transaction.atomic import atomic_unlink, atomic_write, fsync_directory

RELEASES = "releases"
UPGRADE_JOURNAL = "upgrade-journal.toml"
ROLLBACK_JOURNAL = "rollback-journal.toml"
RELEASE_TOML = "release.toml"
PATHS = "paths.json"
TREE = "tree"
SAVED = "state"
BUNDLE = "bundle"
# what state/ keeps of .repro/ (the patch step's files: repro.install.transaction.patching)
STATE_FILES = (STATE_FILE, "applied.toml", "unpack-report.json")
STATE_DIRS = ("backup",)
DEFAULT_KEEP = 2


def _identity(table: dict[str, Any]) -> BundleIdentity:
    return BundleIdentity(str(table["name"]), str(table["version"]), str(table["manifest_sha256"]))


def _table(identity: BundleIdentity) -> dict[str, str]:
    return {
        "name": identity.name,
        "version": identity.version,
        "manifest_sha256": identity.manifest_sha256,
    }


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return _toml.loads(path.read_text(encoding="utf-8"))
    except (OSError, _toml.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InstallError(f"{path}: unreadable: {exc}") from exc


def _write_toml(path: Path, document: dict[str, Any]) -> None:
    atomic_write(path, tomli_w.dumps(document).encode())


@dataclass(frozen=True)
class Release:
    path: Path
    to: BundleIdentity  # what undoing it returns the target to
    came: BundleIdentity  # the bundle the upgrade moved to
    sequence: int
    ready: bool
    complete: bool

    @property
    def version(self) -> str:
        return self.to.version

    def describe(self) -> str:
        return f"{self.to.name} {self.to.version} (replaced by {self.came.version})"


def releases_dir(target: Path) -> Path:
    return target / STATE_DIR / RELEASES


def load_release(path: Path) -> Release | None:
    toml = path / RELEASE_TOML
    if not toml.is_file():
        return None
    doc = _read_toml(toml)
    try:
        return Release(
            path,
            _identity(doc["to"]),
            _identity(doc["from"]),
            int(doc["sequence"]),
            bool(doc.get("ready", False)),
            bool(doc.get("complete", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InstallError(f"{toml}: not a release: {exc}") from exc


def list_releases(target: Path) -> list[Release]:
    """The complete releases, newest first."""
    root = releases_dir(target)
    found = []
    if root.is_dir():
        for child in root.iterdir():
            if child.is_dir() and not child.name.startswith("."):
                release = load_release(child)
                if release is not None and release.complete:
                    found.append(release)
    return sorted(found, key=lambda r: r.sequence, reverse=True)


def _all_paths(target: Path) -> tuple[list[str], list[str]]:
    """Every file (or link) and every directory under the target, .repro/ aside."""
    files: list[str] = []
    dirs: list[str] = []
    for directory, subdirs, names in os.walk(target):
        rel_dir = Path(directory).relative_to(target)
        if rel_dir == Path("."):
            subdirs[:] = [d for d in subdirs if d != STATE_DIR]
        for d in subdirs:
            path = Path(directory) / d
            (files if path.is_symlink() else dirs).append((rel_dir / d).as_posix())
        files += [(rel_dir / n).as_posix() for n in names]
    return files, dirs


class ReleaseWriter:
    """The release an upgrade is making: what it replaces goes in before it is touched."""

    def __init__(self, path: Path, target: Path) -> None:
        self.path = path
        self.target = target
        self.tree = path / TREE

    def keep(self, rel: str, *, move: bool) -> None:
        """`rel` (under the target) as it is now, unless the release has it already (the
        first copy is what the target held before the upgrade)."""
        source = self.target / rel
        kept = self.tree / rel
        if not (source.exists() or source.is_symlink()):
            return
        if kept.exists() or kept.is_symlink():
            if move:
                source.unlink()
            return
        kept.parent.mkdir(parents=True, exist_ok=True)
        if move:
            os.rename(source, kept)
        else:
            temp = kept.with_name(f".{kept.name}.{secrets.token_hex(4)}.partial")
            shutil.copy2(source, temp, follow_symlinks=False)
            os.rename(temp, kept)

    def remove_dir_if_empty(self, rel: str, stop: str) -> None:
        """`rel` and its parents up to `stop` (exclusive), each once nothing but a bytecode
        cache is left in it (the cache goes into the release too)."""
        path = self.target / rel
        top = self.target / stop
        while path != top and path.is_relative_to(top) and path.is_dir():
            left = list(path.iterdir())
            if any(p.name != "__pycache__" for p in left):
                return
            for cache in left:
                for item in sorted(cache.rglob("*"), reverse=True):
                    if item.is_file() or item.is_symlink():
                        self.keep(item.relative_to(self.target).as_posix(), move=True)
                shutil.rmtree(cache, ignore_errors=True)
            path.rmdir()
            path = path.parent


def begin(target: Path, *, to: BundleIdentity, came: BundleIdentity, keep: int) -> ReleaseWriter:
    """Make the release of `to` (what the target holds now), under the journal; nothing of
    the target is changed by it. `keep` bounds the releases (the older dropped after)."""
    state_dir = target / STATE_DIR
    root = releases_dir(target)
    root.mkdir(parents=True, exist_ok=True)
    path = root / to.version
    if path.exists():  # an older release of the same version: this one replaces it
        _drop(path)
    sequence = 1 + max((r.sequence for r in list_releases(target)), default=0)
    _write_toml(
        state_dir / UPGRADE_JOURNAL,
        {"release": to.version, "from": _table(to), "to": _table(came)},
    )
    path.mkdir()
    saved = path / SAVED
    saved.mkdir()
    for name in STATE_FILES:
        if (state_dir / name).is_file():
            shutil.copy2(state_dir / name, saved / name)
    for name in STATE_DIRS:
        if (state_dir / name).is_dir():
            shutil.copytree(state_dir / name, saved / name, symlinks=True)
    files, dirs = _all_paths(target)
    atomic_write(path / PATHS, json.dumps({"files": files, "dirs": dirs}).encode())
    _write_toml(
        path / RELEASE_TOML,
        {
            "to": _table(to),
            "from": _table(came),
            "sequence": sequence,
            "keep": keep,
            "ready": True,
            "complete": False,
        },
    )
    fsync_directory(path)
    return ReleaseWriter(path, target)


def finish(target: Path, writer: ReleaseWriter, *, keep: int) -> list[str]:
    """The upgrade is done: its release is complete, the journal goes, and the oldest
    releases beyond `keep` are dropped (their versions returned)."""
    toml = writer.path / RELEASE_TOML
    doc = _read_toml(toml)
    doc["complete"] = True
    _write_toml(toml, doc)
    atomic_unlink(target / STATE_DIR / UPGRADE_JOURNAL)
    dropped = []
    for release in list_releases(target)[keep:]:
        _drop(release.path)
        dropped.append(release.version)
    return dropped


def _drop(path: Path) -> None:
    """A release removed: renamed away first, so it is either whole or gone."""
    away = path.with_name(f".{path.name}.dropping-{secrets.token_hex(4)}")
    os.rename(path, away)
    shutil.rmtree(away, ignore_errors=True)


def drop_leftovers(target: Path) -> None:
    root = releases_dir(target)
    if root.is_dir():
        for child in root.glob(".*.dropping-*"):
            shutil.rmtree(child, ignore_errors=True)


def undo(target: Path, release: Path) -> None:
    """Return the target to what it was when `release` was made; idempotent, so a run
    cut short is finished by running it again."""
    state_dir = target / STATE_DIR
    meta = load_release(release)
    if meta is None or not meta.ready or not (release / PATHS).is_file():
        # made only up to its bookkeeping: nothing of the target was changed yet
        if release.exists():
            _drop(release)
        return
    listed = json.loads((release / PATHS).read_text(encoding="utf-8"))
    files, dirs = set(listed["files"]), set(listed["dirs"])
    now_files, now_dirs = _all_paths(target)
    for rel in now_files:
        if rel not in files:
            (target / rel).unlink(missing_ok=True)
    for rel in sorted(now_dirs, key=lambda r: r.count("/"), reverse=True):
        if rel not in dirs:
            shutil.rmtree(target / rel, ignore_errors=True)
    for rel in sorted(dirs, key=lambda r: r.count("/")):
        (target / rel).mkdir(exist_ok=True)
    tree = release / TREE
    if tree.is_dir():
        for directory, _subdirs, names in os.walk(tree):
            for name in names:
                kept = Path(directory) / name
                if name.endswith(".partial") and name.startswith("."):
                    kept.unlink()
                    continue
                back = target / kept.relative_to(tree)
                back.parent.mkdir(parents=True, exist_ok=True)
                os.replace(kept, back)
    saved = release / SAVED
    for name in STATE_FILES:
        if (saved / name).is_file():
            atomic_write(state_dir / name, (saved / name).read_bytes())
        else:
            atomic_unlink(state_dir / name)
    for name in STATE_DIRS:
        shutil.rmtree(state_dir / name, ignore_errors=True)
        if (saved / name).is_dir():
            shutil.copytree(saved / name, state_dir / name, symlinks=True)
    if (release / BUNDLE).is_dir():
        kept_bundle = state_dir / BUNDLE
        if kept_bundle.exists():
            away = state_dir / f".{BUNDLE}.{secrets.token_hex(4)}"
            os.rename(kept_bundle, away)
            shutil.rmtree(away, ignore_errors=True)
        os.rename(release / BUNDLE, kept_bundle)
    for leftover in state_dir.glob(f".{BUNDLE}.*"):
        shutil.rmtree(leftover, ignore_errors=True)
    _drop(release)


def interrupted_upgrade(target: Path) -> Path | None:
    """The release of an upgrade that did not finish (killed, or failed), if any."""
    journal = target / STATE_DIR / UPGRADE_JOURNAL
    if not journal.is_file():
        return None
    return releases_dir(target) / str(_read_toml(journal)["release"])


def undo_interrupted(target: Path) -> bool:
    """An upgrade cut short is undone (the next run does it again); True when there was one."""
    release = interrupted_upgrade(target)
    if release is None:
        return False
    undo(target, release)
    atomic_unlink(target / STATE_DIR / UPGRADE_JOURNAL)
    return True


@dataclass(frozen=True)
class RollbackPlan:
    releases: tuple[Release, ...]  # undone in this order (newest first)

    @property
    def version(self) -> str:
        return self.releases[-1].version


def plan_rollback(target: Path, current: BundleIdentity, version: str | None) -> RollbackPlan:
    """The releases to undo, newest first, to reach `version` (default: the previous)."""
    releases = list_releases(target)
    if not releases:
        raise UsageError(
            f"{target}: no release to go back to (it was not upgraded in place, or "
            "--keep-releases 0 kept none)",
        )
    if releases[0].came != current:
        raise UsageError(
            f"{target}: its newest release ({releases[0].describe()}) does not lead to what "
            f"it holds now ({current.name} {current.version}); refusing to roll back",
        )
    if version is None:
        return RollbackPlan((releases[0],))
    chain: list[Release] = []
    for release in releases:
        if chain and chain[-1].to != release.came:
            break
        chain.append(release)
        if release.version == version:
            return RollbackPlan(tuple(chain))
    kept = ", ".join(r.version for r in releases)
    raise UsageError(f"{target}: no release {version} to go back to (kept: {kept})")


def start_rollback(target: Path, plan: RollbackPlan) -> None:
    _write_toml(
        target / STATE_DIR / ROLLBACK_JOURNAL,
        {"releases": [r.path.name for r in plan.releases]},
    )


def pending_rollback(target: Path) -> list[str] | None:
    journal = target / STATE_DIR / ROLLBACK_JOURNAL
    if not journal.is_file():
        return None
    return [str(name) for name in _read_toml(journal).get("releases", [])]


def run_rollback(target: Path, names: Iterable[str]) -> None:
    """Undo each named release in turn (a release already undone is gone: skipped), then
    the journal goes."""
    for name in names:
        path = releases_dir(target) / name
        if path.exists():
            undo(target, path)
    with contextlib.suppress(OSError):  # the last release undone: none kept, as unpacked
        releases_dir(target).rmdir()
    atomic_unlink(target / STATE_DIR / ROLLBACK_JOURNAL)
