"""`repro unpack --no-exec` runs no code of the bundle's: not the `.pth` files it puts in
site-packages, not a build backend it ships.

A real workspace (a venv with six and a local wheel that carries a `.pth`) packed by the
real `repro pack`, so the vault wheel with the `.pth` is pack's own; then the bundle is
edited and re-manifested to add a hand patch that is a second `.pth`. Each `.pth` appends
its tag and the argv of the process that ran it to `startup-ran.log` in the venv it runs
in. Unpacked with `--no-exec` (each installer: vault, uv, pip), verified, unpatched and
unpacked again: the log never appears. The same bundle unpacked without `--no-exec`
shows the mechanism works, and where it runs: in the smoke rungs only, never in repro's own calls.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from repro.bundle.manifesttree import write_manifest
from repro.bundle.patchset import PatchEntry, dump_patchset, load_patchset
from repro.install.state import load_state
from tests.conftest import unpacked_venv
from tests.install.test_unpack import build_local_wheel, build_workspace, pack
from tests.support.bundles import archive_tree, make_bundle_tree
from tests.support.run import run_repro
from tests.support.venvs import find_python

pytestmark = pytest.mark.slow

LOG = "startup-ran.log"
WHEEL_PTH = "reprolocal_startup.pth"
PATCH_PTH = "zz_repro_patch.pth"


def _hook(tag: str) -> bytes:
    """A .pth line Python executes at startup: it logs `tag` and the process's argv in
    the venv it runs in (sys.prefix is the venv's once site.py has run)."""
    return (
        "import sys, pathlib; pathlib.Path(sys.prefix, "
        f"{LOG!r}).open('a').write({tag!r} + ' ' + repr(sys.orig_argv) + '\\n')\n"
    ).encode()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("noexec-startup")
    wheel = build_local_wheel(root / "wheel", extra={WHEEL_PTH: _hook("wheel")})
    workspace = build_workspace(root / "ws", find_python("3.11"), ["six==1.16.0", str(wheel)])
    # --wheels all: the vault covers the lock, so the vault installer can take it too
    packed = pack(workspace, root / "bundles", "1", "--wheels", "all")
    with tarfile.open(packed) as archive:
        archive.extractall(root / "extracted", filter="data")
    (tree,) = (root / "extracted").iterdir()
    assert (tree / "env" / "wheels" / wheel.name).is_file()  # pack vaulted it, .pth and all
    # The hand edit: a .pth added as a patch of six, and the bundle re-manifested.
    patches = tree / "patches" / "patches.toml"
    patchset = load_patchset(patches.read_bytes(), source=str(patches))
    content = _hook("patch")
    added = PatchEntry(
        "six", "1.16.0", PATCH_PTH, "added", None, hashlib.sha256(content).hexdigest()
    )
    patches.write_bytes(dump_patchset([*patchset.entries, added]))
    (tree / "patches" / "full" / "six" / PATCH_PTH).write_bytes(content)
    (tree / "MANIFEST.sha256").unlink()
    write_manifest(tree)
    return archive_tree(tree, root / "edited.tar")


def _site(target: Path) -> Path:
    (site,) = (unpacked_venv(target) / "lib").glob("python*/site-packages")
    return site


def _log(target: Path) -> Path:
    return unpacked_venv(target) / LOG


@pytest.mark.parametrize("installer", ["vault", "uv", "pip"])
def test_no_exec_runs_no_pth_of_the_bundle(bundle: Path, tmp_path: Path, installer: str) -> None:
    target = tmp_path / "target"
    argv = ("unpack", str(bundle), "--target", str(target), "--cpu", "--installer", installer)
    proc = run_repro(*argv, "--no-exec", "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    site = _site(target)
    assert (site / WHEEL_PTH).read_bytes() == _hook("wheel")  # installed, never run
    assert (site / PATCH_PTH).read_bytes() == _hook("patch")  # applied, never run
    smoke = next(s for s in report["steps"] if s["name"] == "smoke")
    assert smoke["status"] == "skipped" and "--no-exec: no rung runs" in smoke["detail"]
    assert report["smoke"] is None
    assert not _log(target).exists()

    # Reading the target back and restoring it start its interpreter too: without site.
    proc = run_repro("verify", str(target))
    assert proc.returncode == 0, proc.stderr.decode()
    proc = run_repro("unpatch", str(target))
    assert proc.returncode == 0, proc.stderr.decode()
    assert not (site / PATCH_PTH).exists()
    proc = run_repro(*argv, "--no-exec")  # the patch step again: its syntax check
    assert proc.returncode == 0, proc.stderr.decode()
    assert (site / PATCH_PTH).is_file()
    assert not _log(target).exists()


def test_compile_bytecode_runs_no_pth_either(bundle: Path, tmp_path: Path) -> None:
    """`--compile-bytecode --no-exec`: every module of the venv gets checked-hash
    bytecode of the target's Python (3.11), compiled by its interpreter without site
    processing, so neither .pth runs. Without the flag the venv has no bytecode."""
    target = tmp_path / "target"
    argv = ("unpack", str(bundle), "--target", str(target), "--cpu", "--installer", "vault")
    proc = run_repro(*argv, "--no-exec", "--compile-bytecode", "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    site = _site(target)
    patched = next(s for s in json.loads(proc.stdout)["steps"] if s["name"] == "patch")
    assert "bytecode of " in patched["detail"], patched
    state = load_state(target)
    assert state is not None
    facts = state.facts["patch"]["bytecode"]
    sources = [p for p in site.rglob("*.py") if "__pycache__" not in p.parts]
    assert facts["files"] == len(sources) and facts["compiled"] == len(sources) > 10
    for source in sources:
        pyc = source.parent / "__pycache__" / f"{source.stem}.cpython-311.pyc"
        assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b11, pyc  # checked-hash
    assert (site / "__pycache__" / "six.cpython-311.pyc").is_file()
    assert not _log(target).exists()

    plain = tmp_path / "plain"
    proc = run_repro("unpack", str(bundle), "--target", str(plain), "--cpu", "--no-exec")
    assert proc.returncode == 0, proc.stderr.decode()
    assert not list(_site(plain).rglob("*.pyc"))


def test_an_interrupted_install_is_rebuilt_before_any_installer_starts(
    bundle: Path, tmp_path: Path
) -> None:
    """A run killed after the installer wrote the vault wheel's .pth but before the
    install step was recorded: an installer started over that venv would run the .pth
    (pip-sync runs pip in it; uv queries it unless its cache answers). The rerun removes
    the unfinished venv first and builds it again, so under --no-exec nothing of the
    bundle runs, and the .pth files are back only as installed files."""
    target = tmp_path / "target"
    argv = ("unpack", str(bundle), "--target", str(target), "--cpu", "--installer", "pip")
    proc = run_repro(*argv, "--no-exec", "--no-smoke")
    assert proc.returncode == 0, proc.stderr.decode()
    state = load_state(target)
    assert state is not None
    state.forget("install")  # what the kill leaves: the files there, the step not recorded
    venv = unpacked_venv(target)
    site = venv / "lib" / "python3.11" / "site-packages"
    assert (site / WHEEL_PTH).is_file() and (site / PATCH_PTH).is_file()
    proc = run_repro(*argv, "--no-exec")
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert f"redo venv: an earlier run stopped in the install step; {venv} is removed" in err
    assert not _log(target).exists()  # no .pth ran, in the installer or anywhere
    assert (site / WHEEL_PTH).is_file() and (site / PATCH_PTH).is_file()


def test_without_no_exec_the_pth_files_run_in_the_rungs_only(bundle: Path, tmp_path: Path) -> None:
    """The control: the same bundle, unpacked normally. Both .pth files run, in the
    processes of the smoke ladder, which import the stack on purpose; repro's own calls
    (the installed-set check, the patch syntax check, verify, unpatch) run neither."""
    target = tmp_path / "target"
    proc = run_repro("unpack", str(bundle), "--target", str(target), "--cpu", "--json")
    assert proc.returncode == 0, proc.stderr.decode()  # python passes, the rest skip
    rungs = [r["name"] for r in json.loads(proc.stdout)["smoke"]["ladder"]["rungs"]]
    lines = _log(target).read_text().splitlines()
    assert {line.split()[0] for line in lines} == {"wheel", "patch"}
    assert all("rung_" in line for line in lines), lines
    assert any("rung_python.py" in line for line in lines), (rungs, lines)
    for command in (("verify", str(target)), ("unpatch", str(target))):
        proc = run_repro(*command)
        assert proc.returncode == 0, proc.stderr.decode()
    assert _log(target).read_text().splitlines() == lines


# --- a build backend in the vault ------------------------------------------------------


def _sdist(marker: Path) -> bytes:
    """reprobuild 1.0 as a source distribution whose in-tree build backend leaves
    `marker` when it is imported: the first thing an installer does to build it."""
    files = {
        "pyproject.toml": b'[build-system]\nrequires = []\nbuild-backend = "backend"\n'
        b'backend-path = ["."]\n\n[project]\nname = "reprobuild"\nversion = "1.0"\n',
        "backend.py": f"open({str(marker)!r}, 'a').write('built\\n')\n".encode(),
        "PKG-INFO": b"Metadata-Version: 2.1\nName: reprobuild\nVersion: 1.0\n",
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(f"reprobuild-1.0/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _sdist_bundle(tmp_path: Path) -> tuple[Path, Path]:
    """A bundle whose one pin the vault holds only as `_sdist`, and that sdist's marker."""
    marker = tmp_path / "backend-ran"
    tree = make_bundle_tree(
        tmp_path / "src",
        files={
            "env/requirements.lock": b"reprobuild==1.0\n",
            "env/wheels/reprobuild-1.0.tar.gz": _sdist(marker),
        },
    )
    return archive_tree(tree, tmp_path / "sdist.tar"), marker


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_no_exec_builds_no_source_distribution(tmp_path: Path, installer: str) -> None:
    bundle, marker = _sdist_bundle(tmp_path)
    argv = ("unpack", str(bundle), "--cpu", "--offline", "--installer", installer, "--no-smoke")
    proc = run_repro(*argv, "--target", str(tmp_path / "a"), "--no-exec")
    err = proc.stderr.decode()
    assert proc.returncode == 3, err
    assert "reprobuild" in err, err
    assert not marker.exists()

    # The control: without --no-exec the installer imports the bundle's backend.
    proc = run_repro(*argv, "--target", str(tmp_path / "b"))
    assert marker.is_file(), proc.stderr.decode()


def test_the_vault_installer_never_builds_a_source_distribution(tmp_path: Path) -> None:
    """Without --no-exec too: repro's own installer takes wheels only, so a pin the vault
    holds only as a source distribution fails the install, naming it, and nothing runs."""
    bundle, marker = _sdist_bundle(tmp_path)
    target = tmp_path / "a"
    argv = ("unpack", str(bundle), "--cpu", "--offline", "--installer", "vault", "--no-smoke")
    proc = run_repro(*argv, "--target", str(target))
    err = proc.stderr.decode()
    assert proc.returncode == 3, err
    assert "no wheel this Python takes for 1 pin(s): reprobuild==1.0" in err, err
    assert not marker.exists()


def test_the_edited_bundle_is_still_one_check_passes(bundle: Path) -> None:
    """The edit is invisible to `repro check`: the manifest was written again."""
    proc = run_repro("check", str(bundle))
    assert proc.returncode == 0, proc.stderr.decode()
