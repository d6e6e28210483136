"""pip-sync, uv and repro's vault installer install exactly the lock, nothing resolved,
with the same result.

Through the real CLI: a real venv made dependency-incomplete on purpose (see
tests/support/incomplete_env.py), packed by `repro pack`, rebuilt by `repro unpack` with
each installer, offline from the vault and online from PyPI.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from repro.install.venv.installer import installer_lines
from repro.install.venv.site import read_installed
from tests.support.incomplete_env import make_workspace, pip_check
from tests.support.venvs import find_python
from tests.install.test_unpack import NO_NETWORK, locked_pins, pack, unpack

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class IncompleteBundles:
    all_wheels: Path  # --wheels all: installable offline
    auto: Path  # --wheels auto: every wheel from PyPI


@pytest.fixture(scope="module")
def incomplete(tmp_path_factory: pytest.TempPathFactory) -> IncompleteBundles:
    root = tmp_path_factory.mktemp("incomplete")
    workspace = make_workspace(root / "ws", find_python("3.11"))
    assert "requires urllib3, which is not installed" in pip_check(workspace)
    out = root / "bundles"
    return IncompleteBundles(
        pack(workspace, out, "1", "--wheels", "all"), pack(workspace, out, "2")
    )


def rebuilt_python(target: Path, report: dict[str, Any]) -> Path:
    """The rebuilt venv's interpreter: from the report when it names the venv, else the
    one venv under the target (its place inside the target is the layout's business)."""
    venv = report.get("venv")
    if isinstance(venv, str):
        return Path(venv) / "bin" / "python"
    configs = [
        path
        for path in target.rglob("pyvenv.cfg")
        if ".repro" not in path.relative_to(target).parts
    ]
    assert len(configs) == 1, configs
    return configs[0].parent / "bin" / "python"


def rebuild(bundle: Path, target: Path, installer: str, *, offline: bool) -> Path:
    args = ["--cpu", "--no-smoke", "--json", "--installer", installer]
    result = unpack(
        bundle,
        target,
        *args,
        *(["--offline"] if offline else []),
        env=NO_NETWORK if offline else None,
    )
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    (install,) = [step for step in report["steps"] if step["name"] == "install"]
    # pack found the source's five unmet requirements; the install says so and succeeds
    assert "5 requirement(s) were unmet at pack time" in install["detail"]
    return rebuilt_python(target, report)


# written by an installer about itself, or only by some installers
NOT_COMPARED = {"INSTALLER", "RECORD", "REQUESTED", "direct_url.json", "uv_cache.json"}


VENV_OWN = ("activate", "Activate", "deactivate", "python", "pydoc")


def installed_files(python: Path) -> dict[str, bytes]:
    """Every file of the venv but bytecode and the installers' own notes, by path; a
    script's interpreter line read as the path it names, relative to the venv."""
    venv = python.parent.parent
    files: dict[str, bytes] = {}
    for path in sorted(venv.rglob("*")):
        rel = path.relative_to(venv)
        if not path.is_file() or path.is_symlink() or "__pycache__" in rel.parts:
            continue
        if rel.parts[0] == "bin" and rel.name.startswith(VENV_OWN):
            continue  # the venv's own, made by `python -m venv` or `uv venv`
        if rel.name in NOT_COMPARED or len(rel.parts) == 1:  # pyvenv.cfg, uv's .gitignore
            continue
        files[rel.as_posix()] = path.read_bytes().replace(str(venv).encode(), b"VENV")
    return files


def assert_records_match(python: Path) -> None:
    """Each dist-info's RECORD lists every file it installed with the file's own hash."""
    import base64
    import csv
    import hashlib

    records = list(python.parent.parent.glob("lib/python*/site-packages/*.dist-info/RECORD"))
    assert records
    for record in records:
        root = record.parent.parent
        for row in csv.reader(record.read_text().splitlines()):
            path = (root / row[0]).resolve()
            assert path.is_file(), (record, row[0])
            if row[1]:
                digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest())
                assert row[1] == "sha256=" + digest.rstrip(b"=").decode(), (record, row[0])
                assert int(row[2]) == path.stat().st_size


def venv_pip_check(python: Path) -> str:
    argv = [str(python), "-m", "pip", "check"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False).stdout


