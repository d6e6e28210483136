"""repro/probe/freeze.py: `pip freeze --all` of the target, as pip prints it; without
pip, pip's own message and exit status."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from repro.interpreter import run_target_script, target_env
from tests.probe.conftest import bare_venv


def test_the_same_lines_as_pip_freeze(python: Path, tmp_path: Path) -> None:
    venv = tmp_path / "v"
    subprocess.run([str(python), "-m", "venv", str(venv)], check=True, timeout=300)
    vpython = venv / "bin" / "python"
    env = target_env(os.environ)
    ours = run_target_script(vpython, "freeze.py", timeout=120, site=True, env=env)
    assert ours.returncode == 0, ours.stderr
    pips = subprocess.run(
        [str(vpython), "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert ours.stdout == pips.stdout
    assert any(line.startswith("pip==") for line in ours.stdout.splitlines())


def test_without_pip_it_says_so(python: Path, tmp_path: Path) -> None:
    venv = tmp_path / "v"
    bare_venv(python, venv)
    proc = run_target_script(venv / "bin" / "python", "freeze.py", timeout=60, site=True)
    assert proc.returncode == 1
    assert "No module named pip" in proc.stderr
