"""The target-side scripts of repro/probe/, each run by the one runner
(`repro.interpreter.run_target_script`) with real interpreters of other versions than
ours, and its answer compared with what that interpreter says of itself."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import packaging
import pytest

from repro.interpreter import target_env
from tests.support.venvs import find_python

# pyenv's 3.10 and 3.12, and Debian's own 3.11 (the fresh box's kind of interpreter).
VERSIONS = ("3.10", "3.11", "3.12")
PACKAGING_DIR = Path(packaging.__file__).resolve().parent.parent


def interpreter(version: str) -> Path:
    return Path("/usr/bin/python3.11") if version == "3.11" else find_python(version)


@pytest.fixture(params=VERSIONS)
def python(request: pytest.FixtureRequest) -> Path:
    return interpreter(str(request.param))


def asked_natively(python: Path, code: str, *, with_packaging: bool = False) -> Any:
    """What `python` prints as JSON for `code`, run plainly (`-c`), with pypa/packaging
    on its path where the comparison needs the reference implementation."""
    env = target_env()
    if with_packaging:
        env["PYTHONPATH"] = str(PACKAGING_DIR)
    proc = subprocess.run(
        [str(python), "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    return json.loads(proc.stdout)


def bare_venv(python: Path, venv: Path) -> Path:
    """A venv of `python` without pip at `venv`; its interpreter."""
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv / "bin" / "python"


def purelib(python: Path) -> Path:
    """The interpreter's purelib directory, as it says itself (site on)."""
    return Path(
        asked_natively(
            python, "import json, sysconfig; print(json.dumps(sysconfig.get_paths()['purelib']))"
        )
    )
