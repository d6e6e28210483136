"""repro/probe/venv_site.py: a venv's directories, distributions and scheme, read
without site processing (nothing of site-packages runs, not even a .pth file)."""

from __future__ import annotations

import json
from pathlib import Path

from repro.interpreter import run_target_script
from tests.probe.conftest import bare_venv


def _answer(python: Path, *args: str) -> object:
    proc = run_target_script(python, "venv_site.py", args, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_venv_seen_from_its_python_without_site(python: Path, tmp_path: Path) -> None:
    venv = tmp_path / "v"
    bare_venv(python, venv)
    vpython = venv / "bin" / "python"
    dirs = _answer(vpython, "dirs")
    assert isinstance(dirs, list) and len(dirs) == 1
    site = Path(dirs[0])
    assert site.is_relative_to(venv) and site.is_dir()
    # A distribution, and a .pth file that would write a file if it ran.
    info = site / "demo-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 1.2\n")
    ran = tmp_path / "ran"
    (site / "evil.pth").write_text(f"import pathlib; pathlib.Path({str(ran)!r}).touch()\n")
    assert _answer(vpython, "distributions") == {"demo": "1.2"}
    scheme = _answer(vpython, "scheme")
    assert isinstance(scheme, dict)
    assert scheme["prefix"] == str(venv) and scheme["scripts"] == str(venv / "bin")
    other = _answer(vpython, "scheme", str(tmp_path / "elsewhere"))
    assert isinstance(other, dict) and other["purelib"].startswith(str(tmp_path / "elsewhere"))
    assert not ran.exists()


def test_a_wrong_question_is_a_usage_error(python: Path) -> None:
    proc = run_target_script(python, "venv_site.py", ["nonsense"], timeout=60)
    assert proc.returncode == 2 and "usage: venv_site.py" in proc.stderr
