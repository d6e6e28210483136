"""Turn what `scan` found into the bundle's patch set: full files, diffs, entries.

Only files inside site-packages travel as patches; a changed script under
bin/ is reported, not carried (the installer regenerates it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.bundle.patchset import PatchEntry
from repro.hashing import sha256_file
from repro.snapshot.scan.compare import PatchedFile, ScanReport
from repro.snapshot.scan.keptpatches import WorkspacePatch
from repro.snapshot.scan.pristine import PristineCache, make_diff, pristine_file


@dataclass(frozen=True)
class CollectedPatch:
    entry: PatchEntry
    full: Path | bytes | None  # where the patched content comes from
    diff: str | None
    pristine_known: bool


def _is_inside(path: str) -> bool:
    return not path.startswith("../") and "/../" not in path


def collect_patches(
    scan: ScanReport,
    *,
    pristine: Path | None,
    cache: PristineCache | None,
    workspace: Sequence[WorkspacePatch] = (),
) -> tuple[list[CollectedPatch], list[str], dict[tuple[str, str], bytes]]:
    """The patch set, warnings, and the pristine bytes found, keyed by (dist, path)."""
    collected: list[CollectedPatch] = []
    warnings: list[str] = []
    found_pristine: dict[tuple[str, str], bytes] = {}
    for item in workspace:
        entry = PatchEntry(
            item.file.dist,
            item.file.version,
            item.file.path,
            item.file.kind,
            item.file.pristine_sha256,
            item.file.patched_sha256,
            has_diff=item.diff is not None,
        )
        collected.append(CollectedPatch(entry, item.content, item.diff, item.diff is not None))
    taken = {(c.entry.dist, c.entry.path) for c in collected}
    for found in scan.patched:
        if (found.dist, found.path) in taken:
            continue
        if not _is_inside(found.path):
            warnings.append(
                f"{found.dist} {found.version}: {found.path} is outside site-packages "
                f"({found.kind}); not carried as a patch"
            )
            continue
        site = Path(scan.site_dirs.get(found.dist, ""))
        collected.append(_collect_one(found, site, pristine, cache, warnings, found_pristine))
    collected.sort(key=lambda c: (c.entry.dist, c.entry.path))
    return collected, warnings, found_pristine


def _collect_one(
    found: PatchedFile,
    site: Path,
    pristine: Path | None,
    cache: PristineCache | None,
    warnings: list[str],
    found_pristine: dict[tuple[str, str], bytes],
) -> CollectedPatch:
    target = site / found.path
    executable = target.exists() and bool(target.stat().st_mode & 0o111)
    original: bytes | None = None
    if found.kind in ("modified", "deleted"):
        original = pristine_file(
            found.dist,
            found.version,
            found.path,
            expected_sha256=found.pristine_sha256,
            pristine=pristine,
            cache=cache,
        )
        if original is None:
            warnings.append(
                f"{found.dist} {found.version}: no pristine copy of {found.path}; the bundle "
                "carries the full patched file but no diff (pass --pristine WHEEL to add one)"
            )
        else:
            found_pristine[(found.dist, found.path)] = original
    diff: str | None = None
    if found.kind == "modified" and original is not None:
        diff = make_diff(original, target.read_bytes(), found.path)
    patched_sha = found.patched_sha256
    if found.kind != "deleted" and patched_sha is None:
        patched_sha = sha256_file(target)
    entry = PatchEntry(
        found.dist,
        found.version,
        found.path,
        found.kind,
        found.pristine_sha256,
        patched_sha if found.kind != "deleted" else None,
        executable=executable,
        has_diff=diff is not None and not diff.startswith("Binary files"),
    )
    full = None if found.kind == "deleted" else target
    return CollectedPatch(entry, full, diff if entry.has_diff else None, original is not None)
