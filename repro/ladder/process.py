"""A server's process group: start it in its own session, stop all of it, prove it is gone."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from repro.errors import Terminated
from repro.ladder.interp import kill_group


def group_members(pgid: int) -> tuple[int, ...]:
    """Live (non-zombie) processes whose process group is ``pgid`` (Linux /proc)."""
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return tuple(sorted(members))


def port_taken(host: str, port: int) -> bool:
    """True when something listens on the port or holds it bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        if probe.connect_ex((host, port)) == 0:
            return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def start_server(
    argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start the server in a new session (its own process group), in ``cwd`` (None: this
    process's), output to ``log_path``."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )


_ENDING = (signal.SIGTERM, signal.SIGHUP)


def _raise_terminated(signum: int, _frame: object) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def terminated_raises() -> Iterator[None]:
    """While the body runs, SIGTERM and SIGHUP raise Terminated instead of ending the
    process on the spot, so `finally` blocks (the server's teardown) run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise_terminated) for signum in _ENDING}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold back SIGINT, SIGTERM and SIGHUP while the body runs, so a second Ctrl-C or
    kill cannot cut a teardown short (a held signal is taken when the body ends)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, *_ENDING})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _wait_gone(pgid: int, until: float) -> tuple[int, ...]:
    members = group_members(pgid)
    while members and time.monotonic() < until:
        time.sleep(0.1)
        members = group_members(pgid)
    return members


def stop_group(process: subprocess.Popen[bytes], grace: float) -> tuple[int, ...]:
    """SIGTERM the whole group, wait ``grace`` s, SIGKILL what is left.

    Returns the processes of the group still alive afterwards (normally none).
    """
    pgid = process.pid
    with sigint_deferred():
        deadline = time.monotonic() + grace
        kill_group(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
        remaining = _wait_gone(pgid, deadline)
        if remaining or process.poll() is None:
            kill_group(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        return _wait_gone(pgid, time.monotonic() + 5)


def log_tail(path: Path, lines: int = 40) -> tuple[str, ...]:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ()
    return tuple(text.splitlines()[-lines:])


_WARNING = re.compile(r"\bWARN(ING)?\b")
_ERROR_LINE = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$")


def log_errors(path: Path, limit: int = 5) -> tuple[str, ...]:
    """The first distinct ``SomethingError: message`` lines of a log: usually the root
    cause, which a long traceback and shutdown noise push out of the tail."""
    found: list[str] = []
    try:
        with path.open("rb") as handle:
            for raw in handle:
                text = raw.decode("utf-8", errors="replace").rstrip()
                match = _ERROR_LINE.search(text)
                if match is None or _WARNING.search(text):
                    continue
                line = f"{match.group(1)}: {match.group(2)}"
                if line not in found:
                    found.append(line)
                    if len(found) >= limit:
                        break
    except OSError:
        return ()
    return tuple(found)
