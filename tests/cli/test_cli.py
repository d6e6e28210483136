from __future__ import annotations

import pytest

from repro import __version__
from tests.support.run import run_repro


def test_version_via_module() -> None:
    result = run_repro("--version")
    assert result.returncode == 0
    assert __version__ in result.stdout.decode()


def test_unknown_command_is_usage_error() -> None:
    result = run_repro("no-such-command")
    assert result.returncode == 2
    assert b"no-such-command" in result.stderr


def test_an_os_error_is_a_message_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    import click

    from repro.cli._common import run_guarded

    @click.group()
    def group() -> None:
        pass

    @group.command()
    def fill() -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "/srv/b.tar")

    monkeypatch.setattr("sys.argv", ["repro", "fill"])
    with pytest.raises(SystemExit) as exited:
        run_guarded(group)
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.strip() == "repro: error: No space left on device (/srv/b.tar)"
