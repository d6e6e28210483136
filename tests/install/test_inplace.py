"""repro/install/inplace.py called directly (not through the CLI), on real bundles of a
real venv (tests/support/upgrades.py's pairs) unpacked offline: `apply_upgrade` inside a
release made by repro.install.releases, `fresh_install_facts` and `upgraded_state`.

What is checked: every file the upgrade replaced or removed is in the release's tree/ as
it was before (and nothing else is there); every other file keeps its inode and mtime;
the installer chosen (the vault's when its wheels cover what is installed, else the one
asked for); a removed distribution's files gone by its RECORD, its directories too; an
added one installed; the patch entries taken back restored to their originals; and an
upgrade that fails midway leaves a release that undoes the target to exactly what it
was."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import tomli_w
from packaging.utils import canonicalize_name

from repro import _toml
from repro.bundle import layout
from repro.bundle.lock import read_requirements_lock
from repro.errors import InstallError
from repro.hashing import sha256_file
from repro.install import releases
from repro.install.drift import kept_bundle
from repro.install.inplace import Applied, apply_upgrade, fresh_install_facts, upgraded_state
from repro.install.state import STATE_DIR, BundleIdentity, UnpackState, load_state
from repro.install.upgrade import UpgradePlan, manifest_of, plan_upgrade
from repro.install.venv.guard import trusted_interpreter
from repro.install.venv.installer import RequestedInstaller
from repro.wheel.record import read_dist_record
from tests.conftest import unpacked_venv
from tests.install.test_unpack import extract, site_packages
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


@pytest.fixture(scope="module")
def pair_v2(pair: UpgradePair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """demo 2 of the pair extracted: the member source, as unpack's verified staging."""
    return extract(pair.v2, tmp_path_factory.mktemp("inplace-v2"))


