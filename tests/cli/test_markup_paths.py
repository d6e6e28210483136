"""Paths are text, never rich markup: a workspace under `w[b]x` is printed as `w[b]x`
(rich would read `[b]` as bold and print `wx`) by pack, check, inspect and unpack.

A real workspace (a venv with six, patched) under such a directory, through the real
CLI, with a console wide enough that no table cell wraps a path.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.run import run_repro
from tests.support.venvs import find_python

pytestmark = pytest.mark.slow

WIDE = {"COLUMNS": "500", "NO_COLOR": "1"}


@pytest.fixture(scope="module")
def marked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory named `w[b]x` holding the workspace `ws` and, after pack, `out/`."""
    root = tmp_path_factory.mktemp("markup") / "w[b]x"
    ws = root / "ws"
    ws.mkdir(parents=True)
    venv = ws / ".venv"
    for argv in (
        [str(find_python("3.11")), "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "six==1.16.0"],
    ):
        subprocess.run(argv, check=True, capture_output=True, timeout=600)
    (six,) = venv.glob("lib/python3.11/site-packages/six.py")
    six.write_text(six.read_text() + "PATCHED = 1\n")
    return root


def _repro_wide(*args: str) -> tuple[str, str]:
    result = run_repro(*args, env=WIDE)
    stdout, stderr = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, stderr
    return stdout, stderr


@pytest.fixture(scope="module")
def bundle(marked: Path) -> Path:
    out = marked / "out" / "demo-1.tar"
    stdout, stderr = _repro_wide(
        "pack", str(marked / "ws"), "-o", str(out), "--name", "demo", "--wheels", "all"
    )
    assert stdout == f"{out}\n"  # the path alone, for $(...)
    assert f"pack: writing {out}" in stderr
    assert f"bundle        │ {out}" in stderr  # the summary's row
    return out


def test_pack_prints_the_path_intact(bundle: Path) -> None:
    assert "[b]" in str(bundle) and bundle.is_file()


def test_check_prints_the_path_intact(bundle: Path) -> None:
    stdout, _ = _repro_wide("check", str(bundle))
    assert f"{bundle}:MANIFEST.sha256: OK: " in stdout


def test_inspect_prints_the_path_intact(bundle: Path) -> None:
    stdout, _ = _repro_wide("inspect", str(bundle))
    assert f"│ {bundle}" in stdout
    assert "verifies (" in stdout


def test_unpack_prints_the_paths_intact(bundle: Path, marked: Path) -> None:
    target = marked / "target"
    stdout, stderr = _repro_wide(
        "unpack", str(bundle), "--target", str(target), "--offline", "--cpu"
    )
    assert f"unpack demo 1 -> {target}" in stdout
    assert f"fresh venv at {target}/.venv" in stderr
    assert f"{target}/services" in stderr
