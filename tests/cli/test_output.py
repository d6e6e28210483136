"""What every verb prints, where: help texts, results on stdout, styles, bundles by URL.

Real bundles (tests/support/bundles.py), the real CLI in a subprocess, a real HTTP server."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro.cli import COMMANDS
from tests.conftest import REPO_ROOT, read_pty
from tests.support.bundles import BundlePair, run_cli, tamper
from tests.support.httpfiles import directory_server


def test_every_summary_in_repro_help_is_whole() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    lines = result.stdout.decode().split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in lines] == sorted(COMMANDS)
    for line in lines:
        assert not line.endswith("..."), line
        assert line.endswith("."), line


@pytest.mark.parametrize("verb", ["pack", "unpack"])
def test_pack_and_unpack_help_carry_an_example_and_the_exit_codes(verb: str) -> None:
    text = run_cli(verb, "--help").stdout.decode()
    assert "Example:" in text and f"repro {verb} " in text
    assert "Exit codes:" in text and "  0  " in text and "  2  usage error" in text


def test_pack_help_says_where_the_bundle_goes_without_o() -> None:
    text = " ".join(run_cli("pack", "--help").stdout.decode().split())
    assert "Without -o the bundle is written into the current directory" in text
    assert "[default: the current directory]" in text


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_every_verb_takes_quiet_and_verbose(verb: str) -> None:
    text = run_cli(verb, "--help").stdout.decode()
    assert "-q, --quiet" in text
    assert "-v, --verbose" in text


@pytest.fixture
def served(bundle_pair: BundlePair) -> Iterator[str]:
    """bundle A's directory of archives on a local HTTP server: its URL prefix."""
    with directory_server(bundle_pair.a.parent) as url:
        yield url


LOCAL = {"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}


def test_check_inspect_and_diff_read_a_bundle_by_url(served: str, bundle_pair: BundlePair) -> None:
    url = f"{served}/{bundle_pair.a.name}"
    check = run_cli("check", url, env_extra=LOCAL)
    assert check.returncode == 0, check.stderr.decode()
    listed = len((bundle_pair.a_dir / "MANIFEST.sha256").read_text().splitlines())
    assert check.stdout.decode() == f"{url}:MANIFEST.sha256: OK: {listed} verified\n"
    inspect = run_cli("inspect", url, env_extra=LOCAL)
    assert inspect.returncode == 0, inspect.stderr.decode()
    assert "verifies" in inspect.stdout.decode()
    diff = run_cli("diff", url, str(bundle_pair.a), env_extra=LOCAL)
    assert diff.returncode == 0, diff.stderr.decode()
    assert "identical" in diff.stdout.decode()
    gone = run_cli("check", f"{served}/absent.tar", env_extra=LOCAL)
    assert gone.returncode == 2
    assert "absent.tar: HTTP 404" in gone.stderr.decode()


@pytest.mark.parametrize(
    ("verb", "args"),
    [("check", ()), ("inspect", ()), ("diff", ("{a}",))],
)
def test_results_go_to_stdout_and_nothing_to_stderr(
    bundle_pair: BundlePair, verb: str, args: tuple[str, ...]
) -> None:
    """`repro VERB b.tar 2>/dev/null | grep` works: the result is all on stdout."""
    extra = [arg.format(a=bundle_pair.a_dir) for arg in args]
    result = run_cli(verb, str(bundle_pair.a), *extra)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.strip()
    assert result.stderr == b""


def _on_a_terminal(*args: str, env: dict[str, str]) -> bytes:
    """stdout of the CLI run with stdout on a pseudo-terminal."""
    main, secondary = pty.openpty()
    child = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TERM": "xterm", **env}
    with subprocess.Popen(
        [sys.executable, "-m", "repro", *args], stdout=secondary, stderr=subprocess.PIPE, env=child
    ) as process:
        os.close(secondary)
        output = read_pty(main)
        process.wait(timeout=120)
    os.close(main)
    return output


def test_no_color_and_color_never_drop_bold_too(bundle_pair: BundlePair, tmp_path: Path) -> None:
    bad = tamper(bundle_pair.a, tmp_path / "bad.tar", "files/bench/results.json", b"{}\n")
    styled = _on_a_terminal("check", str(bad), env={})
    assert b"MISMATCH" in styled and b"\x1b[1" in styled  # bold red
    for args, env in ((("check",), {"NO_COLOR": "1"}), (("--color", "never", "check"), {})):
        plain = _on_a_terminal(*args, str(bad), env=env)
        assert b"MISMATCH" in plain
        assert b"\x1b[" not in plain, (args, env)
