"""When `repro unpack` may install while the bundle streams in, and how staged files
move into the venv (repro.install.venv.streamed); the whole path through the CLI is
tests/install/venv/test_streamed_unpack.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from repro.bundle.signing import SignaturePolicy
from repro.errors import InstallError
from repro.install.options import UnpackOptions
from repro.install.venv.streamed import StagedVenv, StreamedInstall, adopt

LAYOUT = {"purelib": "lib/python3.11/site-packages", "platlib": "lib/python3.11/site-packages",
          "scripts": "bin"}  # fmt: skip


def test_a_fresh_target_with_the_vault_or_auto_installer_streams(tmp_path: Path) -> None:
    for installer in ("auto", "vault"):
        assert StreamedInstall.wanted_for(UnpackOptions("-", tmp_path / "new", installer=installer))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert StreamedInstall.wanted_for(UnpackOptions("-", empty))
    assert StreamedInstall.wanted_for(UnpackOptions("-"))  # the target is known later


def test_what_does_not_stream(tmp_path: Path) -> None:
    used = tmp_path / "used"
    (used / ".repro").mkdir(parents=True)
    (used / ".repro" / "state.toml").write_text("done = []\n")
    signers = tmp_path / "allowed_signers"
    signers.write_text("")
    cases = {
        "uv": UnpackOptions("-", tmp_path / "a", installer="uv"),
        "pip": UnpackOptions("-", tmp_path / "a", installer="pip"),
        "dry run": UnpackOptions("-", tmp_path / "a", dry_run=True),
        "signature": UnpackOptions(
            "-", tmp_path / "a", signature=SignaturePolicy(allowed_signers=signers)
        ),
        "a target in use (a resumed run)": UnpackOptions("-", used),
    }
    assert [name for name, options in cases.items() if StreamedInstall.wanted_for(options)] == []
    assert StreamedInstall.wanted_for(UnpackOptions("-", used, replace=True))


def _staged(tmp_path: Path, venv: Path) -> StagedVenv:
    prefix = tmp_path / "staged"
    (prefix / "lib/python3.11/site-packages/demo").mkdir(parents=True)
    (prefix / "lib/python3.11/site-packages/demo/__init__.py").write_text("x = 1\n")
    (prefix / "bin").mkdir()
    (prefix / "bin/demo").write_text("#!/bin/sh\n")
    return StagedVenv(Path("/usr/bin/python3"), venv, prefix, LAYOUT, (), 0.0)


def test_adopt_moves_every_staged_file_into_the_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "lib/python3.11/site-packages").mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "bin/activate").write_text("# venv's\n")
    os.symlink("lib", venv / "lib64")
    staged = _staged(tmp_path, venv)
    adopt(staged, venv, LAYOUT)
    assert (venv / "lib/python3.11/site-packages/demo/__init__.py").read_text() == "x = 1\n"
    assert (venv / "bin/demo").read_text() == "#!/bin/sh\n"
    # the venv's own activate: no wheel replaces it (tests/install/venv/test_guard.py)
    assert (venv / "bin/activate").read_text() == "# venv's\n"
    assert os.readlink(venv / "lib64") == "lib"
    assert [p for p in staged.prefix.rglob("*") if p.is_file()] == []


def test_adopt_refuses_a_venv_laid_out_otherwise(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    staged = _staged(tmp_path, venv)
    other = {**LAYOUT, "platlib": "lib64/python3.11/site-packages"}
    with pytest.raises(InstallError, match="is not the one the wheels were unpacked for"):
        adopt(staged, venv, other)
    assert (staged.prefix / "bin/demo").is_file()  # nothing moved
    with pytest.raises(InstallError):
        adopt(staged, tmp_path / "elsewhere", LAYOUT)
