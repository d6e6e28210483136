"""Tests of repro.snapshot.scan.patches: the scan's findings into the bundle's patch set."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from repro.bundle.patchset import PatchKind
from repro.diffapply import apply_unified_diff
from repro.snapshot.scan.compare import PatchedFile, ScanReport
from repro.snapshot.scan.keptpatches import WorkspacePatch
from repro.snapshot.scan.patches import collect_patches

ORIGINAL = b"def f():\n    return 1\n\n\nVALUE = 'a'\n"
PATCHED = b"def f():\n    return 2\n\n\nVALUE = 'a'\n# by hand\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _found(
    path: str, kind: PatchKind, pristine: bytes | None, patched: bytes | None
) -> PatchedFile:
    return PatchedFile(
        dist="demo",
        version="1.0",
        path=path,
        kind=kind,
        pristine_sha256=_sha(pristine) if pristine is not None else None,
        patched_sha256=_sha(patched) if patched is not None else None,
        size=len(patched or b""),
    )


def _report(site: Path, *found: PatchedFile) -> ScanReport:
    return ScanReport(
        dists_scanned=("demo",),
        dists_skipped={},
        files_checked=len(found),
        bytes_checked=0,
        patched=found,
        unreadable=(),
        site_dirs={"demo": str(site)},
    )


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    """site-packages holding the patched demo/mod.py; a pristine tree holding the original."""
    site, pristine = tmp_path / "site", tmp_path / "pristine"
    for root, data in ((site, PATCHED), (pristine, ORIGINAL)):
        (root / "demo").mkdir(parents=True)
        (root / "demo" / "mod.py").write_bytes(data)
    return site, pristine


def test_a_modified_file_gets_a_diff_that_gnu_patch_applies(
    trees: tuple[Path, Path], tmp_path: Path
) -> None:
    site, pristine = trees
    report = _report(site, _found("demo/mod.py", "modified", ORIGINAL, PATCHED))
    collected, warnings, found = collect_patches(report, pristine=pristine, cache=None)
    assert warnings == []
    assert found == {("demo", "demo/mod.py"): ORIGINAL}
    (patch,) = collected
    assert patch.full == site / "demo" / "mod.py"
    assert patch.pristine_known and patch.entry.has_diff and not patch.entry.executable
    assert patch.entry.patched_sha256 == _sha(PATCHED)
    assert patch.entry.pristine_sha256 == _sha(ORIGINAL)
    assert patch.diff is not None and patch.diff.startswith(
        "--- a/demo/mod.py\n+++ b/demo/mod.py\n"
    )
    assert apply_unified_diff(ORIGINAL.decode(), patch.diff) == PATCHED.decode()
    work = tmp_path / "apply"
    shutil.copytree(pristine, work)
    subprocess.run(
        ["patch", "-p1", "--batch", "--forward"],
        input=patch.diff.encode(),
        cwd=work,
        check=True,
        capture_output=True,
    )
    assert (work / "demo" / "mod.py").read_bytes() == PATCHED


def test_without_a_pristine_copy_the_full_file_travels_and_a_warning_says_so(
    trees: tuple[Path, Path],
) -> None:
    site, _ = trees
    report = _report(site, _found("demo/mod.py", "modified", ORIGINAL, PATCHED))
    collected, warnings, found = collect_patches(report, pristine=None, cache=None)
    assert warnings == [
        "demo 1.0: no pristine copy of demo/mod.py; the bundle carries the full patched "
        "file but no diff (pass --pristine WHEEL to add one)"
    ]
    assert found == {}
    (patch,) = collected
    assert (patch.full, patch.diff, patch.pristine_known) == (site / "demo" / "mod.py", None, False)
    assert not patch.entry.has_diff


def test_a_pristine_copy_of_other_bytes_is_not_taken(trees: tuple[Path, Path]) -> None:
    site, pristine = trees
    (pristine / "demo" / "mod.py").write_bytes(ORIGINAL + b"# not RECORD's\n")
    report = _report(site, _found("demo/mod.py", "modified", ORIGINAL, PATCHED))
    collected, warnings, found = collect_patches(report, pristine=pristine, cache=None)
    assert len(warnings) == 1 and "no pristine copy of demo/mod.py" in warnings[0]
    assert found == {} and collected[0].diff is None


def test_a_deleted_file_carries_no_content_but_its_original_is_found(
    trees: tuple[Path, Path],
) -> None:
    site, pristine = trees
    (pristine / "demo" / "gone.py").write_bytes(b"GONE = 1\n")
    report = _report(site, _found("demo/gone.py", "deleted", b"GONE = 1\n", None))
    collected, warnings, found = collect_patches(report, pristine=pristine, cache=None)
    assert warnings == []
    assert found == {("demo", "demo/gone.py"): b"GONE = 1\n"}
    (patch,) = collected
    assert (patch.full, patch.diff, patch.pristine_known) == (None, None, True)
    assert patch.entry.kind == "deleted" and patch.entry.patched_sha256 is None
    assert not patch.entry.has_diff and patch.entry.full_member is None


def test_an_added_file_is_hashed_when_the_scan_gave_no_digest_and_keeps_its_mode(
    trees: tuple[Path, Path],
) -> None:
    site, pristine = trees
    tool = site / "demo" / "tool.sh"
    tool.write_bytes(b"#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    added = PatchedFile("demo", "1.0", "demo/tool.sh", "added", None, None, 18)
    collected, warnings, found = collect_patches(
        _report(site, added), pristine=pristine, cache=None
    )
    assert (warnings, found) == ([], {})
    (patch,) = collected
    assert patch.entry.patched_sha256 == _sha(b"#!/bin/sh\necho hi\n")
    assert patch.entry.executable and patch.full == tool and patch.diff is None
    assert patch.entry.full_member == "full/demo/demo/tool.sh"


def test_a_binary_modification_travels_whole_without_a_diff(tmp_path: Path) -> None:
    site, pristine = tmp_path / "site", tmp_path / "pristine"
    old, new = b"\x7fELF\x00\x01", b"\x7fELF\x00\x02"
    for root, data in ((site, new), (pristine, old)):
        (root / "demo").mkdir(parents=True)
        (root / "demo" / "_ext.so").write_bytes(data)
    report = _report(site, _found("demo/_ext.so", "modified", old, new))
    collected, warnings, found = collect_patches(report, pristine=pristine, cache=None)
    (patch,) = collected
    assert warnings == [] and found == {("demo", "demo/_ext.so"): old}
    assert (patch.diff, patch.entry.has_diff, patch.pristine_known) == (None, False, True)


@pytest.mark.parametrize("path", ["../../../bin/demo-cli", "demo/../../etc/x"])
def test_a_file_outside_site_packages_is_reported_not_carried(
    trees: tuple[Path, Path], path: str
) -> None:
    site, pristine = trees
    report = _report(site, _found(path, "modified", ORIGINAL, PATCHED))
    collected, warnings, _found_pristine = collect_patches(report, pristine=pristine, cache=None)
    assert collected == []
    assert warnings == [
        f"demo 1.0: {path} is outside site-packages (modified); not carried as a patch"
    ]


def test_workspace_patches_win_over_the_scan_and_all_come_sorted(
    trees: tuple[Path, Path], tmp_path: Path
) -> None:
    site, pristine = trees
    kept = PatchedFile("demo", "1.0", "demo/mod.py", "modified", _sha(ORIGINAL), _sha(b"k\n"), 2)
    other = PatchedFile("alpha", "2.0", "alpha/a.py", "added", None, _sha(b"a\n"), 2)
    workspace = [
        WorkspacePatch(kept, b"k\n", "--- a/demo/mod.py\n", tmp_path / "k"),
        WorkspacePatch(other, b"a\n", None, tmp_path / "a"),
    ]
    report = _report(site, _found("demo/mod.py", "modified", ORIGINAL, PATCHED))
    collected, warnings, found = collect_patches(
        report, pristine=pristine, cache=None, workspace=workspace
    )
    assert (warnings, found) == ([], {})  # the scan's demo/mod.py was never looked at
    assert [(c.entry.dist, c.entry.path) for c in collected] == [
        ("alpha", "alpha/a.py"),
        ("demo", "demo/mod.py"),
    ]
    alpha, demo = collected
    assert (demo.full, demo.diff, demo.entry.has_diff, demo.pristine_known) == (
        b"k\n",
        "--- a/demo/mod.py\n",
        True,
        True,
    )
    assert (alpha.full, alpha.diff, alpha.entry.has_diff, alpha.pristine_known) == (
        b"a\n",
        None,
        False,
        False,
    )
