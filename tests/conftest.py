"""Shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.snapshot.conftest import Venv

from tests.support.bundles import BundlePair, build_bundle_pair
from tests.support.venvs import (
    cached_venv,
    torch_cpu_recipe,
    torch_triton_recipe,
    triton_no_headers_recipe,
    venv_python,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def bundle_pair(tmp_path_factory: pytest.TempPathFactory) -> BundlePair:
    """Bundles A and B of one workspace (tests/support/bundles.py), built once per
    session: the inspect, diff and exit-code tests share them."""
    return build_bundle_pair(tmp_path_factory.mktemp("bundle-pair"))


# the ladder's real targets, cached on disk (tests/support/venvs.py)
@pytest.fixture(scope="session")
def torch_cpu_python() -> Path:
    return venv_python(cached_venv(torch_cpu_recipe()))


@pytest.fixture(scope="session")
def torch_triton_python() -> Path:
    return venv_python(cached_venv(torch_triton_recipe()))


@pytest.fixture(scope="session")
def triton_no_headers_python() -> Path:
    return venv_python(cached_venv(triton_no_headers_recipe()))


@pytest.fixture(scope="session")
def sglang_env(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A venv holding the real sglang wheel (no dependencies: it is only scanned and packed).

    Tests that edit a file in it restore it before they return."""
    from tests.snapshot.conftest import PYTHON_311, make_venv, pip

    venv = make_venv(PYTHON_311, tmp_path_factory.mktemp("sglang") / "venv")
    pip(venv, "install", "-q", "--no-deps", "sglang")
    return venv


def unpacked_venv(target: Path) -> Path:
    """The venv `repro unpack` rebuilt in TARGET: at the workspace's venv place, which
    the kept bundle.toml records ([workspace] venv; the target itself for format 1)."""
    from repro.bundle.info import load_bundle_info

    toml = target / ".repro" / "bundle" / "bundle.toml"
    info = load_bundle_info(toml.read_bytes(), source=str(toml))
    return target if info.workspace.venv == "." else target / info.workspace.venv


def read_pty(main: int) -> bytes:
    """Everything written to a pseudo-terminal until its other side is closed (Linux
    answers EIO then)."""
    output = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:
            return output
        if not chunk:
            return output
        output += chunk


# Ctrl-C reaches a process in a terminal's foreground, whose SIGINT is not ignored. A
# test run started in the background of a non-interactive shell (`cmd &`, nohup)
# inherits SIGINT ignored, and Python then leaves it ignored (a smoke ran to its timeout
# in such a run): `python -c SIGINT_DEFAULT -m repro ...` gives repro the disposition
# and the signal mask a terminal's process has, then execs it.
SIGINT_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "signal.pthread_sigmask(signal.SIG_SETMASK, ()); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)
