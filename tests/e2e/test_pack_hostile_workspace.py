"""Workspaces that bite: links out of the workspace or the venv, link loops, FIFOs, a
distribution without RECORD. A real workspace and venv, packed and scanned by the real
CLI under a timeout, so a hang fails instead of stalling the suite."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from repro.config import load_config
from repro.treeglob import glob_tree
from tests.snapshot.conftest import PYTHON_311, Venv, make_venv, pip, write_project
from tests.support.run import run, run_repro

pytestmark = pytest.mark.slow

TIMEOUT = 300  # a pack of this workspace takes seconds; a hang is a failure


@dataclass(frozen=True)
class Hostile:
    root: Path
    venv: Venv
    secret: bytes
    outside: Path


def _site_file(venv: Venv, rel: str) -> Path:
    return venv.site_packages / rel


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Hostile:
    base = tmp_path_factory.mktemp("hostile-ws")
    outside = base / "outside"
    outside.mkdir()
    secret = f"OUTSIDE-SECRET-{secrets.token_hex(8)}".encode()
    (outside / "secret.txt").write_bytes(secret + b"\n")
    (outside / "config.json").write_bytes(b'{"leak": "' + secret + b'"}\n')
    root = base / "svc"
    root.mkdir()
    venv = make_venv(PYTHON_311, root / "venv")
    # a local wheel no index serves: the vault rebuilds it from the installed files
    local = write_project(base / "local-src", "repro-demo-wheel", "demo_wheel", "1.0+local", False)
    dist = base / "dist"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(local)])
    pip(venv, "install", "-q", "idna", "six", *map(str, dist.glob("*.whl")))
    shutil.rmtree(dist)
    site = venv.site_packages
    data = site / "demo_wheel" / "data.txt"
    data.unlink()
    data.symlink_to(outside / "secret.txt")
    # and a hand patch of the same distribution: with no pristine copy at hand, its
    # rebuilt wheel carries the installed (patched) files, never what the link names
    init = site / "demo_wheel" / "__init__.py"
    init.write_bytes(init.read_bytes() + b"\n# hand patch\n")
    # a RECORD-listed file replaced by a link out, an added link out, an added link
    # that stays in the venv, a FIFO listed in RECORD and an added FIFO
    package_data = site / "idna" / "package_data.py"
    package_data.unlink()
    package_data.symlink_to(outside / "secret.txt")
    (site / "idna" / "leak.py").symlink_to(outside / "secret.txt")
    (site / "idna" / "alias.py").symlink_to(site / "idna" / "core.py")
    (site / "idna" / "py.typed").unlink()
    os.mkfifo(site / "idna" / "py.typed")
    os.mkfifo(site / "idna" / "pipe.py")
    # six without RECORD, with a hand patch no one can see
    (six_info,) = site.glob("six-*.dist-info")
    (six_info / "RECORD").unlink()
    six = site / "six.py"
    six.write_bytes(six.read_bytes() + b"\n# hand patch\n")
    # bench/: a link to a file outside, a link to a directory outside, two `-> .` loops,
    # a link inside the workspace, a FIFO
    bench = root / "bench"
    bench.mkdir()
    (bench / "run.sh").write_text("#!/bin/sh\necho bench\n")
    (bench / "shadow.txt").symlink_to(outside / "secret.txt")
    (bench / "elsewhere").symlink_to(outside)
    (bench / "loop1").symlink_to(".")
    (bench / "loop2").symlink_to(".")
    (bench / "same.sh").symlink_to("run.sh")
    os.mkfifo(bench / "queue")
    # drafter/: config.json links out, a FIFO beside the card
    drafter = root / "drafter"
    drafter.mkdir()
    (drafter / "config.json").symlink_to(outside / "config.json")
    (drafter / "README.md").write_text("# drafter\n")
    os.mkfifo(drafter / "events")
    (root / "repro.toml").write_text('[files]\ninclude = ["bench/**/*"]\n')
    return Hostile(root, venv, secret, outside)


@dataclass(frozen=True)
class Packed:
    proc: subprocess.CompletedProcess[bytes]
    tree: Path
    report: dict[str, Any]
    printed: str  # the warnings pack printed (its --json document)


@pytest.fixture(scope="module")
def packed(hostile: Hostile, tmp_path_factory: pytest.TempPathFactory) -> Packed:
    out = tmp_path_factory.mktemp("hostile-out")
    proc = run_repro(
        "pack",
        str(hostile.root),
        "-o",
        f"{out}/",
        "--version",
        "1",
        "--json",
        # no pristine copy at hand: pip's shared wheel cache may hold a build of the same
        # demo project from another test, so this pack gets an empty one of its own
        env={"VIRTUAL_ENV": None, "PIP_CACHE_DIR": str(out / "pip-cache")},
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    archive = Path(json.loads(proc.stdout)["path"])
    into = out / "x"
    into.mkdir()
    run(["tar", "-xf", str(archive), "-C", str(into)])
    (tree,) = into.iterdir()
    report = json.loads((tree / "env" / "pack-report.json").read_text())
    printed = "\n".join(json.loads(proc.stdout)["warnings"])
    return Packed(proc, tree, report, printed)


def _members(tree: Path) -> set[str]:
    return {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()}


def test_no_byte_from_outside_enters_the_bundle(packed: Packed, hostile: Hostile) -> None:
    for wheel in sorted((packed.tree / "env" / "wheels").glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                assert hostile.secret not in archive.read(name), f"{wheel.name}: {name}"
    (demo,) = (packed.tree / "env" / "wheels").glob("repro_demo_wheel-*.whl")
    with zipfile.ZipFile(demo) as archive:  # rebuilt: the patched file in, the link out
        assert archive.read("demo_wheel/__init__.py").endswith(b"# hand patch\n")
        assert "demo_wheel/data.txt" not in archive.namelist()
        assert (
            "demo_wheel/data.txt"
            not in archive.read("repro_demo_wheel-1.0+local.dist-info/RECORD").decode()
        )
    holding = [
        rel
        for rel in sorted(_members(packed.tree))
        if hostile.secret in (packed.tree / rel).read_bytes()
    ]
    assert holding == []
    assert not any(p.is_symlink() for p in packed.tree.rglob("*"))


def test_bench_links_inside_are_carried_and_links_out_refused(
    packed: Packed, hostile: Hostile
) -> None:
    files = {m for m in _members(packed.tree) if m.startswith("files/")}
    assert files == {"files/bench/run.sh", "files/bench/same.sh"}
    assert (packed.tree / "files/bench/same.sh").read_bytes() == b"#!/bin/sh\necho bench\n"
    warned = "\n".join(packed.report["warnings"])
    for name in ("shadow.txt", "elsewhere", "loop1", "loop2", "queue"):
        assert f"{hostile.root}/bench/{name}:" in warned, name
    assert "outside the workspace: not followed" in warned
    left_out = {item["path"] for item in packed.report["left_out"]}
    assert {"bench/shadow.txt", "bench/elsewhere", "bench/loop1", "bench/queue"} <= left_out
    assert "bench/shadow.txt" in packed.printed


def test_site_packages_links_out_and_fifos_are_not_patches(packed: Packed) -> None:
    patches = (packed.tree / "patches" / "patches.toml").read_text()
    assert "idna/package_data.py" not in patches
    assert "idna/leak.py" not in patches
    assert "idna/py.typed" not in patches and "idna/pipe.py" not in patches
    # a link that stays in the venv travels as the file it names
    assert "idna/alias.py" in patches
    assert (packed.tree / "patches/full/idna/idna/alias.py").is_file()
    skipped = {(f["dist"], f["path"]): f["reason"] for f in packed.report["skipped_files"]}
    assert "outside" in skipped[("idna", "idna/package_data.py")]
    assert "outside" in skipped[("idna", "idna/leak.py")]
    assert "a FIFO" in skipped[("idna", "idna/py.typed")]
    assert "a FIFO" in skipped[("idna", "idna/pipe.py")]
    assert "outside" in skipped[("repro-demo-wheel", "demo_wheel/data.txt")]


def test_a_distribution_without_record_is_named(packed: Packed) -> None:
    unchecked = packed.report["unchecked_distributions"]
    assert "no RECORD" in unchecked["six"]
    warning = next(w for w in packed.report["warnings"] if w.startswith("six:"))
    assert "cannot be checked for patches" in warning
    assert "six: no RECORD" in packed.printed


def _write_bytes_named(name: bytes, data: bytes) -> None:
    """A file whose name is raw bytes (pathlib would need surrogates to name it)."""
    with open(name, "wb") as stream:
        stream.write(data)


def test_names_that_are_not_utf8_are_left_out_with_a_warning(tmp_path: Path) -> None:
    """Names that are not UTF-8 (Latin-1 bytes, as an old tool or a zip from Windows
    leaves them): an added file of idna, one in a directory of its own, and a bench file.
    A bundle names files in UTF-8, so none can be carried: before, `repro pack` died with
    UnicodeEncodeError. Now each is left out, named with \\xNN escapes in the warnings,
    the report and what pack printed, and the rest is packed."""
    root = tmp_path / "svc"
    root.mkdir()
    venv = make_venv(PYTHON_311, root / "venv")
    pip(venv, "install", "-q", "idna")
    idna = bytes(venv.site_packages / "idna")
    _write_bytes_named(idna + b"/bad\xff.py", b"BAD_NAME = 1\n")
    os.mkdir(idna + b"/d\xe9j\xe0")
    _write_bytes_named(idna + b"/d\xe9j\xe0/inner.py", b"INNER = 1\n")
    bench = root / "bench"
    bench.mkdir()
    (bench / "run.sh").write_text("#!/bin/sh\necho bench\n")
    _write_bytes_named(bytes(bench) + b"/r\xe9sultat.txt", b"resultat\n")
    (root / "repro.toml").write_text('[files]\ninclude = ["bench/**/*"]\n')
    out = tmp_path / "out"
    proc = run_repro(
        "pack",
        str(root),
        "-o",
        f"{out}/",
        "--version",
        "1",
        env={"VIRTUAL_ENV": None},
        timeout=TIMEOUT,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    reason = "the name is not valid UTF-8: a bundle cannot hold it"
    assert f"{root}/bench/r\\xe9sultat.txt: {reason}; not carried" in err
    assert f"idna: idna/bad\\xff.py: {reason}" in err
    assert f"idna: idna/d\\xe9j\\xe0/inner.py: {reason}" in err
    into = out / "x"
    into.mkdir()
    run(["tar", "-xf", str(out / "svc-1.tar"), "-C", str(into)])
    (tree,) = into.iterdir()
    report = json.loads((tree / "env" / "pack-report.json").read_text())
    assert f"{root}/bench/r\\xe9sultat.txt: {reason}; not carried" in report["warnings"]
    entry = {"path": "bench/r\\xe9sultat.txt", "kind": "bad-name", "reason": reason}
    assert entry in report["left_out"]
    skipped = {(f["dist"], f["path"]) for f in report["skipped_files"]}
    assert {("idna", "idna/bad\\xff.py"), ("idna", "idna/d\\xe9j\\xe0/inner.py")} <= skipped
    members = _members(tree)
    assert not [m for m in members if "sultat" in m or "bad" in m or "inner.py" in m]
    assert "files/bench/run.sh" in members
    scan = run_repro("scan", "--venv", str(venv.root), "--json", timeout=TIMEOUT)
    assert scan.returncode == 0, scan.stderr.decode()
    scanned = {(f["dist"], f["path"]) for f in json.loads(scan.stdout)["skipped_files"]}
    assert ("idna", "idna/bad\\xff.py") in scanned


def test_model_links_out_are_not_copied(packed: Packed, hostile: Hostile) -> None:
    assert not (packed.tree / "models" / "drafter" / "config.json").exists()
    warned = "\n".join(packed.report["warnings"])
    assert "drafter/config.json: a symbolic link to" in warned
    assert "drafter/events: not a regular file" in warned


def test_scan_names_links_out_and_fifos_and_ends(hostile: Hostile) -> None:
    proc = run_repro("scan", "--venv", str(hostile.venv.root), "--json", timeout=TIMEOUT)
    document = json.loads(proc.stdout)
    skipped = {(f["dist"], f["path"]) for f in document["skipped_files"]}
    assert {
        ("idna", "idna/package_data.py"),
        ("idna", "idna/leak.py"),
        ("idna", "idna/py.typed"),
        ("idna", "idna/pipe.py"),
    } <= skipped
    paths = {p["path"] for p in document["patched"]}
    assert "idna/alias.py" in paths and "idna/leak.py" not in paths


def test_glob_tree_does_not_enter_linked_directories(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.txt").write_text("f")
    (tmp_path / "a" / ".hidden").write_text("h")
    for name in ("l1", "l2"):
        (tmp_path / "a" / name).symlink_to(".")
    (tmp_path / "a" / "b" / "up").symlink_to("..")
    result = glob_tree(tmp_path, "a/**/*")
    assert result.files == (tmp_path / "a/b/f.txt",)
    assert set(result.links) == {tmp_path / "a/l1", tmp_path / "a/l2", tmp_path / "a/b/up"}
    assert glob_tree(tmp_path, "a/l1/b/*").files == ()
    assert glob_tree(tmp_path, "a/.*").files == (tmp_path / "a/.hidden",)


def test_config_refuses_an_include_through_a_link_out(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.txt").write_text("x")
    root = tmp_path / "ws"
    root.mkdir()
    (root / "docs").symlink_to(outside)
    (root / "repro.toml").write_text('[files]\ninclude = ["docs/*"]\n')
    config = load_config(root)
    assert config.files.matched == ()
    assert config.files.refused == (
        (root / "docs", f"a symbolic link to {outside}, outside the workspace: not followed"),
    )
