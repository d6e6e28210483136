"""Apply a bundle's patch set to a target environment as one transaction.

Every target file is classified first (pristine, already patched, drifted,
conflict). Any conflict stops the run before a byte is written. Then the
patched Python files are syntax-checked with the *target* interpreter, the
originals are backed up under .repro/backup/, a journal is written, and each
file is replaced atomically. If anything fails midway, or a previous run was
killed, the journal restores every file to what it was.

One module, a little over 400 lines: the plan, the journal and the recovery are one
transaction and are read together.
"""

from __future__ import annotations

import json
import shutil
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import tomli_w
from packaging.utils import canonicalize_name

from repro import _toml
from repro.bundle.patchset import PatchEntry, PatchSet
from repro.diffapply import apply_unified_diff
from repro.errors import DiffApplyError, InstallError, PatchConflictError, ReproError
from repro.hashing import sha256_bytes, sha256_file
from repro.install.transaction.atomic import atomic_unlink, atomic_write, exclusive_lock
from repro.interpreter import run_target_script

Action = Literal["write", "delete", "skip"]
Writer = Callable[[Path, bytes, int], None]

JOURNAL = "patch-journal.toml"
APPLIED = "applied.toml"
LOCK = "patch.lock"
BACKUP = "backup"


@dataclass(frozen=True)
class Conflict:
    dist: str
    version: str
    path: str
    pristine_sha256: str | None
    patched_sha256: str | None
    found_sha256: str | None
    reason: str

    def describe(self) -> str:
        return (
            f"{self.dist} {self.version}: {self.path}: {self.reason} "
            f"(pristine {self.pristine_sha256 or '-'}, patched {self.patched_sha256 or '-'}, "
            f"found {self.found_sha256 or 'missing'})"
        )


@dataclass(frozen=True)
class PlannedChange:
    entry: PatchEntry
    target: Path
    action: Action
    content: bytes | None
    via: Literal["full", "diff", "none"]
    found_sha256: str | None


@dataclass(frozen=True)
class PatchResult:
    written: tuple[str, ...]
    deleted: tuple[str, ...]
    skipped: tuple[str, ...]
    via_diff: tuple[str, ...]
    recovered: bool

    @property
    def changed(self) -> bool:
        return bool(self.written or self.deleted)

    def to_json(self) -> dict[str, Any]:
        return {
            "written": list(self.written),
            "deleted": list(self.deleted),
            "skipped": list(self.skipped),
            "via_diff": list(self.via_diff),
            "recovered_interrupted_run": self.recovered,
        }


def installed_versions(site_packages: Path) -> dict[str, str]:
    """Canonical name -> version of every distribution in a site-packages directory."""
    versions: dict[str, str] = {}
    for dist in metadata.distributions(path=[str(site_packages)]):
        name = dist.metadata["Name"]
        if name:
            versions.setdefault(canonicalize_name(name), dist.version)
    return versions


def _target_path(site_packages: Path, entry: PatchEntry) -> Path:
    """The file a patch entry names, refusing anything that leaves site-packages."""
    root = site_packages.resolve()
    target = site_packages / entry.path
    parent = target.parent.resolve()
    if not parent.is_relative_to(root) or target.is_symlink():
        raise PatchConflictError(
            f"patch for {entry.dist}: {entry.path} resolves outside {site_packages}",
            hint="the bundle's patches.toml is not trustworthy; do not apply it",
        )
    return parent / target.name


def _current_hash(path: Path) -> str | None:
    if not path.exists():
        return None
    if not path.is_file():
        return "not-a-regular-file"
    return sha256_file(path)


class PatchContent:
    """Reads the full files and diffs of a bundle's patches/ directory."""

    def __init__(self, patches_dir: Path) -> None:
        self.root = patches_dir

    def full(self, entry: PatchEntry) -> bytes:
        member = entry.full_member
        if member is None:
            raise InstallError(f"{entry.path}: a deleted file has no full content")
        path = self.root / member
        data = path.read_bytes()
        if entry.patched_sha256 and sha256_bytes(data) != entry.patched_sha256:
            raise InstallError(f"{path}: content does not match its patched_sha256")
        return data

    def diff(self, entry: PatchEntry) -> str | None:
        member = entry.diff_member
        if member is None:
            return None
        return (self.root / member).read_text(encoding="utf-8")


