"""The engine rung's patch checks, in a real venv whose installed pip we patch by hand.

The rung checks patched files of any distribution the same way; pip is the
distribution every fresh venv has, so no download is needed.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from repro.ladder import AppliedPatch, LadderSpec, RungStatus, run_ladder

pytestmark = pytest.mark.slow


@pytest.fixture
def venv(tmp_path: Path) -> tuple[Path, Path]:
    """A fresh venv and its site-packages."""
    root = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300)
    (site,) = (root / "lib").glob("python*/site-packages")
    return root / "bin" / "python", site


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def engine_spec(python: Path, patched: tuple[AppliedPatch, ...]) -> LadderSpec:
    return LadderSpec(python=python, rungs=("engine",), engines=(), patched_files=patched)


def test_patched_files_verified_and_imported(venv: tuple[Path, Path]) -> None:
    python, site = venv
    modified = site / "pip" / "__init__.py"
    modified.write_text(modified.read_text() + "\nREPRO_PATCHED = True\n")
    added = site / "pip" / "_repro_added.py"
    added.write_text("VALUE = 1\n")
    (site / "pip" / "py.typed").unlink()
    patched = (
        AppliedPatch("pip", "pip/__init__.py", "modified", sha(modified)),
        AppliedPatch("pip", "pip/_repro_added.py", "added", sha(added)),
        AppliedPatch("pip", "pip/py.typed", "deleted", None),
    )
    result = run_ladder(engine_spec(python, patched)).result("engine")
    assert result.status is RungStatus.PASS, result
    assert result.summary == "3 patched file(s) verified"
    assert [i["module"] for i in result.facts["imports"]] == ["pip", "pip._repro_added"]


def test_patched_file_with_other_hash_fails(venv: tuple[Path, Path]) -> None:
    python, _ = venv
    patched = (AppliedPatch("pip", "pip/__init__.py", "modified", "0" * 64),)
    result = run_ladder(engine_spec(python, patched)).result("engine")
    assert result.status is RungStatus.FAIL
    assert "pip:pip/__init__.py: sha256 differs from the patched file" in result.summary
    assert "patch is not applied" in (result.hint or "")


def test_deleted_file_that_exists_and_missing_dist_fail(venv: tuple[Path, Path]) -> None:
    python, _ = venv
    patched = (
        AppliedPatch("pip", "pip/py.typed", "deleted", None),
        AppliedPatch("sglang", "sglang/srt/x.py", "modified", "0" * 64),
    )
    result = run_ladder(engine_spec(python, patched)).result("engine")
    assert result.status is RungStatus.FAIL
    assert "should have been deleted" in result.summary
    assert "distribution sglang is not installed" in result.summary


def test_patch_that_breaks_an_import_fails_here(venv: tuple[Path, Path]) -> None:
    python, site = venv
    broken = site / "pip" / "_internal" / "repro_broken.py"
    broken.write_text("from pip._internal.utils import no_such_name\n")
    patched = (AppliedPatch("pip", "pip/_internal/repro_broken.py", "added", sha(broken)),)
    result = run_ladder(engine_spec(python, patched)).result("engine")
    assert result.status is RungStatus.FAIL
    assert "import pip._internal.repro_broken: ImportError" in result.summary
    assert any("no_such_name" in line for line in result.output_tail)
