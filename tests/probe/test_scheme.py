"""repro/probe/scheme.py: where an interpreter installs, read with site on (a venv's
prefix is set by site.py from its pyvenv.cfg)."""

from __future__ import annotations

import json
from pathlib import Path

from repro.interpreter import run_target_script
from tests.probe.conftest import bare_venv


def test_a_venvs_scheme_is_under_the_venv(python: Path, tmp_path: Path) -> None:
    venv = tmp_path / "v"
    bare_venv(python, venv)
    proc = run_target_script(venv / "bin" / "python", "scheme.py", timeout=60, site=True)
    assert proc.returncode == 0, proc.stderr
    paths = json.loads(proc.stdout)
    assert Path(paths["purelib"]).is_dir()
    assert Path(paths["purelib"]).is_relative_to(venv)
    assert paths["scripts"] == str(venv / "bin")
    # Without site processing the prefix is the base interpreter's: why scheme.py runs
    # with site on, and venv_site.py finds the venv from the executable instead.
    bare = run_target_script(venv / "bin" / "python", "scheme.py", timeout=60)
    assert not Path(json.loads(bare.stdout)["purelib"]).is_relative_to(venv)
