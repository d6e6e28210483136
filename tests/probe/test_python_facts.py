"""repro/probe/python_facts.py: version, include directory and the real executable, as
the preflight asks a candidate interpreter, also through a venv's symlinked python."""

from __future__ import annotations

import json
from pathlib import Path

from repro.interpreter import run_target_script
from tests.probe.conftest import asked_natively, bare_venv


def test_the_facts_are_the_interpreters_own(python: Path) -> None:
    proc = run_target_script(python, "python_facts.py", timeout=60)
    assert proc.returncode == 0, proc.stderr
    native = asked_natively(
        python,
        "import json, sys, sysconfig; print(json.dumps({'version': '.'.join(map(str, "
        "sys.version_info[:3])), 'include': sysconfig.get_paths()['include'], "
        "'executable': sys.executable}))",
    )
    assert json.loads(proc.stdout) == native
    assert Path(native["include"], "Python.h").is_file()


def test_through_a_venv_the_include_is_the_base_interpreters(python: Path, tmp_path: Path) -> None:
    bare_venv(python, tmp_path / "v")
    proc = run_target_script(tmp_path / "v" / "bin" / "python", "python_facts.py", timeout=60)
    facts = json.loads(proc.stdout)
    assert facts["executable"] == str(tmp_path / "v" / "bin" / "python")
    assert Path(facts["include"], "Python.h").is_file()