def _classify(
    entry: PatchEntry,
    target: Path,
    content: PatchContent,
    versions: Mapping[str, str],
) -> PlannedChange | Conflict:
    found = _current_hash(target)

    def conflict(reason: str) -> Conflict:
        return Conflict(
            entry.dist,
            entry.version,
            entry.path,
            entry.pristine_sha256,
            entry.patched_sha256,
            found,
            reason,
        )

    installed = versions.get(canonicalize_name(entry.dist))
    if installed is None:
        return conflict("distribution is not installed")
    if installed != entry.version:
        return conflict(f"installed version is {installed}, the patch is for {entry.version}")
    if entry.kind == "deleted":
        if found is None:
            return PlannedChange(entry, target, "skip", None, "none", found)
        if found == entry.pristine_sha256:
            return PlannedChange(entry, target, "delete", None, "none", found)
        return conflict("file to delete differs from pristine")
    if found == entry.patched_sha256:
        return PlannedChange(entry, target, "skip", None, "none", found)
    if entry.kind == "added":
        if found is None:
            return PlannedChange(entry, target, "write", content.full(entry), "full", found)
        return conflict("file to add already exists with other content")
    if found == entry.pristine_sha256:
        return PlannedChange(entry, target, "write", content.full(entry), "full", found)
    if found is None:
        return conflict("file to modify is missing")
    diff = content.diff(entry)
    if diff is None:
        return conflict("file drifted from pristine and the bundle has no diff for it")
    try:
        patched = apply_unified_diff(target.read_text(encoding="utf-8"), diff)
    except (DiffApplyError, UnicodeDecodeError) as exc:
        return conflict(f"file drifted from pristine and its diff does not apply: {exc}")
    return PlannedChange(entry, target, "write", patched.encode("utf-8"), "diff", found)


def plan_patches(
    patchset: PatchSet, content: PatchContent, site_packages: Path
) -> list[PlannedChange]:
    versions = installed_versions(site_packages)
    planned: list[PlannedChange] = []
    conflicts: list[Conflict] = []
    for entry in patchset.entries:
        result = _classify(entry, _target_path(site_packages, entry), content, versions)
        if isinstance(result, Conflict):
            conflicts.append(result)
        else:
            planned.append(result)
    if conflicts:
        listing = "\n".join(f"  - {c.describe()}" for c in conflicts)
        raise PatchConflictError(
            f"{len(conflicts)} patch conflict(s) in {site_packages}; nothing was written:\n"
            f"{listing}",
            hint="resolve the listed files (reinstall the distribution or edit them), "
            "then run again",
        )
    return planned


def syntax_check(python: Path, changes: Sequence[PlannedChange], timeout: float = 120) -> None:
    """Compile every patched .py with the target interpreter; list every error."""
    sources = [c for c in changes if c.action == "write" and c.entry.path.endswith(".py")]
    if not sources:
        return
    with tempfile.TemporaryDirectory(prefix="repro-syntax-") as temp:
        items = []
        for index, change in enumerate(sources):
            path = Path(temp) / f"{index}.py"
            path.write_bytes(change.content or b"")
            items.append([change.entry.path, str(path)])
        result = run_target_script(
            python, "compile_check.py", timeout=timeout, input=json.dumps(items), error=InstallError
        )
    if result.returncode != 0:
        raise InstallError(f"{python}: syntax check failed to run: {result.stderr.strip()}")
    errors = json.loads(result.stdout)
    if errors:
        listing = "\n".join(f"  - {e['path']}:{e['line']}: {e['message']}" for e in errors)
        raise PatchConflictError(
            f"patched file(s) do not compile with {python}; nothing was written:\n{listing}"
        )


def _default_writer(path: Path, data: bytes, mode: int) -> None:
    atomic_write(path, data, mode=mode)


def _rel(site_packages: Path, path: Path) -> str:
    return path.relative_to(site_packages.resolve()).as_posix()


def _write_toml(path: Path, document: dict[str, Any]) -> None:
    atomic_write(path, tomli_w.dumps(document).encode())


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return _toml.loads(path.read_text(encoding="utf-8"))
    except (OSError, _toml.TOMLDecodeError) as exc:
        raise InstallError(f"{path}: unreadable patch state: {exc}") from exc


def _backup(state_dir: Path, site_packages: Path, change: PlannedChange) -> dict[str, Any]:
    """Keep the original beside the state, once: a later run never overwrites it."""
    rel = _rel(site_packages, change.target)
    record: dict[str, Any] = {"path": rel, "existed": change.target.exists()}
    if record["existed"]:
        backup = state_dir / BACKUP / rel
        mode = stat.S_IMODE(change.target.stat().st_mode)
        if not backup.exists():
            atomic_write(backup, change.target.read_bytes(), mode=mode)
        record["mode"] = mode
    return record


