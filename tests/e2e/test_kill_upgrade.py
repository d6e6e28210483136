"""A SIGKILL of the process group at any moment of an upgrade in place or of a rollback,
then the same command again: the target ends as an uninterrupted run leaves it, never
a mixed venv.

The bundles are tests/support/upgrades.py's pair (demo 1 and 2 of one workspace: a
patch changed, six upgraded, iniconfig added, tomli removed). For each kill point,
demo 1 is unpacked into TARGET (the same path each time, so the paths written into
scripts agree), the upgrade to demo 2 is started through `tests.support.stop_at`, which
stops it right after the named event, and its process group is killed there. The
rerun must exit 0, `repro verify` must pass, and the tree must be the uninterrupted
upgrade's, file for file (state history aside). A rollback is killed after a few
delays (it reports no events; one that finished before its kill is only checked), then
run again: the tree must be demo 1's as it was,
state.toml included.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.run import run_repro
from tests.support.stop_at import python_argv
from tests.support.upgrades import (
    UNPACK_ARGS,
    UpgradePair,
    build_upgrade_pair,
    differences,
    ok,
    tree,
    unpack,
)

pytestmark = pytest.mark.slow

POINTS = (
    "upgrade plan",
    "upgrade bundle",
    "upgrade removed",
    "upgrade installed",
    "patch started",
    "workspace started",
    "services started",
    "upgrade release",
)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> UpgradePair:
    return build_upgrade_pair(tmp_path_factory.mktemp("kill-upgrade-pair"))


@pytest.fixture(scope="module")
def reference(
    pair: UpgradePair, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, str], dict[str, str]]:
    """The target's path, demo 1's tree there, and the uninterrupted upgrade's tree."""
    target = tmp_path_factory.mktemp("kill-upgrade") / "t"
    ok(unpack(pair.v1, target))
    v1 = tree(target)
    ok(unpack(pair.v2, target))
    v2 = tree(target, history=False)
    shutil.rmtree(target)
    return target, v1, v2


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


def _start(args: tuple[str, ...], log: Path, stop_at: str | None) -> subprocess.Popen[bytes]:
    with log.open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, *python_argv(*args, stop_at=stop_at)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=_env(),
            start_new_session=True,
        )


def _wait_stopped(proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pid, status = os.waitpid(proc.pid, os.WUNTRACED | os.WNOHANG)
        if pid == 0:
            time.sleep(0.002)
            continue
        if os.WIFSTOPPED(status):
            return
        pytest.fail(f"ended (status {status}) before the stop:\n{log.read_text()}")
    proc.kill()
    pytest.fail(f"never stopped:\n{log.read_text()}")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.parametrize("point", POINTS)
def test_an_upgrade_killed_there_is_finished_by_the_same_command(
    pair: UpgradePair,
    reference: tuple[Path, dict[str, str], dict[str, str]],
    point: str,
    tmp_path: Path,
) -> None:
    target, _v1, v2 = reference
    shutil.rmtree(target, ignore_errors=True)
    ok(unpack(pair.v1, target))
    args = ("unpack", str(pair.v2), "--target", str(target), *UNPACK_ARGS, "-v")
    log = tmp_path / "killed.log"
    proc = _start(args, log, point)
    _wait_stopped(proc, log)
    _kill_group(proc)
    ok(unpack(pair.v2, target))
    ok(run_repro("verify", str(target)))
    assert differences(tree(target, history=False), v2) == []
    shutil.rmtree(target)


@pytest.mark.parametrize("delay", [0.25, 0.35, 0.45, 0.55])
def test_a_rollback_killed_is_finished_by_running_it_again(
    pair: UpgradePair,
    reference: tuple[Path, dict[str, str], dict[str, str]],
    delay: float,
    tmp_path: Path,
) -> None:
    target, v1, _v2 = reference
    shutil.rmtree(target, ignore_errors=True)
    ok(unpack(pair.v1, target))
    ok(unpack(pair.v2, target))
    proc = _start(("rollback", str(target)), tmp_path / "rollback.log", None)
    time.sleep(delay)
    _kill_group(proc)
    journal = target / ".repro" / "rollback-journal.toml"
    # killed before it finished (its journal is there, or it had not begun: the target
    # still holds demo 2): the same command finishes it. Killed after its last write,
    # it is done, and a second rollback would go back further.
    if journal.exists() or 'version = "2"' in (target / ".repro" / "state.toml").read_text():
        ok(run_repro("rollback", str(target)))
    assert differences(tree(target), v1) == []
    ok(run_repro("verify", str(target)))
    shutil.rmtree(target)
