"""A workspace whose venv is not dependency-complete, made so on purpose.

Real packages from PyPI, installed the way real deployments end up incomplete:
requests with `--no-deps` (urllib3, certifi and charset-normalizer never come),
idna at a version requests excludes, and python-dateutil whose dependency six was
uninstalled afterwards.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.run import run, run_process

INCOMPLETE = ("requests==2.32.3", "idna==2.4", "python-dateutil==2.9.0.post0", "six==1.16.0")
UNINSTALLED = ("six",)
# (dist, requires, problem, installed) as `pip check` reports them for this venv
EXPECTED_UNMET = {
    ("python-dateutil", "six>=1.5", "missing", None),
    ("requests", "certifi>=2017.4.17", "missing", None),
    ("requests", "charset-normalizer<4,>=2", "missing", None),
    ("requests", "idna<4,>=2.5", "conflict", "2.4"),
    ("requests", "urllib3<3,>=1.21.1", "missing", None),
}


def make_workspace(root: Path, python: Path, *, complete: bool = False) -> Path:
    """`root` holding `.venv`: dependency-incomplete as described above, or (complete)
    requests with all its dependencies."""
    venv = root / ".venv"
    run([str(python), "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    if complete:
        run([*pip, "install", "-q", "requests==2.32.3"])
    else:
        run([*pip, "install", "-q", "--no-deps", *INCOMPLETE])
        run([*pip, "uninstall", "-q", "-y", *UNINSTALLED])
    return root


def pip_check(root: Path) -> str:
    """What the venv's own `pip check` says (exit status left aside)."""
    argv = [str(root / ".venv" / "bin" / "python"), "-m", "pip", "check"]
    return run_process(argv, timeout=120).stdout
