"""Helpers shared by the ladder tests."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

from repro.ladder import LadderSpec, LaunchSpec, Timeouts

FAKE_SERVER = Path(__file__).resolve().parent / "doubles" / "engine_server.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def alive(pid: int) -> bool:
    """True while a process exists and is not a zombie (reads /proc directly)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def group_alive(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def read_pids(path: Path, wait: float = 10.0) -> dict[str, int]:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return dict(json.loads(path.read_text()))
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def fake_launch(
    port: int, mode: str, pid_file: Path, *extra: str, engine: str = "openai"
) -> LaunchSpec:
    argv = (
        sys.executable,
        str(FAKE_SERVER),
        "--port",
        str(port),
        "--mode",
        mode,
        "--pid-file",
        str(pid_file),
        *extra,
    )
    return LaunchSpec(name=f"fake-{mode}", port=port, engine=engine, argv=argv)


def server_spec(launch: LaunchSpec, log_dir: Path, **timeouts: float) -> LadderSpec:
    return LadderSpec(
        python=Path(sys.executable),
        rungs=("server",),
        launch=launch,
        timeouts=Timeouts(**timeouts),
        log_dir=log_dir,
    )
