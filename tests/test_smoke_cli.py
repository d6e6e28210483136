"""`repro smoke` as a user runs it: exit codes, JSON, Ctrl-C during the server rung."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO_ROOT, run_repro
from tests.ladder_helpers import FAKE_SERVER, free_port, group_alive, read_pids


def fake_command(port: int, mode: str, pid_file: Path, *extra: str) -> str:
    argv = [sys.executable, str(FAKE_SERVER), "--port", str(port), "--mode", mode]
    return shlex.join([*argv, "--pid-file", str(pid_file), *extra])


def test_smoke_json_report_and_exit_code_zero(tmp_path: Path) -> None:
    port = free_port()
    command = fake_command(port, "ready", tmp_path / "pids.json")
    result = run_repro(
        "smoke",
        "--python",
        sys.executable,
        "--rungs",
        "python,server",
        "--launch",
        command,
        "--json",
        "--log-dir",
        str(tmp_path),
        "--timeout",
        "30",
    )
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert [r["name"] for r in report["rungs"]] == ["python", "server"]
    server = report["rungs"][1]
    assert server["status"] == "pass"
    assert server["facts"]["port"] == port
    assert "server" in result.stderr.decode()


def test_smoke_failure_exits_5_and_shows_log_tail(tmp_path: Path) -> None:
    port = free_port()
    command = fake_command(port, "broken-generation", tmp_path / "pids.json")
    result = run_repro(
        "smoke",
        "--python",
        sys.executable,
        "--rungs",
        "server",
        "--launch",
        command,
        "--log-dir",
        str(tmp_path),
        "--timeout",
        "30",
    )
    assert result.returncode == 5
    stderr = result.stderr.decode()
    assert "generation failed" in stderr
    assert "head_dim=16" in stderr
    assert group_alive(read_pids(tmp_path / "pids.json")["pgid"]) == []


def test_smoke_needs_a_target(tmp_path: Path) -> None:
    env_without_venv = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    result = subprocess.run(
        [sys.executable, "-m", "repro", "smoke"],
        capture_output=True,
        env={**env_without_venv, "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--venv DIR or --python PATH" in result.stderr.decode()


def test_unknown_rung_is_a_usage_error() -> None:
    result = run_repro("smoke", "--python", sys.executable, "--rungs", "torch,warp")
    assert result.returncode == 2
    assert "unknown rung(s) in --rungs: warp" in result.stderr.decode()


def test_ctrl_c_during_server_rung_tears_the_server_down(tmp_path: Path) -> None:
    port = free_port()
    pid_file = tmp_path / "pids.json"
    command = fake_command(port, "never-bind", pid_file, "--child")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT)
    smoke = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "repro",
            "smoke",
            "--python",
            sys.executable,
            "--rungs",
            "server",
            "--launch",
            command,
            "--timeout",
            "120",
            "--log-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        pids = read_pids(pid_file, wait=30)
        assert group_alive(pids["pgid"]), "the server should be running"
        time.sleep(1.5)  # well inside the readiness loop
        smoke.send_signal(signal.SIGINT)
        try:
            # teardown is SIGTERM, up to 15 s grace, SIGKILL: seconds, but a loaded 2-core
            # CI machine has once taken over 60 s; a hang shows its output below
            _, stderr = smoke.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            smoke.kill()
            _, late = smoke.communicate()
            raise AssertionError(f"smoke did not stop after SIGINT:\n{late.decode()}") from None
    finally:
        if smoke.poll() is None:
            smoke.kill()
    assert smoke.returncode == 130, stderr.decode()
    assert "repro: aborted" in stderr.decode()
    assert group_alive(pids["pgid"]) == []
