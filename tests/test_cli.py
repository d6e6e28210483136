from __future__ import annotations

from repro import __version__
from tests.conftest import run_repro


def test_version_via_module() -> None:
    result = run_repro("--version")
    assert result.returncode == 0
    assert __version__ in result.stdout.decode()


def test_unknown_command_is_usage_error() -> None:
    result = run_repro("no-such-command")
    assert result.returncode == 2
    assert b"no-such-command" in result.stderr
