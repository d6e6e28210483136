"""patches/patches.toml: the bundle's patch set.

Each entry names one file relative to the target's site-packages. The full
patched file is the source of truth; the diff against pristine is kept for
review and for targets that drifted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

import tomli_w

from repro import _toml
from repro.errors import BundleFormatError

PATCHSET_FORMAT = 1
PatchKind = Literal["modified", "added", "deleted"]
KINDS: tuple[PatchKind, ...] = ("modified", "added", "deleted")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DIST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_KEYS = {
    "dist",
    "version",
    "path",
    "kind",
    "pristine_sha256",
    "patched_sha256",
    "full",
    "diff",
    "executable",
}


@dataclass(frozen=True)
class PatchEntry:
    dist: str
    version: str
    path: str
    kind: PatchKind
    pristine_sha256: str | None
    patched_sha256: str | None
    executable: bool = False
    has_diff: bool = False

    @property
    def full_member(self) -> str | None:
        """Where the full patched file lies, relative to patches/."""
        return None if self.kind == "deleted" else f"full/{self.dist}/{self.path}"

    @property
    def diff_member(self) -> str | None:
        return f"diffs/{self.dist}/{self.path}.diff" if self.has_diff else None


@dataclass(frozen=True)
class PatchSet:
    entries: tuple[PatchEntry, ...]

    def by_dist(self) -> dict[str, list[PatchEntry]]:
        grouped: dict[str, list[PatchEntry]] = {}
        for entry in self.entries:
            grouped.setdefault(entry.dist, []).append(entry)
        return grouped


def check_relative_path(path: str, *, where: str) -> str:
    """A site-packages-relative path: '/'-separated, no '..', not absolute."""
    pure = PurePosixPath(path)
    if (
        not path
        or "\\" in path
        or "\0" in path
        or pure.is_absolute()
        or any(part in ("..", ".", "") for part in path.split("/"))
        or path.startswith("~")
    ):
        raise BundleFormatError(
            f"{where}: path {path!r} is not a plain path inside site-packages",
            hint="patch paths are relative to site-packages and may not contain '..'",
        )
    return path


def _str(table: dict[str, Any], key: str, where: str, *, optional: bool = False) -> str | None:
    value = table.get(key)
    if value is None:
        if optional:
            return None
        raise BundleFormatError(f"{where}: missing key {key!r}")
    if not isinstance(value, str):
        raise BundleFormatError(f"{where}: {key!r} must be a string, not {type(value).__name__}")
    return value


def _digest(table: dict[str, Any], key: str, where: str) -> str | None:
    value = _str(table, key, where, optional=True)
    if value is not None and not _SHA256.match(value):
        raise BundleFormatError(f"{where}: {key!r} is not a lowercase sha256 hex digest")
    return value


def _entry(table: object, where: str) -> PatchEntry:
    if not isinstance(table, dict):
        raise BundleFormatError(f"{where}: each [[files]] entry must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise BundleFormatError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}")
    dist = _str(table, "dist", where) or ""
    if not _DIST.match(dist):
        raise BundleFormatError(f"{where}: 'dist' {dist!r} is not a distribution name")
    kind = _str(table, "kind", where)
    if kind not in KINDS:
        raise BundleFormatError(f"{where}: 'kind' must be one of {', '.join(KINDS)}, not {kind!r}")
    pristine = _digest(table, "pristine_sha256", where)
    patched = _digest(table, "patched_sha256", where)
    if kind != "added" and pristine is None:
        raise BundleFormatError(f"{where}: a {kind} file needs 'pristine_sha256'")
    if kind != "deleted" and patched is None:
        raise BundleFormatError(f"{where}: a {kind} file needs 'patched_sha256'")
    executable = table.get("executable", False)
    has_diff = table.get("diff") is not None
    if not isinstance(executable, bool):
        raise BundleFormatError(f"{where}: 'executable' must be true or false")
    return PatchEntry(
        dist=dist,
        version=_str(table, "version", where) or "",
        path=check_relative_path(_str(table, "path", where) or "", where=where),
        kind=kind,
        pristine_sha256=pristine,
        patched_sha256=patched,
        executable=executable,
        has_diff=has_diff,
    )


def load_patchset(data: bytes, *, source: str) -> PatchSet:
    try:
        document = _toml.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, _toml.TOMLDecodeError) as exc:
        raise BundleFormatError(f"{source}: not valid TOML: {exc}") from exc
    version = document.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise BundleFormatError(f"{source}: 'format_version' must be an integer")
    if version > PATCHSET_FORMAT:
        raise BundleFormatError(
            f"{source}: patch set format {version} is newer than this repro supports "
            f"({PATCHSET_FORMAT})",
            hint="upgrade repro",
        )
    unknown = sorted(set(document) - {"format_version", "files"})
    if unknown:
        raise BundleFormatError(f"{source}: unknown key(s) {', '.join(map(repr, unknown))}")
    files = document.get("files", [])
    if not isinstance(files, list):
        raise BundleFormatError(f"{source}: 'files' must be an array of tables")
    entries = tuple(_entry(table, f"{source}: files[{i}]") for i, table in enumerate(files))
    seen: set[str] = set()
    for entry in entries:
        if entry.path in seen:
            raise BundleFormatError(f"{source}: {entry.path!r} is listed twice")
        seen.add(entry.path)
    return PatchSet(entries)


def dump_patchset(entries: Sequence[PatchEntry]) -> bytes:
    files: list[dict[str, Any]] = []
    for entry in sorted(entries, key=lambda e: (e.dist, e.path)):
        table: dict[str, Any] = {
            "dist": entry.dist,
            "version": entry.version,
            "path": entry.path,
            "kind": entry.kind,
        }
        if entry.pristine_sha256:
            table["pristine_sha256"] = entry.pristine_sha256
        if entry.patched_sha256:
            table["patched_sha256"] = entry.patched_sha256
        if entry.full_member:
            table["full"] = entry.full_member
        if entry.diff_member:
            table["diff"] = entry.diff_member
        if entry.executable:
            table["executable"] = True
        files.append(table)
    return tomli_w.dumps({"format_version": PATCHSET_FORMAT, "files": files}).encode()