@pytest.fixture(scope="module")
def one_wheel_delta(one_wheel: OneWheelPair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """demo 2 as a delta, extracted: only the members that differ from demo 1."""
    return extract(one_wheel.delta, tmp_path_factory.mktemp("inplace-delta"))


# --- a target, an upgrade begun on it, and what it held -------------------------------


@dataclass
class Upgrade:
    target: Path
    source: Path
    manifest: dict[str, str]
    plan: UpgradePlan
    old: UnpackState
    identity: BundleIdentity
    venv: Path
    site: Path
    interpreter: Path
    writer: releases.ReleaseWriter
    before: dict[str, str]  # tests/support/upgrades.tree of the target before the release
    files: dict[str, tuple[int, int, str]]  # rel -> inode, mtime, what (as `_files`)
    events: list[tuple[str, str, str]] = field(default_factory=list)

    def apply(
        self,
        *,
        requested: RequestedInstaller = "auto",
        manifest: dict[str, str] | None = None,
        plan: UpgradePlan | None = None,
        jobs: int | None = None,
    ) -> Applied:
        return apply_upgrade(
            plan or self.plan,
            self.source,
            manifest if manifest is not None else self.manifest,
            self.target,
            writer=self.writer,
            venv=self.venv,
            interpreter=self.interpreter,
            requested=requested,
            offline=True,
            keep_bundle=False,
            jobs=jobs,
            events=lambda step, status, detail: self.events.append((step, status, detail)),
        )

    def rel(self, path: Path) -> str:
        return path.relative_to(self.target).as_posix()


def _files(target: Path) -> dict[str, tuple[int, int, str]]:
    """Every file and link under `target` but .repro/: inode, mtime and what it is (a
    file's mode and sha256, a link's destination); bytecode caches included."""
    out: dict[str, tuple[int, int, str]] = {}
    for directory, dirs, names in os.walk(target):
        if Path(directory) == target:
            dirs[:] = [d for d in dirs if d != STATE_DIR]
        for name in [*names, *(d for d in dirs if (Path(directory) / d).is_symlink())]:
            path = Path(directory) / name
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                what = f"link -> {os.readlink(path)}"
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                what = f"file {stat.S_IMODE(info.st_mode):o} {digest}"
            out[path.relative_to(target).as_posix()] = (info.st_ino, info.st_mtime_ns, what)
    return out


def _begin(
    bundle_v1: Path, source: Path, target: Path, prepare: Callable[[], None] | None = None
) -> Upgrade:
    """`bundle_v1` unpacked into `target` through the CLI (then `prepare` run), then
    what unpack's upgrade path does before apply_upgrade: the plan against `source`,
    the release begun."""
    ok(unpack(bundle_v1, target))
    if prepare is not None:
        prepare()
    old = load_state(target)
    assert old is not None
    venv = unpacked_venv(target)
    manifest = manifest_of(source)
    plan = plan_upgrade(kept_bundle(target), source, manifest)
    identity = BundleIdentity(
        plan.name, plan.new_version, sha256_file(layout.at(source, layout.MANIFEST))
    )
    before = tree(target)
    files = _files(target)
    writer = releases.begin(target, to=old.bundle, came=identity, keep=2)
    return Upgrade(
        target=target,
        source=source,
        manifest=manifest,
        plan=plan,
        old=old,
        identity=identity,
        venv=venv,
        site=site_packages(venv),
        interpreter=trusted_interpreter(target, venv, state=old),
        writer=writer,
        before=before,
        files=files,
    )


def _dist_info(site: Path, name: str) -> Path | None:
    found = [
        d
        for d in site.glob("*.dist-info")
        if canonicalize_name(d.name.removesuffix(".dist-info").rsplit("-", 1)[0]) == name
    ]
    assert len(found) <= 1, found
    return found[0] if found else None


def _record(u: Upgrade, name: str) -> set[str]:
    """The files the installed distribution `name` owns (its RECORD), rel to the target."""
    info = _dist_info(u.site, name)
    assert info is not None, f"{name} is not installed"
    return {u.rel(Path(os.path.normpath(u.site / e.path))) for e in read_dist_record(info)}


def _in_release(u: Upgrade) -> dict[str, str]:
    """What the release's tree/ holds: rel -> what it is (as `_files` says)."""
    return {rel: what for rel, (_, _, what) in _files(u.writer.tree).items()}


def _touched(u: Upgrade) -> tuple[set[str], set[str]]:
    """(replaced, removed): the files before the upgrade that are now another file (a
    new inode or mtime) or gone."""
    now = _files(u.target)
    gone = {rel for rel in u.files if rel not in now}
    other = {rel for rel, key in u.files.items() if rel in now and now[rel][:2] != key[:2]}
    return other, gone


def _check_release_holds_what_was_touched(u: Upgrade) -> set[str]:
    """Every file replaced or removed is in tree/ as it was; tree/ holds nothing else."""
    replaced, removed = _touched(u)
    kept = _in_release(u)
    for rel in replaced | removed:
        assert kept.get(rel) == u.files[rel][2], f"{rel} was touched and is not kept as it was"
    for rel, what in kept.items():
        assert rel in u.files and u.files[rel][2] == what, f"tree/ holds {rel}, not the target's"
    return replaced | removed


def _python(u: Upgrade, code: str) -> str:
    result = subprocess.run(
        [str(u.interpreter), "-I", "-c", code], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


VERSIONS = (
    "import importlib.metadata as m, importlib.util as u\n"
    "for n in ('six', 'idna', 'iniconfig', 'tomli', 'reprolocal'):\n"
    "    print(n, m.version(n) if u.find_spec(n) else None)\n"
)


def _versions(u: Upgrade) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in _python(u, VERSIONS).splitlines())


def _undo_is_exact(u: Upgrade) -> None:
    assert releases.undo_interrupted(u.target)
    assert differences(tree(u.target), u.before) == []
    assert {r: w for r, (_, _, w) in _files(u.target).items()} == {
        r: w for r, (_, _, w) in u.files.items()
    }
    assert not u.writer.path.exists()


# --- the tests ------------------------------------------------------------------------


def test_apply_upgrade_touches_only_the_plan_and_keeps_it_first(
    pair: UpgradePair, pair_v2: Path, tmp_path: Path
) -> None:
    """demo 1 -> 2 (six changed, iniconfig added, tomli removed, idna's added file's
    patch changed, a workspace file changed): what apply_upgrade itself does, before
    the patch and workspace stages run."""
    u = _begin(pair.v1, pair_v2, tmp_path / "t")
    plan = u.plan
    assert [d.describe() for d in plan.removed] == ["tomli 2.0.1 (removed)"]
    assert [d.describe() for d in plan.changed] == ["six 1.16.0 -> 1.17.0"]
    assert [d.describe() for d in plan.added] == ["iniconfig 2.0.0 (added)"]
    assert set(plan.unpatch) == {"six.py", "idna/repro_added.py"}, plan.unpatch
    assert plan.files_changed == ("bench/results.json",)
    site = u.rel(u.site)
    six_old, tomli_old = _record(u, "six"), _record(u, "tomli")
    tomli_dirs = [u.site / "tomli", u.site / "tomli-2.0.1.dist-info"]
    assert all(d.is_dir() for d in tomli_dirs)
    assert "PATCHED = 1" in (u.site / "six.py").read_text()
    assert (u.site / "idna" / "repro_added.py").is_file()

    applied = u.apply()

    # the installer: the vault's (it holds a wheel for each distribution installed)
    assert applied.installer == "vault"
    assert ("upgrade", "installed", "iniconfig, six (vault installer)") in u.events
    assert applied.distributions == len(
        read_requirements_lock(layout.at(pair_v2, layout.REQUIREMENTS_LOCK)).pins
    )
    assert applied.removed_files == len([r for r in six_old | tomli_old if r in u.files]), (
        "every installed file of six and tomli moved"
    )
    # the files the two wheels wrote, each one's RECORD aside
    written = [u.site / f"{d}.dist-info" for d in ("six-1.17.0", "iniconfig-2.0.0")]
    assert applied.installed_files == sum(len(read_dist_record(d)) - 1 for d in written)

    # every file replaced or removed is in the release as it was; the others untouched
    touched = _check_release_holds_what_was_touched(u)
    allowed = six_old | tomli_old | {f"{site}/idna/repro_added.py", "bench/results.json"}
    assert sorted(touched - allowed) == [], "files outside the plan were touched"
    assert tomli_old <= touched and f"{site}/idna/repro_added.py" in touched
    assert "bench/results.json" in touched and not (u.target / "bench/results.json").exists()
    assert (u.target / "bench" / "run.sh").is_file()

    # the removed distribution: its files (by RECORD) and its directories gone
    now = _files(u.target)
    assert sorted(r for r in tomli_old if r in now) == []
    assert [d for d in tomli_dirs if d.exists()] == []
    assert _dist_info(u.site, "tomli") is None
    # the changed one: the new version's files; the added one installed
    versions = _versions(u)
    assert versions == {
        "six": "1.17.0",
        "idna": "3.7",
        "iniconfig": "2.0.0",
        "tomli": "None",
        "reprolocal": "0.1.0",
    }, versions
    for name in ("six", "iniconfig"):
        info = _dist_info(u.site, name)
        assert info is not None, name
        for entry in read_dist_record(info):
            if entry.sha256 is not None:
                data = (u.site / entry.path).read_bytes()
                assert hashlib.sha256(data).hexdigest() == entry.sha256, entry.path

    # the patch entries taken back: the file the patch added gone, six.py no longer
    # patched, their records and backups gone with them
    assert not (u.site / "idna" / "repro_added.py").exists()
    assert "PATCHED = 1" not in (u.site / "six.py").read_text()
    assert not (u.target / STATE_DIR / "applied.toml").exists()
    assert not (u.target / STATE_DIR / "backup").exists()

    # the kept bundle is demo 2's; demo 1's is in the release
    assert 'version = "2"' in (kept_bundle(u.target) / layout.BUNDLE_TOML).read_text()
    assert 'version = "1"' in (u.writer.path / releases.BUNDLE / layout.BUNDLE_TOML).read_text()

    # the new state: venv and install done (the same venv), the later steps to run
    python = Path(u.old.facts["preflight"]["python"])
    facts = fresh_install_facts(u.source)
    upgraded_state(u.old, UnpackState(u.target, u.identity), python, applied, facts)
    state = load_state(u.target)
    assert state is not None and state.bundle == u.identity
    assert state.done == ["preflight", "venv", "install"]
    assert state.facts == {
        "preflight": {"python": str(python)},
        "venv": u.old.facts["venv"],
        "install": facts,
    }
    assert state.started is None and state.failed is None

    # the release undoes all of it: the target as it was, file for file, state included
    _undo_is_exact(u)
    assert _versions(u)["tomli"] == "2.0.1"


def test_a_patch_taken_back_is_restored_to_its_original(
    one_wheel: OneWheelPair, one_wheel_delta: Path, tmp_path: Path
) -> None:
    """six.py (six unchanged) patched in demo 1: a plan that takes its entry back (as
    one whose patch changed would) writes the original back over it, the patched copy
    kept in the release, and leaves the other entry (idna's added file) as it was."""
    u = _begin(one_wheel.v1, one_wheel_delta, tmp_path / "t")
    six = u.site / "six.py"
    backup = u.target / STATE_DIR / "backup" / "six.py"
    original = backup.read_bytes()
    patched = six.read_bytes()
    assert original != patched and b"PATCHED = 1" in patched
    mode = stat.S_IMODE(six.stat().st_mode)
    plan = replace(u.plan, unpatch=("six.py",), repatch=("six.py",))

    u.apply(plan=plan)

    assert six.read_bytes() == original
    assert stat.S_IMODE(six.stat().st_mode) == mode
    assert (u.writer.tree / u.rel(six)).read_bytes() == patched
    assert not backup.exists()
    applied = _toml.loads((u.target / STATE_DIR / "applied.toml").read_text())
    assert [f["path"] for f in applied["files"]] == ["idna/repro_added.py"]
    assert (u.site / "idna" / "repro_added.py").is_file()
    touched = _check_release_holds_what_was_touched(u)
    name = ONE_WHEEL[0]
    assert {r for r in touched if name not in r} == {u.rel(six)}
    _undo_is_exact(u)


def test_a_patched_files_missing_original_is_named_and_undone(
    one_wheel: OneWheelPair, one_wheel_delta: Path, tmp_path: Path
) -> None:
    """The original a patch entry is taken back to is gone from .repro/backup: an
    InstallError naming it (not a bare traceback), and the release undoes the rest."""
    target = tmp_path / "t"
    u = _begin(
        one_wheel.v1,
        one_wheel_delta,
        target,
        prepare=lambda: (target / STATE_DIR / "backup" / "six.py").unlink(),
    )
    with pytest.raises(InstallError) as caught:
        u.apply(plan=replace(u.plan, unpatch=("six.py",), repatch=("six.py",)))
    assert f"{target / STATE_DIR / 'backup' / 'six.py'}: the original of the patched six.py" in (
        caught.value.message
    )
    _undo_is_exact(u)


@pytest.mark.parametrize("requested", ["auto", "pip", "uv"])
def test_a_delta_changes_one_wheel_and_nothing_else(
    one_wheel: OneWheelPair,
    one_wheel_delta: Path,
    tmp_path: Path,
    requested: RequestedInstaller,
) -> None:
    """iniconfig 2.0.0 -> 2.1.0 from a delta, whose vault holds only that wheel: `auto`
    takes the vault installer (judged on what is installed, not on the whole lock);
    pip-sync and uv, offline from the same vault, add only what is missing. Either
    way, iniconfig's files are the only ones touched, the unit included."""
    name, old, new = ONE_WHEEL
    u = _begin(one_wheel.v1, one_wheel_delta, tmp_path / "t")
    assert [d.describe() for d in u.plan.changed] == [f"{name} {old} -> {new}"]
    assert not (u.plan.added or u.plan.removed or u.plan.unpatch or u.plan.files_changed)
    vault = layout.at(one_wheel_delta, layout.WHEELS)
    assert [w.name.split("-")[0] for w in vault.glob("*.whl")] == [name]
    old_files = _record(u, name)

    applied = u.apply(requested=requested)

    assert applied.installer == ("vault" if requested == "auto" else requested)
    assert applied.removed_files == len([r for r in old_files if r in u.files])
    touched = _check_release_holds_what_was_touched(u)
    new_files = _record(u, name)
    assert sorted(touched - old_files) == [], "files outside the plan were touched"
    assert old_files - new_files <= touched
    assert f"services/{UNIT_NAME}" in u.files and f"services/{UNIT_NAME}" not in touched
    assert _versions(u)[name] == new
    _undo_is_exact(u)


def _without_wheel(source: Path, dest: Path, name: str) -> tuple[Path, str]:
    """A copy of the bundle directory `source` without `name`'s vault wheel; returns it
    and the wheel's member."""
    shutil.copytree(source, dest)
    (wheel,) = layout.at(dest, layout.WHEELS).glob(f"{name}-*.whl")
    wheel.unlink()
    return dest, layout.at(Path(), layout.WHEELS).joinpath(wheel.name).as_posix()


def _rezipped(wheel: Path) -> None:
    """`wheel` written again with the same members and another timestamp: a valid wheel
    whose sha256 is no longer the one env/vault.toml lists."""
    with zipfile.ZipFile(wheel) as archive:
        members = [(info, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(wheel, "w") as archive:
        for info, data in members:
            again = zipfile.ZipInfo(info.filename, (2001, 1, 1, 0, 0, 0))
            again.compress_type = info.compress_type
            archive.writestr(again, data)


def test_a_wheel_missing_from_the_vault_fails_midway_and_is_undone(
    pair: UpgradePair, pair_v2: Path, tmp_path: Path
) -> None:
    """The vault installer asked for, and the new kept bundle holds no iniconfig wheel:
    InstallError naming it, after tomli and six were moved out; the release undoes it."""
    source, member = _without_wheel(pair_v2, tmp_path / "v2", "iniconfig")
    u = _begin(pair.v1, source, tmp_path / "t")
    manifest = {m: d for m, d in u.manifest.items() if m != member}
    with pytest.raises(InstallError, match=r"no wheel this Python takes for: iniconfig==2\.0\.0"):
        u.apply(requested="vault", manifest=manifest)
    assert _dist_info(u.site, "tomli") is None, "it failed before anything was moved"
    _check_release_holds_what_was_touched(u)
    _undo_is_exact(u)


def test_a_wheel_that_fails_its_digest_mid_install_is_undone(
    pair: UpgradePair, pair_v2: Path, tmp_path: Path
) -> None:
    """iniconfig's wheel is not the one env/vault.toml lists: six 1.17 (the larger wheel,
    installed first with one job) is in, iniconfig refused; the release undoes both."""
    source = tmp_path / "v2"
    shutil.copytree(pair_v2, source)
    (wheel,) = layout.at(source, layout.WHEELS).glob("iniconfig-*.whl")
    _rezipped(wheel)
    (six,) = layout.at(source, layout.WHEELS).glob("six-*.whl")
    assert six.stat().st_size > wheel.stat().st_size
    u = _begin(pair.v1, source, tmp_path / "t")
    with pytest.raises(InstallError, match=rf"{wheel.name}: sha256 .* iniconfig"):
        u.apply(jobs=1)
    assert _versions(u)["six"] == "1.17.0", "it failed before anything was installed"
    _check_release_holds_what_was_touched(u)
    _undo_is_exact(u)
    assert _versions(u)["six"] == "1.16.0"


def test_fresh_install_facts(
    pair_v2: Path, one_wheel_delta: Path, one_wheel: OneWheelPair, tmp_path: Path
) -> None:
    """The vault installer's facts when env/vault.toml lists a wheel for every pin (a
    delta's lists them all, though it carries only the changed wheel, as its full
    bundle does); none when one pin has no wheel of its version listed."""
    pins = read_requirements_lock(layout.at(pair_v2, layout.REQUIREMENTS_LOCK)).pins
    assert fresh_install_facts(pair_v2) == {"distributions": len(pins), "installer": "vault"}
    full = extract(one_wheel.v2, tmp_path / "full")
    assert fresh_install_facts(full)["installer"] == "vault"
    assert fresh_install_facts(one_wheel_delta) == fresh_install_facts(full)

    partial = tmp_path / "partial"
    for member in (layout.REQUIREMENTS_LOCK, layout.VAULT_TOML):
        layout.at(partial, member).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(layout.at(pair_v2, member), layout.at(partial, member))
    vault = layout.at(partial, layout.VAULT_TOML)
    listed = _toml.loads(vault.read_text())
    assert fresh_install_facts(partial)["installer"] == "vault"
    for wheel in listed["wheels"]:
        if wheel["name"] == "iniconfig":
            wheel["version"] = "1.1.1"  # another version of it: not the pin's
    vault.write_bytes(tomli_w.dumps(listed).encode())
    assert fresh_install_facts(partial) == {"distributions": len(pins)}
    listed["wheels"] = [w for w in listed["wheels"] if w["name"] != "iniconfig"]
    vault.write_bytes(tomli_w.dumps(listed).encode())
    assert fresh_install_facts(partial) == {"distributions": len(pins)}
    vault.unlink()
    assert fresh_install_facts(partial) == {"distributions": len(pins)}


def test_a_removed_unit_and_its_drop_in_are_kept_then_gone(
    one_wheel: OneWheelPair, one_wheel_delta: Path, tmp_path: Path
) -> None:
    """A plan that removes the unit (as a NEW without it would): every file of
    services/ copied into the release, the unit and its drop-in directory moved out."""
    target = tmp_path / "t"
    drop_in = target / "services" / f"{UNIT_NAME}.d"

    def add_drop_in() -> None:
        drop_in.mkdir()
        (drop_in / "env.conf").write_text("[Service]\nEnvironment=A=1\n")

    u = _begin(one_wheel.v1, one_wheel_delta, target, add_drop_in)
    plan = replace(u.plan, units_removed=(UNIT_NAME,))

    u.apply(plan=plan)

    unit = f"services/{UNIT_NAME}"
    assert not (target / unit).exists() and not drop_in.exists()
    kept = _in_release(u)
    assert kept[unit] == u.files[unit][2]
    assert kept[f"{unit}.d/env.conf"] == u.files[f"{unit}.d/env.conf"][2]
    _check_release_holds_what_was_touched(u)
    _undo_is_exact(u)
    assert (drop_in / "env.conf").is_file()
