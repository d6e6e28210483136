"""repro/install/releases.py: a release made before an upgrade touches a target, what
the upgrade replaces kept in it, and undone: the target back file for file, its state
and kept bundle included; bounded by `keep`; a chain of releases to roll back through."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from repro.errors import UsageError
from repro.install import releases
from repro.install.state import STATE_DIR, BundleIdentity

V1 = BundleIdentity("demo", "1", "1" * 64)
V2 = BundleIdentity("demo", "2", "2" * 64)
V3 = BundleIdentity("demo", "3", "3" * 64)


def snapshot(target: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every path under `target`, releases and journals aside: kind and content."""
    seen: dict[str, tuple[str, bytes | str]] = {}
    for path in sorted(target.rglob("*")):
        rel = path.relative_to(target).as_posix()
        if rel.startswith(f"{STATE_DIR}/{releases.RELEASES}") or rel.endswith("journal.toml"):
            continue
        if path.is_symlink():
            seen[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            seen[rel] = ("dir", oct(path.stat().st_mode & 0o777))
        else:
            seen[rel] = ("file", path.read_bytes() + oct(path.stat().st_mode & 0o777).encode())
    return seen


@pytest.fixture
def target(tmp_path: Path) -> Path:
    root = tmp_path / "t"
    site = root / "venv" / "lib" / "site-packages"
    (site / "old_pkg").mkdir(parents=True)
    (site / "old_pkg" / "__init__.py").write_text("old = 1\n")
    (site / "old_pkg" / "__pycache__").mkdir()
    (site / "old_pkg" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"pyc")
    (site / "patched.py").write_text("pristine\n")
    (root / "services").mkdir()
    (root / "services" / "app.service").write_text("[Service]\nExecStart=/bin/true\n")
    (root / "venv" / "bin").mkdir()
    (root / "venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    state = root / STATE_DIR
    (state / "bundle").mkdir(parents=True)
    (state / "bundle" / "bundle.toml").write_text("version 1\n")
    (state / "state.toml").write_text("[bundle]\nversion = '1'\n")
    (state / "backup").mkdir()
    (state / "backup" / "patched.py").write_text("pristine\n")
    return root


def upgrade(target: Path, writer: releases.ReleaseWriter) -> None:
    """What an upgrade does to the target, every replaced file kept first."""
    site = "venv/lib/site-packages"
    for rel in (f"{site}/old_pkg/__init__.py",):
        writer.keep(rel, move=True)
    writer.remove_dir_if_empty(f"{site}/old_pkg", site)
    (target / site / "new_pkg").mkdir()
    (target / site / "new_pkg" / "__init__.py").write_text("new = 2\n")
    writer.keep(f"{site}/patched.py", move=False)
    writer.keep(f"{site}/patched.py", move=False)  # a second keep keeps the first copy
    (target / site / "patched.py").write_text("patched for 2\n")
    writer.keep("services/app.service", move=False)
    (target / "services" / "app.service").write_text("[Service]\nExecStart=/bin/false\n")
    state = target / STATE_DIR
    (state / "state.toml").write_text("[bundle]\nversion = '2'\n")
    (state / "backup" / "patched.py").unlink()
    os.rename(state / "bundle", writer.path / releases.BUNDLE)
    (state / "bundle").mkdir()
    (state / "bundle" / "bundle.toml").write_text("version 2\n")


def test_an_upgrade_undone_is_the_target_as_it_was(target: Path) -> None:
    before = snapshot(target)
    writer = releases.begin(target, to=V1, came=V2, keep=2)
    assert releases.interrupted_upgrade(target) == writer.path
    assert snapshot(target) == before  # making the release changed nothing
    upgrade(target, writer)
    assert releases.finish(target, writer, keep=2) == []
    assert releases.interrupted_upgrade(target) is None
    assert [r.version for r in releases.list_releases(target)] == ["1"]
    after = snapshot(target)
    assert after != before
    plan = releases.plan_rollback(target, V2, None)
    releases.start_rollback(target, plan)
    assert releases.pending_rollback(target) == ["1"]
    releases.run_rollback(target, releases.pending_rollback(target) or [])
    assert snapshot(target) == before
    assert releases.pending_rollback(target) is None
    assert releases.list_releases(target) == []
    assert not releases.releases_dir(target).exists()  # none kept: as a fresh unpack


def test_an_upgrade_cut_short_is_undone(target: Path) -> None:
    before = snapshot(target)
    writer = releases.begin(target, to=V1, came=V2, keep=2)
    upgrade(target, writer)  # no finish: killed here
    assert releases.undo_interrupted(target)
    assert snapshot(target) == before
    assert not releases.undo_interrupted(target)  # nothing left to undo


def test_undo_is_idempotent(target: Path) -> None:
    before = snapshot(target)
    writer = releases.begin(target, to=V1, came=V2, keep=2)
    upgrade(target, writer)
    releases.finish(target, writer, keep=2)
    (release,) = releases.list_releases(target)
    releases.undo(target, release.path)
    releases.undo(target, release.path)  # a rollback run again after it finished
    assert snapshot(target) == before


def test_keep_bounds_the_releases_and_rollback_walks_the_chain(target: Path) -> None:
    for came, to, keep in ((V2, V1, 2), (V3, V2, 2)):
        writer = releases.begin(target, to=to, came=came, keep=keep)
        (target / "services" / "app.service").write_text(f"version {came.version}\n")
        releases.finish(target, writer, keep=keep)
    assert [r.version for r in releases.list_releases(target)] == ["2", "1"]
    assert [r.version for r in releases.plan_rollback(target, V3, "1").releases] == ["2", "1"]
    assert releases.plan_rollback(target, V3, None).version == "2"
    writer = releases.begin(target, to=V3, came=BundleIdentity("demo", "4", "4" * 64), keep=1)
    assert releases.finish(target, writer, keep=1) == ["2", "1"]
    assert [r.version for r in releases.list_releases(target)] == ["3"]


def test_rollback_refusals_name_the_target(target: Path) -> None:
    with pytest.raises(UsageError, match="no release to go back to"):
        releases.plan_rollback(target, V1, None)
    writer = releases.begin(target, to=V1, came=V2, keep=2)
    releases.finish(target, writer, keep=2)
    with pytest.raises(UsageError, match=r"does not lead to what it holds now \(demo 3\)"):
        releases.plan_rollback(target, V3, None)
    with pytest.raises(UsageError, match=r"no release 7 to go back to \(kept: 1\)"):
        releases.plan_rollback(target, V2, "7")
