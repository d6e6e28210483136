"""Tests of repro.ladder.process: a server's process group, started and stopped."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from repro.errors import Terminated
from repro.ladder.process import (
    group_members,
    log_errors,
    log_tail,
    port_taken,
    sigint_deferred,
    start_server,
    stop_group,
    terminated_raises,
)


def _wait_for(path: Path, lines: int) -> list[int]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = path.read_text().split() if path.exists() else []
        if len(found) >= lines:
            return [int(pid) for pid in found]
        time.sleep(0.05)
    raise AssertionError(f"{path}: the tree did not start")


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _tree(tmp_path: Path, trap: str = "") -> tuple[list[str], Path]:
    pids = tmp_path / "pids"
    child = f"sleep 60 & echo $! >> {pids};"
    script = f"{trap} {child} {child} echo $$ >> {pids}; wait"
    return ["/bin/sh", "-c", script], pids


def test_stop_group_ends_every_process_of_the_tree(tmp_path: Path) -> None:
    argv, pids = _tree(tmp_path)
    process = start_server(argv, dict(os.environ), tmp_path / "log")
    tree = _wait_for(pids, 3)
    assert os.getpgid(process.pid) == process.pid  # its own group
    assert set(tree) <= set(group_members(process.pid))
    assert stop_group(process, grace=5) == ()
    assert group_members(process.pid) == ()
    assert [pid for pid in tree if _alive(pid)] == []
    assert process.returncode is not None


def test_a_tree_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    argv, pids = _tree(tmp_path, trap="trap '' TERM;")
    process = start_server(argv, dict(os.environ), tmp_path / "log")
    _wait_for(pids, 3)
    started = time.monotonic()
    assert stop_group(process, grace=1) == ()
    assert time.monotonic() - started >= 1
    assert process.returncode == -signal.SIGKILL
    assert group_members(process.pid) == ()


def test_start_server_writes_output_to_the_log_in_cwd(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    log = tmp_path / "server.log"
    process = start_server(
        ["/bin/sh", "-c", "pwd; echo $ONLY >&2"], {"ONLY": "x"}, log, cwd=tmp_path / "work"
    )
    assert process.wait(timeout=10) == 0
    assert log.read_text().splitlines() == [str(tmp_path / "work"), "x"]


def test_port_taken_by_a_listener_and_free_after() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert port_taken("127.0.0.1", port)
    assert not port_taken("127.0.0.1", port)


def test_log_tail_last_lines_and_a_missing_log(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(100)) + b"bad \xff byte\n")
    assert log_tail(log, lines=3) == ("line 98", "line 99", "bad \ufffd byte")
    assert log_tail(tmp_path / "missing") == ()


def test_log_errors_first_distinct_errors_without_warnings(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text(
        "INFO starting\n"
        "WARNING: DeprecationError: not a cause\n"
        "Traceback (most recent call last):\n"
        "torch.cuda.OutOfMemoryError: CUDA out of memory\n"
        "RuntimeError: engine died\n"
        "torch.cuda.OutOfMemoryError: CUDA out of memory\n"
        "ValueError: bad config\n"
    )
    assert log_errors(log) == (
        "torch.cuda.OutOfMemoryError: CUDA out of memory",
        "RuntimeError: engine died",
        "ValueError: bad config",
    )
    assert log_errors(log, limit=1) == ("torch.cuda.OutOfMemoryError: CUDA out of memory",)
    assert log_errors(tmp_path / "missing") == ()


def test_sigterm_raises_terminated_inside_and_not_after() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as caught, terminated_raises():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert caught.value.signum == signal.SIGTERM
    assert caught.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == previous


def test_sigint_is_held_back_until_the_body_ends() -> None:
    # Python's own SIGINT handler, as in `repro` run from a shell (a pytest-xdist worker
    # runs with SIGINT ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _sigint_held_back()
    finally:
        signal.signal(signal.SIGINT, previous)


def _sigint_held_back() -> None:
    body_finished = False
    mask_before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    with pytest.raises(KeyboardInterrupt):
        with sigint_deferred():
            # to this thread: a signal to the process may be taken by another thread of
            # it (an xdist worker has some), whose mask the deferral does not change
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            time.sleep(0.2)
            body_finished = True
        time.sleep(1)  # the held signal is delivered once the mask is restored
    assert body_finished
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == mask_before


def test_group_members_of_no_group() -> None:
    # pid numbers are below pid_max; a pgid above it has no member
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert group_members(pid_max + 1) == ()
    assert os.getpid() in group_members(os.getpgid(0))
