"""The vault's bytes are what gets installed, whatever the installer has cached.

A team rebuilds its own kernel wheel at the same version (`tinykern 0.1`, published on
no index) and packs again. uv caches a `--find-links` wheel by its directory and file
name and, seen with uv 0.13, serves the cached copy after the file changed: a target
unpacked again at the same path (a redeploy, a reused directory) would get the old
build with exit 0. Both bundles are unpacked at one path with one uv cache and each of the
installers (vault, uv, pip); each time the installed module is the one packed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.run import run_repro

pytestmark = pytest.mark.slow


def _build(base: Path, build: str) -> Path:
    from tests.snapshot.conftest import write_project

    project = write_project(base / f"src-{build}", "tinykern", "tinykern", "0.1", False)
    (project / "tinykern" / "build.py").write_text(f'BUILD = "{build}"\n')
    out = base / f"dist-{build}"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(project)],
        check=True,
    )
    (wheel,) = out.glob("tinykern-0.1-*.whl")
    return wheel


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two bundles of one workspace: tinykern 0.1 built twice with other contents."""
    from tests.snapshot.conftest import PYTHON_311, make_venv, pip

    base = tmp_path_factory.mktemp("vault-bytes")
    root = base / "ws"
    root.mkdir()
    venv = make_venv(PYTHON_311, root / "venv")
    (root / "repro.toml").write_text('[bundle]\nname = "ws"\n\n[env]\nvenv = "venv"\n')
    out: dict[str, Path] = {}
    for build in ("first", "second"):
        pip(venv, "install", "-q", "--force-reinstall", "--no-deps", str(_build(base, build)))
        bundle = base / f"ws-{build}.tar"
        argv = ["pack", str(root), "-o", str(bundle), "--version", "1.0", "--offline"]
        argv += ["--wheels", "all"]
        proc = run_repro(*argv, env={"VIRTUAL_ENV": None})
        assert proc.returncode == 0, proc.stderr.decode()
        out[build] = bundle
    return out


@pytest.mark.parametrize("installer", ["vault", "uv", "pip"])
def test_a_rebuilt_wheel_of_the_same_version_is_installed_not_the_cached_one(
    bundles: dict[str, Path], tmp_path: Path, installer: str
) -> None:
    target = tmp_path / "target"
    env = {"VIRTUAL_ENV": None, "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    for build in ("first", "second"):
        shutil.rmtree(target, ignore_errors=True)
        argv = ["unpack", str(bundles[build]), "--target", str(target), "--cpu", "--no-smoke"]
        proc = run_repro(*argv, "--offline", "--installer", installer, env=env)
        assert proc.returncode == 0, proc.stderr.decode()
        (site,) = (target / "venv" / "lib").glob("python3.*/site-packages")
        assert (site / "tinykern" / "build.py").read_text() == f'BUILD = "{build}"\n'
        code = "import tinykern.build; print(tinykern.build.BUILD)"
        ran = subprocess.run(
            [str(target / "venv" / "bin" / "python"), "-c", code],
            capture_output=True,
            text=True,
            check=True,
        )
        assert ran.stdout.strip() == build
