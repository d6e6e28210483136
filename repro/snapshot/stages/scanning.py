"""Stages `scan` and `patches`: installed files against RECORD, through the scan cache,
then the hand patches found, with their pristine files and diffs.

The scan cache is this module's: loaded (unless --rehash) and released by `scan`,
handed what the scan read by `patches`, and committed by the pack only once the bundle
is written and the deferred digests checked (`Scanned.cache.commit()`); a pack that
fails discards it (`scan` registers that on the pack's exit stack).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from repro.bundle import layout
from repro.bundle.environment import EnvironmentFacts
from repro.snapshot.scan.cache import ScanCache
from repro.snapshot.scan.compare import ScanReport, scan_environment
from repro.snapshot.scan.keptpatches import load_workspace_patches
from repro.snapshot.scan.patches import CollectedPatch, collect_patches
from repro.snapshot.scan.pristine import PristineCache, default_pip_cache
from repro.snapshot.stages.options import Progress
from repro.snapshot.stages.output import Target
from repro.snapshot.stages.probe import Start
from repro.snapshot.vault.build import VaultSelection
from repro.snapshot.workspace.files import MAX_SCANNED_BYTES, token_in_code
from repro.wheel.rebuild import CarryPatched

# Files of vaulted distributions this large are read by the scan for their CRC-32 only:
# their sha256 is checked against RECORD as they are written into the vault wheels.
DEFER_SHA_FROM = 64 << 10


@dataclass(frozen=True)
class Scanned:
    report: ScanReport
    cache: ScanCache  # staged by `patches`, committed once the bundle is written


@dataclass(frozen=True)
class Patched:
    patches: tuple[CollectedPatch, ...]
    # per vaulted distribution with patched files: the bytes a clean wheel must hold
    carriers: Mapping[str, CarryPatched]
    warnings: tuple[str, ...]


def scan(
    start: Start,
    facts: EnvironmentFacts,
    selection: VaultSelection,
    target: Target,
    *,
    defer: bool,
    stack: contextlib.ExitStack,
    say: Progress,
) -> Scanned:
    """Hash the installed files (those the scan cache knows unchanged are taken from it);
    with `defer`, the sha256 of large files of rebuilt wheels is left to the writing."""
    options, config = start.options, start.config
    # --rehash: every file read; what is read is still kept for the next pack
    known = ScanCache(start.cache_dir / "scan", facts.python.prefix, load=not options.rehash)
    stack.callback(known.discard)  # a staged cache not committed: this pack failed
    say(
        "scanning installed files against RECORD"
        + (f" ({len(known)} files in the scan cache)" if len(known) else "")
    )
    report = scan_environment(
        facts,
        packages=config.patches.packages or None,
        ignore=config.patches.ignore,
        jobs=options.jobs,
        crc_for=selection.rebuilt,
        known=known,
        defer_sha_from=DEFER_SHA_FROM if defer and target.can_leave_holes else None,
    )
    if not options.rehash:
        say(f"  {known.hits} of {report.files_checked} files unchanged since the last pack")
    known.release()
    return Scanned(report, known)


def patches(start: Start, facts: EnvironmentFacts, scanned: Scanned, temp: Path) -> Patched:
    """The patches the scan found (and the workspace's patches/), with pristine files
    from --pristine, the pip cache or a download; stages the scan's results for the cache."""
    options, config = start.options, start.config
    report = scanned.report
    workspace = []
    if config.patches.workspace is not None:
        workspace = load_workspace_patches(
            config.patches.workspace.dir, config.patches.workspace.map, facts=facts
        )
    cache = PristineCache(
        start.python, temp / "pristine", pip_cache=default_pip_cache(), download=options.download
    )
    found, warnings, found_pristine = collect_patches(
        report,
        pristine=options.pristine or config.patches.pristine,
        cache=cache,
        workspace=workspace,
    )
    warnings += scan_warnings(report)
    warnings += _patch_secret_warnings(found, start.secret_values)
    carriers = _vault_pristine(report, found_pristine)
    # What this scan read is staged for the cache now (put in place once the bundle is
    # written and the deferred digests checked), so the planning that follows can take
    # each file's result as it plans the member that replaces it: a file is held once.
    scanned.cache.stage(report.digests.values())
    return Patched(tuple(found), carriers, tuple(warnings))


def scan_warnings(scan: ScanReport) -> list[str]:
    """What the scan could not check or did not take, one warning each: a distribution
    without RECORD (its hand patches cannot be found, so none travels), a file left
    unread (a link out of the venv, a FIFO), a file that could not be read."""
    warnings = [
        f"{name}: {why}; its files cannot be checked for patches, and none is carried"
        for name, why in sorted(scan.dists_skipped.items())
    ]
    warnings += [f.describe() for f in scan.skipped_files]
    warnings += [
        f"{u.dist}: {u.path}: cannot be read ({u.error}); not checked for patches"
        for u in scan.unreadable
    ]
    return warnings


def _vault_pristine(
    scan: ScanReport, found_pristine: dict[tuple[str, str], bytes]
) -> dict[str, CarryPatched]:
    """For vaulted distributions with patched files: the bytes a clean wheel must hold.

    Where no pristine copy exists (an air-gapped source with an empty pip cache),
    the wheel is built from the patched bytes instead (CarryPatched): the target
    then installs the patched file directly and the patch step finds it applied.
    """
    by_dist: dict[str, dict[str, bytes]] = {}
    for item in scan.patched:
        table = by_dist.setdefault(canonicalize_name(item.dist), {})
        content = found_pristine.get((item.dist, item.path))
        if content is not None:
            table[item.path] = content
    return {name: CarryPatched(table.get) for name, table in by_dist.items()}


def _patch_secret_warnings(
    patches: Sequence[CollectedPatch], known_values: Sequence[str]
) -> list[str]:
    """A warning for each patched file (full or diff) that holds what looks like a
    credential. The file is still carried: a patch is code, and repro does not edit it."""
    warnings = []
    for patch in patches:
        full = patch.full
        if isinstance(full, Path):
            try:
                with full.open("rb") as stream:
                    full = stream.read(MAX_SCANNED_BYTES)
            except OSError:
                full = None  # the writing reports an unreadable file
        why = None
        for data in (full, patch.diff.encode() if patch.diff else None):
            if why is None and data:
                why = token_in_code(data, known_values)
        if why is not None:
            entry = patch.entry
            warnings.append(
                f"{layout.full_patch(entry.dist, entry.path)}: the patched file holds {why}; "
                "it is carried as it is (a patch is code, repro does not edit it): take "
                "the credential out of the file and pack again"
            )
    return warnings