@pytest.mark.parametrize("offline", [True, False], ids=["offline", "online"])
def test_pip_and_uv_install_exactly_the_incomplete_lock(
    incomplete: IncompleteBundles, tmp_path: Path, offline: bool
) -> None:
    bundle = incomplete.all_wheels if offline else incomplete.auto
    lock = locked_pins(bundle)
    assert {"requests", "idna", "python-dateutil"} <= set(lock)
    assert not {"urllib3", "certifi", "charset-normalizer", "six"} & set(lock)
    installers = ("pip", "uv", "vault") if offline else ("pip", "uv")
    rebuilt = {
        installer: read_installed(rebuild(bundle, tmp_path / installer, installer, offline=offline))
        for installer in installers
    }
    for installer in installers:
        assert rebuilt[installer] == lock, installer
    # As incomplete as the source, in the same way: nothing was resolved by any.
    checks = {
        installer: venv_pip_check(rebuilt_python(tmp_path / installer, {}))
        for installer in installers
    }
    assert len(set(checks.values())) == 1, checks
    assert "requests 2.32.3 requires urllib3, which is not installed" in checks["pip"]
    if offline:
        # file for file, byte for byte what uv installed (bytecode and the installer's
        # own name aside), and RECORD lists every file with its hash
        uv_files = installed_files(rebuilt_python(tmp_path / "uv", {}))
        vault_python = rebuilt_python(tmp_path / "vault", {})
        assert installed_files(vault_python) == uv_files
        assert_records_match(vault_python)


@pytest.mark.parametrize(
    ("installer", "what", "says"),
    [
        ("pip", "pip-sync failed (exit 1)", "No matching distribution found for"),
        ("uv", "uv pip sync failed (exit 1)", "was not found in the provided package locations"),
    ],
)
def test_a_wheel_missing_offline_fails_with_the_installers_own_lines(
    incomplete: IncompleteBundles, tmp_path: Path, installer: str, what: str, says: str
) -> None:
    """The bundle packed with --wheels auto holds no wheel of requests: offline, each
    installer says so in its own words, as repro's install error (exit 3)."""
    target = tmp_path / installer
    args = ("--cpu", "--no-smoke", "--offline", "--installer", installer)
    result = unpack(incomplete.auto, target, *args, env=NO_NETWORK)
    err = result.stderr.decode()
    assert result.returncode == 3, err
    assert f"repro: error: {what}" in err
    assert says in err
    assert "Traceback" not in err
    assert "hint: the lines above are the installer's own" in err


PIP_SYNC_FAILURE = """\
ERROR: Could not find a version that satisfies the requirement tzdata (from versions: none)
ERROR: No matching distribution found for tzdata
Traceback (most recent call last):
  File "/venv/bin/pip-sync", line 8, in <module>
    sys.exit(cli())
             ^^^^^
  File "/venv/lib/python3.11/site-packages/piptools/sync.py", line 280, in sync
    run(  # nosec
subprocess.CalledProcessError: Command '['python', '-m', 'pip']' returned non-zero exit status 1.
"""
CHAINED = """\
Traceback (most recent call last):
  File "a.py", line 1, in <module>
KeyError: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "a.py", line 3, in <module>
OSError: [Errno 28] No space left on device
"""


@pytest.mark.parametrize(
    ("output", "lines"),
    [
        (
            PIP_SYNC_FAILURE,
            [
                "ERROR: Could not find a version that satisfies the requirement tzdata "
                "(from versions: none)",
                "ERROR: No matching distribution found for tzdata",
            ],
        ),
        (CHAINED, ["KeyError: 'x'", "", "", "OSError: [Errno 28] No space left on device"]),
        ("error: No solution found\n  hint: a\n", ["error: No solution found", "  hint: a"]),
        ("", []),
    ],
    ids=["pip-sync-traceback", "chained", "no-traceback", "empty"],
)
def test_installer_lines_leave_tracebacks_out(output: str, lines: list[str]) -> None:
    assert installer_lines(output) == lines


def test_the_callers_uv_cache_is_used_and_an_index_redirect_is_not(
    incomplete: IncompleteBundles, tmp_path: Path
) -> None:
    """UV_CACHE_DIR (the user's cache setting) reaches uv; UV_INDEX_URL (a redirect of
    where packages come from) does not: it names a port nothing listens on."""
    cache = tmp_path / "uv-cache"
    env = {**NO_NETWORK, "UV_CACHE_DIR": str(cache), "UV_INDEX_URL": "http://127.0.0.1:9/simple"}
    args = ["--cpu", "--no-smoke", "--json", "--installer", "uv", "--offline"]
    result = unpack(incomplete.all_wheels, tmp_path / "t", *args, env=env)
    assert result.returncode == 0, result.stderr.decode()
    assert any(path.is_file() for path in cache.rglob("*")), "uv did not use UV_CACHE_DIR"


def test_the_callers_xdg_cache_home_reaches_uv(
    incomplete: IncompleteBundles, tmp_path: Path
) -> None:
    """Without UV_CACHE_DIR, uv caches under XDG_CACHE_HOME/uv: the caller's setting is
    kept, not dropped with the variables that redirect where packages come from."""
    xdg = tmp_path / "xdg"
    env = {**NO_NETWORK, "UV_CACHE_DIR": None, "XDG_CACHE_HOME": str(xdg)}
    args = ["--cpu", "--no-smoke", "--json", "--installer", "uv", "--offline"]
    result = unpack(incomplete.all_wheels, tmp_path / "t", *args, env=env)
    assert result.returncode == 0, result.stderr.decode()
    assert any(p.is_file() for p in (xdg / "uv").rglob("*")), "uv did not use XDG_CACHE_HOME"
