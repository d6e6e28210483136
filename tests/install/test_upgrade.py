"""An upgrade in place (`repro unpack NEW --target T` over an older bundle of the same
name) and `repro rollback`: real bundles of a real venv packed twice (a patch changed, a
package upgraded, one added, one removed), unpacked offline.

The upgraded target must equal a fresh unpack of NEW at the same path, file for file
(state history aside); the rollback must give back the old target, state.toml
included; only the changed distributions' files are rewritten: an upgrade that changes
one wheel, by a full bundle or a delta, rewrites that distribution's files and no other
file of the target (inode and mtime of every one compared)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from repro.wheel.record import read_dist_record
from tests.conftest import unpacked_venv
from tests.install.test_unpack import site_packages
from tests.support.run import run_repro
from tests.support.upgrades import (
    ONE_WHEEL,
    UNIT_NAME,
    OneWheelPair,
    UpgradePair,
    differences,
    ok,
    tree,
    unpack,
)

pytestmark = pytest.mark.slow


def _inodes(root: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(root).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and ".repro" not in p.parts
    }


def test_upgrade_equals_a_fresh_unpack_and_rolls_back(pair: UpgradePair, tmp_path: Path) -> None:
    target = tmp_path / "t"
    ok(unpack(pair.v1, target))
    before = tree(target)
    inodes = _inodes(target)

    report = json.loads(ok(unpack(pair.v2, target, "--json")))
    upgrade = report["upgrade"]
    assert upgrade["dists"]["added"] == ["iniconfig 2.0.0 (added)"]
    assert upgrade["dists"]["removed"] == ["tomli 2.0.1 (removed)"]
    assert upgrade["dists"]["changed"] == ["six 1.16.0 -> 1.17.0"]
    assert "idna/repro_added.py" in upgrade["patches"]["applied"]
    assert upgrade["files"]["changed"] == ["bench/results.json"]
    assert report["changed"] is True
    ok(run_repro("verify", str(target)))
    assert (target / ".repro" / "releases" / "1" / "release.toml").is_file()

    # only what changed was rewritten: idna's and the local wheel's files are untouched
    after = _inodes(target)
    touched = {rel for rel, key in inodes.items() if after.get(rel) != key}
    assert touched, "nothing changed"
    for rel in touched:
        assert any(
            word in rel for word in ("six", "tomli", "repro_added.py", "bench/results.json")
        ), rel
    assert not any("idna/core.py" in rel for rel in touched)

    # a fresh unpack of v2 at the same path is the same tree
    upgraded = tree(target, history=False)
    state_up = (target / ".repro" / "state.toml").read_text()
    aside = tmp_path / "aside"
    target.rename(aside)
    ok(unpack(pair.v2, target))
    fresh = tree(target, history=False)
    assert differences(upgraded, fresh) == []
    fresh_state = (target / ".repro" / "state.toml").read_text()
    assert json.dumps(sorted(state_up.splitlines())) == json.dumps(sorted(fresh_state.splitlines()))
    shutil.rmtree(target)
    aside.rename(target)

    # the same command again: nothing to do
    again = json.loads(ok(unpack(pair.v2, target, "--json")))
    assert again["changed"] is False and again["upgrade"] is None

    # rollback: the old target, file for file, its state too; verify agrees
    ok(run_repro("rollback", str(target)))
    assert differences(tree(target), before) == []
    ok(run_repro("verify", str(target)))
    assert not (target / ".repro" / "releases" / "1").exists()


def test_drift_refuses_the_upgrade_unless_forced(pair: UpgradePair, tmp_path: Path) -> None:
    target = tmp_path / "t"
    ok(unpack(pair.v1, target))
    results = target / "bench" / "run.sh"
    results.write_text("#!/bin/sh\necho edited\n")
    before = tree(target)
    refused = unpack(pair.v2, target)
    assert refused.returncode == 1, refused.stderr.decode()
    assert "bench/run.sh" in refused.stderr.decode()
    assert differences(tree(target), before) == []
    forced = unpack(pair.v2, target, "--force")
    ok(forced)
    assert "overwrites" in forced.stderr.decode()
    ok(run_repro("verify", str(target)))


def test_keep_releases_bounds_them(pair: UpgradePair, tmp_path: Path) -> None:
    target = tmp_path / "t"
    ok(unpack(pair.v1, target))
    ok(unpack(pair.v2, target, "--keep-releases", "0"))
    assert not any((target / ".repro" / "releases").glob("[!.]*"))
    refused = run_repro("rollback", str(target))
    assert refused.returncode == 2, refused.stderr.decode()


def _dist_files(target: Path, name: str) -> set[str]:
    """The files the installed distribution `name` owns (its RECORD), relative to the
    target."""
    site = site_packages(unpacked_venv(target))
    (info,) = (
        d
        for d in site.glob("*.dist-info")
        if canonicalize_name(d.name.removesuffix(".dist-info").rsplit("-", 1)[0]) == name
    )
    return {
        Path(os.path.normpath(site / e.path)).relative_to(target).as_posix()
        for e in read_dist_record(info)
    }


@pytest.mark.parametrize("which", ["full", "delta"])
def test_an_upgrade_of_one_wheel_rewrites_only_its_files(
    one_wheel: OneWheelPair, tmp_path: Path, which: str
) -> None:
    """iniconfig 2.0.0 -> 2.1.0 and nothing else: the wheel is installed by the vault
    installer, offline, whether the upgrade comes as the full bundle or as a delta
    (whose vault holds only that wheel), and every other file of the target (the other
    distributions, the patched files, the workspace's files, the rendered unit) keeps
    its inode and mtime."""
    name, old, new = ONE_WHEEL
    target = tmp_path / "t"
    ok(unpack(one_wheel.v1, target))
    before = _inodes(target)
    old_files = _dist_files(target, name)
    unit = f"services/{UNIT_NAME}"
    assert unit in before

    bundle = one_wheel.v2 if which == "full" else one_wheel.delta
    report = json.loads(ok(unpack(bundle, target, "--json")))
    upgrade = report["upgrade"]
    assert upgrade["dists"]["changed"] == [f"{name} {old} -> {new}"]
    assert upgrade["dists"]["added"] == upgrade["dists"]["removed"] == []
    assert upgrade["installer"] == "vault"
    ok(run_repro("verify", str(target)))

    after = _inodes(target)
    new_files = _dist_files(target, name)
    ours = old_files | new_files
    assert before.keys() - after.keys() <= old_files
    assert after.keys() - before.keys() <= new_files
    rewritten = sorted(r for r in before.keys() & after.keys() if before[r] != after[r])
    assert [r for r in rewritten if r not in ours] == []
    assert before[unit] == after[unit]
    assert {r for r in after if r in new_files and before.get(r) != after[r]} == {
        r for r in new_files if r in after
    }, "the changed distribution's files were not written"
