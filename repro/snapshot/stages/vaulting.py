"""Stages `select` and `plan`: which wheels the bundle carries in env/wheels, and how
each is made (a wheel file at hand, a download, or rebuilt from the installed files).

No wheel is read here for its sha256: the writing takes it as each wheel passes into
the tar, in every mode, and the lock files that list the digests are rendered from those
once the wheels are written (stage `locks`; they are trailing members). Only a delta
hashes its wheels here, in a pass of their own: whether it carries a wheel at all
depends on its digest (stage `delta`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from repro.archive.memberfill import not_as_recorded
from repro.bundle import layout
from repro.bundle.lock import IndexConfig
from repro.hashing import hash_files
from repro.snapshot.facts.indexcheck import IndexReport, check_index
from repro.snapshot.facts.installed import InstalledDist
from repro.snapshot.scan.compare import ScanReport
from repro.snapshot.stages.options import Progress
from repro.snapshot.stages.output import Target
from repro.snapshot.stages.probe import Environment, Start
from repro.snapshot.vault.build import (
    PlannedWheel,
    VaultReport,
    VaultSelection,
    hash_vault,
    plan_vault,
    select_vault,
)
from repro.snapshot.write.bundle import Streamed
from repro.wheel.rebuild import CarryPatched

if TYPE_CHECKING:
    from packaging.tags import Tag


@dataclass(frozen=True)
class Selected:
    selection: VaultSelection
    tags: tuple[Tag, ...]  # the target's
    work_dir: Path  # downloads and wheels built from source
    # the files the indexes serve for the pins pylock.toml lists by URL (a job)
    index_files: Future[IndexReport | None]


@dataclass(frozen=True)
class Vaulted:
    entries: tuple[PlannedWheel, ...]
    # its wheels' sha256 where taken ahead (`hashed`, a delta); else "": the writing takes
    # them, and the lock files are rendered from those (`Locks`)
    report: VaultReport
    hashed: bool
    warnings: tuple[str, ...]

    def members(self) -> dict[str, Streamed]:
        """env/wheels/<file>: each wheel, streamed into the bundle from its plan or file."""
        return {
            layout.wheel(wheel.filename): Streamed(
                entry.plan.zip if entry.plan is not None else None,
                entry.size if entry.plan is None else entry.plan.size,
                wheel.sha256 if self.hashed else None,
                entry.path,
            )
            for entry, wheel in zip(self.entries, self.report.wheels, strict=True)
        }


def select(start: Start, env: Environment, temp: Path, background: Executor) -> Selected:
    """Decide where each vaulted wheel comes from; start the look-up of the index files."""
    options = start.options
    work_dir = temp / "wheels"
    tags = env.tags.result()
    selection = select_vault(
        env.dists,
        mode=options.wheels,
        work_dir=work_dir,
        indexes=indexes_list(env.indexes),
        check_index=options.check_index,
        python=start.python,
        tags=tags,
        find_links=_local_find_links(env.indexes),
        download=options.download,
    )
    # the index files pylock.toml lists, looked up while the files are hashed
    index_files = background.submit(
        _index_files, selection, env.dists, indexes_list(env.indexes), tags, options.download
    )
    return Selected(selection, tuple(tags), work_dir, index_files)


def plan(
    start: Start,
    env: Environment,
    selected: Selected,
    scan: ScanReport,
    carriers: Mapping[str, CarryPatched],
    target: Target,
    say: Progress,
) -> Vaulted:
    """Plan every wheel (a rebuilt one from the scan's results, which it consumes) and
    check the files whose sha256 the scan left to the writing where no wheel writes
    them; for a delta, take the wheels' sha256."""
    options = start.options
    say(f"planning the wheel vault (--wheels {options.wheels})")
    scheme = env.scheme.result() if env.scheme is not None else None
    vault_plan = plan_vault(
        selected.selection,
        work_dir=selected.work_dir,
        python=start.python,
        tags=selected.tags,
        scheme=scheme,
        pristine=carriers,
        jobs=options.jobs,
        digests=scan.digests,
        consume=True,
    )
    _check_deferred_not_written(scan, vault_plan.entries, jobs=options.jobs)
    # The wheels' sha256 are taken on their way into the tar, and the lock files that
    # list them follow the wheels; a delta needs them first, to leave out the wheels
    # its base holds.
    hashed = target.delta and bool(vault_plan.entries)
    digests = [""] * len(vault_plan.entries)
    if hashed:
        say(f"hashing {len(vault_plan.entries)} vault wheel(s)")
        digests = hash_vault(vault_plan.entries, jobs=options.jobs)
    report = VaultReport(
        [e.wheel(d) for e, d in zip(vault_plan.entries, digests, strict=True)],
        vault_plan.warnings,
        vault_plan.index,
    )
    warnings = list(report.warnings)
    for dist_name, carrier in sorted(carriers.items()):
        warnings += [
            f"vault wheel of {dist_name} carries the patched {path}: no pristine copy "
            "at hand (pass --pristine, or pack where the original wheel can be downloaded)"
            for path in carrier.carried
        ]
    return Vaulted(tuple(vault_plan.entries), report, hashed, tuple(warnings))


def indexes_list(indexes: IndexConfig) -> list[str]:
    urls = [indexes.index_url or "https://pypi.org/simple"]
    return urls + list(indexes.extra_index_urls)


def _local_find_links(indexes: IndexConfig) -> list[Path]:
    """Local wheel directories the source installs from: original wheels for the vault."""
    found = []
    for item in (*indexes.find_links, *indexes.local):
        path = Path(item.removeprefix("file://")) if item.startswith(("/", "file://")) else None
        if path is not None and path.is_dir() and not (path / "index.html").exists():
            found.append(path)
    return found


def _index_files(
    selection: VaultSelection,
    dists: Sequence[InstalledDist],
    indexes: Sequence[str],
    tags: Sequence[Tag],
    download: bool,
) -> IndexReport | None:
    """The files the indexes serve for the pins pylock.toml lists by URL: the report of
    --check-index, else (unless offline) a look-up of each pin the vault does not hold
    and no reason keeps off the indexes. A wheel the target takes or an sdist will do."""
    if selection.index is not None or not download:
        return selection.index
    vaulted = {d.canonical_name for d in selection.selected}
    pins = [
        (d.name, d.version)
        for d in dists
        if d.canonical_name not in vaulted and not selection.reasons[d.canonical_name]
    ]
    return check_index(pins, indexes, tags=tags, sdists=True) if pins else None


def _check_deferred_not_written(
    scan: ScanReport, entries: Sequence[PlannedWheel], *, jobs: int | None
) -> None:
    """The files the scan left to the writing but no rebuilt wheel writes (a wheel taken
    from elsewhere): hashed here. Raises NotAsRecorded for one that differs."""
    if not scan.deferred:
        return
    written = {
        os.path.normpath(member.source)
        for entry in entries
        if entry.plan is not None
        for member in entry.plan.zip.members
        if member.sha256_pending and member.source is not None
    }
    # a result the planning took is a member that verifies the file: written from it and
    # checked in that read, or a script read whole and checked when it was planned
    rest = sorted(
        path
        for path in scan.deferred
        if path in scan.digests and os.path.normpath(path) not in written
    )
    for path, result in zip(rest, hash_files([Path(p) for p in rest], jobs=jobs), strict=True):
        if result.digest != scan.digests[path].digest:
            raise not_as_recorded(path)