def _restore(state_dir: Path, site_packages: Path, records: Sequence[dict[str, Any]]) -> None:
    root = site_packages.resolve()
    for record in records:
        target = root / record["path"]
        if record["existed"]:
            backup = state_dir / BACKUP / record["path"]
            atomic_write(target, backup.read_bytes(), mode=int(record["mode"]))
        else:
            atomic_unlink(target)


def recover_interrupted(state_dir: Path, site_packages: Path) -> bool:
    """Roll back a run that was killed midway; True when there was one."""
    journal = state_dir / JOURNAL
    if not journal.exists():
        return False
    _restore(state_dir, site_packages, _read_toml(journal).get("files", []))
    atomic_unlink(journal)
    return True


def apply_patches(
    patchset: PatchSet,
    patches_dir: Path,
    site_packages: Path,
    *,
    python: Path,
    state_dir: Path,
    writer: Writer = _default_writer,
) -> PatchResult:
    """Apply every patch or none. `writer` is the file-writing step (tests inject faults)."""
    content = PatchContent(patches_dir)
    with exclusive_lock(state_dir / LOCK, what="patching"):
        recovered = recover_interrupted(state_dir, site_packages)
        changes = plan_patches(patchset, content, site_packages)
        syntax_check(python, changes)
        todo = [c for c in changes if c.action != "skip"]
        records = [_backup(state_dir, site_packages, c) for c in todo]
        _write_toml(state_dir / JOURNAL, {"files": records})
        try:
            for change in todo:
                if change.action == "delete":
                    atomic_unlink(change.target)
                else:
                    mode = 0o755 if change.entry.executable else 0o644
                    writer(change.target, change.content or b"", mode)
        except BaseException as exc:
            _restore(state_dir, site_packages, records)
            atomic_unlink(state_dir / JOURNAL)
            if isinstance(exc, ReproError | OSError):
                raise InstallError(
                    f"applying patches failed at {change.entry.path}: {exc}; "
                    "every file was restored"
                ) from exc
            raise
        _record_applied(state_dir, site_packages, todo, records)
        atomic_unlink(state_dir / JOURNAL)
    return PatchResult(
        written=tuple(c.entry.path for c in todo if c.action == "write"),
        deleted=tuple(c.entry.path for c in todo if c.action == "delete"),
        skipped=tuple(c.entry.path for c in changes if c.action == "skip"),
        via_diff=tuple(c.entry.path for c in todo if c.via == "diff"),
        recovered=recovered,
    )


def _record_applied(
    state_dir: Path,
    site_packages: Path,
    todo: Sequence[PlannedChange],
    records: Sequence[dict[str, Any]],
) -> None:
    path = state_dir / APPLIED
    existing = _read_toml(path).get("files", []) if path.exists() else []
    by_path = {item["path"]: item for item in existing}
    for change, record in zip(todo, records, strict=True):
        item = dict(by_path.get(record["path"], record))
        item["dist"] = change.entry.dist
        item["version"] = change.entry.version
        item["kind"] = change.entry.kind
        if change.content is not None:
            item["applied_sha256"] = sha256_bytes(change.content)
        else:
            item.pop("applied_sha256", None)
        by_path[record["path"]] = item
    _write_toml(path, {"files": [by_path[key] for key in sorted(by_path)]})


def unpatch(state_dir: Path, site_packages: Path, *, force: bool = False) -> list[str]:
    """Restore the originals of every applied patch; returns the paths restored (none
    when no patch is applied: never patched, or restored already)."""
    path = state_dir / APPLIED
    if not path.exists():
        return []
    with exclusive_lock(state_dir / LOCK, what="patching"):
        recover_interrupted(state_dir, site_packages)
        records = _read_toml(path).get("files", [])
        root = site_packages.resolve()
        changed = []
        for record in records:
            found = _current_hash(root / record["path"])
            if found != record.get("applied_sha256"):
                changed.append(f"  - {record['path']}: found {found or 'missing'}")
        if changed and not force:
            raise PatchConflictError(
                "file(s) changed since the patches were applied; nothing was restored:\n"
                + "\n".join(changed),
                hint="use --force to restore the originals anyway",
            )
        _restore(state_dir, site_packages, records)
        atomic_unlink(path)
        shutil.rmtree(state_dir / BACKUP, ignore_errors=True)
    return [record["path"] for record in records]
