"""Tests of repro.install.drift: what `repro verify` reports of a target's files."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from repro.bundle.patchset import PatchEntry, dump_patchset
from repro.errors import EXIT_USAGE, InputError
from repro.install.drift import (
    Drift,
    kept_bundle,
    patch_drift,
    recorded_drift,
    target_drift,
    target_info,
)
from repro.install.state import BundleIdentity, UnpackState, load_state
from tests.support.bundles import bundle_info, make_bundle_tree

IDENTITY = BundleIdentity("demo", "1.0", "ab" * 32)
OLD = b"x = 1\n"
NEW = b"x = 2  # patched\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _kept_bundle(target: Path, scratch: Path, entries: Sequence[PatchEntry] = ()) -> Path:
    """A real bundle tree copied to where unpack keeps it (TARGET/.repro/bundle)."""
    tree = make_bundle_tree(scratch, files={"patches/patches.toml": dump_patchset(entries)})
    kept = kept_bundle(target)
    shutil.copytree(tree, kept)
    return kept


def _modified(path: str, patched: bytes = NEW) -> PatchEntry:
    return PatchEntry("pkg", "1.0", path, "modified", _sha(OLD), _sha(patched))


def _deleted(path: str) -> PatchEntry:
    return PatchEntry("pkg", "1.0", path, "deleted", _sha(OLD), None)


# --- target_info ---------------------------------------------------------------------


def test_target_info_reads_the_state_and_the_kept_bundle(tmp_path: Path) -> None:
    target = tmp_path / "target"
    state = UnpackState(target, IDENTITY)
    state.mark_done("verify")
    state.mark_done("workspace", files={"bench/run.sh": "00" * 32})
    _kept_bundle(target, tmp_path / "scratch")
    found, info = target_info(target)
    assert found.bundle == IDENTITY
    assert found.done == ["verify", "workspace"]
    assert found.facts == {"workspace": {"files": {"bench/run.sh": "00" * 32}}}
    assert info == bundle_info()


def _nothing(target: Path, scratch: Path) -> None:
    target.mkdir()
    (target / "notes.txt").write_text("not a target\n")


def _state_only(target: Path, scratch: Path) -> None:
    UnpackState(target, IDENTITY).mark_done("verify")


def _bundle_only(target: Path, scratch: Path) -> None:
    _kept_bundle(target, scratch)


def _bundle_without_toml(target: Path, scratch: Path) -> None:
    UnpackState(target, IDENTITY).mark_done("verify")
    (_kept_bundle(target, scratch) / "bundle.toml").unlink()


@pytest.mark.parametrize(
    "make", [_nothing, _state_only, _bundle_only, _bundle_without_toml], ids=lambda f: f.__name__
)
def test_target_info_refuses_a_directory_that_is_not_a_target(
    tmp_path: Path, make: Callable[[Path, Path], None]
) -> None:
    target = tmp_path / "target"
    make(target, tmp_path / "scratch")
    with pytest.raises(InputError) as caught:
        target_info(target)
    assert caught.value.message == (
        f"{target}: not an unpacked repro target (no .repro/state.toml and bundle)"
    )
    assert caught.value.exit_code == EXIT_USAGE


# --- recorded_drift --------------------------------------------------------------------


def test_recorded_drift_is_empty_when_every_file_matches(tmp_path: Path) -> None:
    _write(tmp_path / "bench/run.sh", b"#!/bin/sh\n")
    _write(tmp_path / "services/model.service", b"[Unit]\n")
    recorded = {"bench/run.sh": _sha(b"#!/bin/sh\n"), "services/model.service": _sha(b"[Unit]\n")}
    assert recorded_drift(tmp_path, "workspace file", recorded, jobs=1) == []
    assert recorded_drift(tmp_path, "workspace file", recorded, jobs=4) == []


def _changed(path: Path) -> str:
    path.write_bytes(b"edited\n")
    return _sha(b"edited\n")


def _removed(path: Path) -> str:
    path.unlink()
    return "missing"


def _linked(path: Path) -> str:
    # a link to a file with the very bytes recorded is still not what unpack wrote
    original = path.with_name("original")
    path.rename(original)
    path.symlink_to(original)
    return "not a regular file"


def _directory(path: Path) -> str:
    path.unlink()
    path.mkdir()
    return "not a regular file"


@pytest.mark.parametrize(
    "change", [_changed, _removed, _linked, _directory], ids=lambda f: f.__name__
)
@pytest.mark.parametrize("jobs", [1, 3])
def test_recorded_drift_names_the_file_and_both_digests(
    tmp_path: Path, change: Callable[[Path], str], jobs: int
) -> None:
    data = {"a.txt": b"a\n", "b/c.txt": b"c\n", "d.txt": b"d\n"}
    for rel, content in data.items():
        _write(tmp_path / rel, content)
    found = change(tmp_path / "b/c.txt")
    recorded = {rel: _sha(content) for rel, content in data.items()}
    assert recorded_drift(tmp_path, "unit", recorded, jobs=jobs) == [
        Drift("unit", "b/c.txt", _sha(b"c\n"), found)
    ]


def test_recorded_drift_reports_every_difference_in_path_order(tmp_path: Path) -> None:
    _write(tmp_path / "z.txt", b"z2\n")
    _write(tmp_path / "m.txt", b"m\n")
    recorded = {"z.txt": _sha(b"z\n"), "a.txt": _sha(b"a\n"), "m.txt": _sha(b"m\n")}
    drift = recorded_drift(tmp_path, "workspace file", recorded)
    assert drift == [
        Drift("workspace file", "a.txt", _sha(b"a\n"), "missing"),
        Drift("workspace file", "z.txt", _sha(b"z\n"), _sha(b"z2\n")),
    ]
    expected = _sha(b"a\n")
    assert drift[0].describe() == f"workspace file a.txt: expected {expected}, found missing"
    assert drift[1].to_json() == {
        "what": "workspace file",
        "path": "z.txt",
        "expected": _sha(b"z\n"),
        "found": _sha(b"z2\n"),
    }


# --- patch_drift -----------------------------------------------------------------------

# (files in site-packages, the patch step's record) -> the drift expected; the bundle's
# entries: pkg/mod.py modified to NEW, pkg/gone.py deleted
ENTRIES = [_modified("pkg/mod.py"), _deleted("pkg/gone.py")]
SHOWN = "pkg: pkg/mod.py"
GONE = "pkg: pkg/gone.py"


@pytest.mark.parametrize(
    ("files", "recorded", "expected"),
    [
        pytest.param({"pkg/mod.py": NEW}, {}, [], id="patched-and-deleted"),
        pytest.param(
            {"pkg/mod.py": OLD},
            {},
            [Drift("patched file", SHOWN, _sha(NEW), _sha(OLD))],
            id="reverted-to-pristine",
        ),
        pytest.param(
            {}, {}, [Drift("patched file", SHOWN, _sha(NEW), "missing")], id="patched-file-removed"
        ),
        pytest.param(
            {"pkg/mod.py": NEW, "pkg/gone.py": OLD},
            {},
            [Drift("patched file", GONE, "deleted", _sha(OLD))],
            id="deleted-file-back",
        ),
        pytest.param(
            # patched through its diff: the step recorded other bytes than the bundle's
            {"pkg/mod.py": b"x = 2  # merged\n"},
            {"pkg/mod.py": _sha(b"x = 2  # merged\n")},
            [],
            id="recorded-digest-wins",
        ),
        pytest.param(
            {"pkg/mod.py": NEW},
            {"pkg/mod.py": _sha(b"x = 2  # merged\n")},
            [Drift("patched file", SHOWN, _sha(b"x = 2  # merged\n"), _sha(NEW))],
            id="bundle-bytes-after-a-merge",
        ),
    ],
)
def test_patch_drift(
    tmp_path: Path, files: dict[str, bytes], recorded: dict[str, str], expected: list[Drift]
) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    for rel, data in files.items():
        _write(site / rel, data)
    bundle = _kept_bundle(tmp_path / "target", tmp_path / "scratch", ENTRIES)
    assert patch_drift(site, bundle, recorded, jobs=2) == expected


# --- target_drift: the steps the state says are done -----------------------------------


def test_target_drift_checks_only_the_steps_recorded_done(tmp_path: Path) -> None:
    target = tmp_path / "target"
    site = tmp_path / "site-packages"
    _write(site / "pkg/mod.py", OLD)  # the patch reverted
    _write(target / "bench/run.sh", b"edited\n")
    _write(target / "services/model.service", b"[Unit]\n")
    _kept_bundle(target, tmp_path / "scratch", ENTRIES)
    state = UnpackState(target, IDENTITY)
    state.mark_done("verify")
    state.mark_done("workspace", files={"bench/run.sh": _sha(b"#!/bin/sh\n")})
    # patch and services not done yet: neither is looked at
    assert target_drift(target, site_packages=site) == [
        Drift("workspace file", "bench/run.sh", _sha(b"#!/bin/sh\n"), _sha(b"edited\n"))
    ]
    loaded = load_state(target)
    assert loaded is not None
    loaded.mark_done("patch", files={})
    loaded.mark_done("services", rendered={"services/model.service": _sha(b"[Unit]\n")})
    assert target_drift(target, site_packages=site) == [
        Drift("patched file", SHOWN, _sha(NEW), _sha(OLD)),
        Drift("workspace file", "bench/run.sh", _sha(b"#!/bin/sh\n"), _sha(b"edited\n")),
    ]
