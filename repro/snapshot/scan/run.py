"""`repro scan` as one call: find the environment, probe it, check every installed file
against RECORD, and diff the modified ones against their pristine originals."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path

from repro.snapshot.facts.environment import find_interpreter, probe_environment
from repro.snapshot.scan.compare import ScanReport, scan_environment
from repro.snapshot.scan.pristine import modified_file_diffs


@dataclass(frozen=True)
class ScanRequest:
    python: Path | None = None  # an interpreter (already resolved from --python)
    venv: Path | None = None  # a venv directory; neither: $VIRTUAL_ENV
    packages: Sequence[str] | None = None  # None: every distribution
    ignore: tuple[str, ...] = ()  # globs of paths to leave out
    jobs: int | None = None
    diffs: bool = False  # diff each modified file against its pristine original
    pristine: Path | None = None  # a wheel or tree holding the originals


@dataclass(frozen=True)
class ScanResult:
    python: Path
    report: ScanReport
    diffs: Mapping[str, str | None] | None  # path -> diff (None: no original); None: not asked

    def to_json(self) -> dict[str, object]:
        report = self.report
        document: dict[str, object] = {
            "python": str(self.python),
            "clean": report.clean,
            "dists_scanned": list(report.dists_scanned),
            "dists_skipped": dict(report.dists_skipped),
            "files_checked": report.files_checked,
            "bytes_checked": report.bytes_checked,
            "patched": [asdict(p) for p in report.patched],
            "unreadable": [asdict(u) for u in report.unreadable],
            "skipped_files": [asdict(f) for f in report.skipped_files],
            "ambiguous_added": list(report.ambiguous_added),
        }
        if self.diffs is not None:
            document["diffs"] = dict(self.diffs)
        return document


def scan_target(
    request: ScanRequest,
    *,
    hashing: AbstractContextManager[object] | None = None,
) -> ScanResult:
    """Scan the environment `request` names; `hashing` is entered while the installed
    files are hashed (a progress display)."""
    python = find_interpreter(None, request.python, venv=request.venv)
    facts = probe_environment(python, imports=False)
    with hashing if hashing is not None else contextlib.nullcontext():
        report = scan_environment(
            facts, packages=request.packages, ignore=request.ignore, jobs=request.jobs
        )
    diffs = modified_file_diffs(report, python, request.pristine) if request.diffs else None
    return ScanResult(python, report, diffs)
