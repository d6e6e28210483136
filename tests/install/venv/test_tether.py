"""Installers run tethered to repro (repro/install/venv/tether.py): real processes, real
signals. A command and everything it starts end when repro dies, whatever the kill,
and when the timeout passes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.install.venv.tether import run_tethered
from tests.conftest import REPO_ROOT

# Starts a child that would sleep for five minutes, writes its PID to argv[1], waits.
SPAWNS_A_SLEEPER = (
    "import subprocess, sys, time; from pathlib import Path; "
    "p = subprocess.Popen(['sleep', '300']); Path(sys.argv[1] + '.tmp').write_text(str(p.pid)); "
    "Path(sys.argv[1] + '.tmp').rename(sys.argv[1]); time.sleep(300)"
)


def sleeper_pid(path: Path) -> int:
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return int(path.read_text())


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie waiting for its reaper."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not alive(pid)


def test_output_and_exit_status_pass_through() -> None:
    script = "import sys; print('out'); sys.stderr.write('err'); sys.exit(3)"
    result = run_tethered([sys.executable, "-c", script], timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err")
    assert result.args == [sys.executable, "-c", script]


def test_a_command_that_cannot_run_is_named() -> None:
    result = run_tethered(["/nonexistent/installer", "--help"], timeout=60)
    assert result.returncode == 127
    assert result.stderr == "/nonexistent/installer: No such file or directory\n"


def test_a_timeout_ends_the_command_and_what_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(subprocess.TimeoutExpired):
        run_tethered([sys.executable, "-c", SPAWNS_A_SLEEPER, str(pid_file)], timeout=3)
    assert gone_within(sleeper_pid(pid_file), 2)


@pytest.mark.parametrize("kill", ["pid", "group"])
def test_the_command_and_what_it_started_die_with_repro(kill: str, tmp_path: Path) -> None:
    """repro (here a Python process that runs a command tethered) is SIGKILLed, its PID
    alone or its whole process group: the command's own child dies too, within a
    second. Without the tether, a PID kill left both running."""
    pid_file = tmp_path / "pid"
    caller = (
        "import sys; from repro.install.venv.tether import run_tethered; "
        f"run_tethered([sys.executable, '-c', {SPAWNS_A_SLEEPER!r}, sys.argv[1]], timeout=600)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    repro = subprocess.Popen(
        [sys.executable, "-c", caller, str(pid_file)], env=env, start_new_session=True
    )
    sleeper = sleeper_pid(pid_file)
    assert alive(sleeper)
    if kill == "pid":
        os.kill(repro.pid, signal.SIGKILL)
    else:
        os.killpg(repro.pid, signal.SIGKILL)
    repro.wait(timeout=60)
    assert gone_within(sleeper, 1)
