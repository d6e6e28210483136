"""Tests of repro.install.venv.site: venv facts read without running its code."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from repro.errors import InputError, InstallError
from repro.install.venv.site import (
    read_installed,
    run_no_site,
    site_dirs_of,
    site_packages_of,
    startup_files,
    venv_site_dirs,
)


def _site(venv: Path) -> Path:
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    return site


def test_venv_site_dirs_on_disk_once_each(tmp_path: Path) -> None:
    site = _site(tmp_path)
    (tmp_path / "lib64").symlink_to("lib")  # as python -m venv makes it
    (tmp_path / "lib" / "python3.12").mkdir()  # no site-packages in it
    assert venv_site_dirs(tmp_path) == [site]
    assert venv_site_dirs(tmp_path / "absent") == []


def test_startup_files_lists_pth_and_customize_modules(tmp_path: Path) -> None:
    site = _site(tmp_path)
    for name in ("a.pth", "distutils-precedence.pth", "sitecustomize.py", "plain.py", "b.txt"):
        (site / name).write_text("")
    (site / "usercustomize").mkdir()
    (site / "sitecustomize.cpython-311.pyc").write_text("")
    assert startup_files(tmp_path) == [
        "lib/python3.11/site-packages/a.pth",
        "lib/python3.11/site-packages/distutils-precedence.pth",
        "lib/python3.11/site-packages/sitecustomize.cpython-311.pyc",
        "lib/python3.11/site-packages/sitecustomize.py",
        "lib/python3.11/site-packages/usercustomize",
    ]


def test_run_no_site_errors_name_the_interpreter(tmp_path: Path) -> None:
    with pytest.raises(InstallError) as caught:
        run_no_site(tmp_path / "python", ["dirs"], what="list its distributions")
    assert caught.value.message.startswith(f"cannot run {tmp_path / 'python'} venv_site.py: ")
    with pytest.raises(InstallError) as failed:
        run_no_site(Path(sys.executable), ["no-such-question"], what="ask")
    assert failed.value.message.startswith(f"{sys.executable}: cannot ask: usage: venv_site.py")


def test_run_no_site_answers_without_site_processing() -> None:
    """`dirs` run with -I -S: the answer holds the interpreter's own site-packages, which
    site processing did not put on sys.path."""
    out = run_no_site(Path(sys.executable), ["dirs"], what="list its site-packages")
    dirs = json.loads(out)
    assert isinstance(dirs, list)
    assert sysconfig.get_paths()["purelib"] in dirs


def test_an_unreadable_answer_is_an_error(tmp_path: Path) -> None:
    stand_in = tmp_path / "stand-in-python"  # a test double: answers what no python would
    stand_in.write_text("#!/bin/sh\necho not json\n")
    stand_in.chmod(0o755)
    with pytest.raises(InstallError, match="unreadable site-packages answer: 'not json"):
        site_dirs_of(stand_in)
    with pytest.raises(InputError, match="unreadable site-packages answer"):
        site_packages_of(stand_in)
    with pytest.raises(InstallError, match="unreadable distribution list"):
        read_installed(stand_in)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real venv (no pip) holding one hand-made distribution and a .pth file that
    leaves a mark if it is ever run."""
    root = tmp_path_factory.mktemp("site") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    (site,) = venv_site_dirs(root)
    info = site / "Demo_Pkg-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: Demo_Pkg\nVersion: 2.0\n")
    mark = root.parent / "pth-ran"
    (site / "evil.pth").write_text(f"import pathlib; pathlib.Path({str(mark)!r}).touch()\n")
    subprocess.run([str(root / "bin" / "python"), "-c", "pass"], check=True)
    assert mark.exists(), "the planted .pth runs on a normal start"
    mark.unlink()
    return root


@pytest.mark.slow
def test_site_dirs_of_a_real_venv_without_running_its_pth(venv: Path) -> None:
    python = venv / "bin" / "python"
    (site,) = venv_site_dirs(venv)
    assert site_dirs_of(python) == (site,)
    assert site_packages_of(python) == site
    assert not (venv.parent / "pth-ran").exists()


@pytest.mark.slow
def test_read_installed_gives_canonical_names(venv: Path) -> None:
    assert read_installed(venv / "bin" / "python") == {"demo-pkg": "2.0"}
    assert not (venv.parent / "pth-ran").exists()
