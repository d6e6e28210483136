"""Run an installer so that it dies with repro, whatever kills repro.

A SIGKILL to repro's process group reaches its children, but a SIGKILL to repro's
PID alone does not: `uv pip sync`, pip-sync and the pip it starts, or the ensurepip
of `python -m venv`, would go on writing into a venv that the next run is already
rebuilding. So the command runs under a small guard process that leads a process
group of its own and has the kernel send it SIGTERM when repro dies
(prctl PR_SET_PDEATHSIG); on that signal it kills its whole group (the installer and
everything the installer started) with SIGKILL. A timeout, or any exception in repro
while it waits, kills the group the same way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# Runs as `python -I -S -c GUARD PARENT_PID ARGV...`: the standard library only.
GUARD = r"""
import os, signal, subprocess, sys
def stop(signum, frame):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, stop)
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
except (ImportError, OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    stop(0, None)  # repro died before the guard was set up
try:
    child = subprocess.Popen(sys.argv[2:])
except OSError as exc:
    sys.stderr.write(f"{sys.argv[2]}: {exc.strerror}\n")
    sys.exit(127)
code = child.wait()
sys.exit(code if code >= 0 else 128 - code)
"""


def run_tethered(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(argv, capture_output=True, text=True)`, with the command and
    every process it starts ended when repro dies or `timeout` passes (then
    subprocess.TimeoutExpired is raised, as subprocess.run does). A command killed by
    signal N exits 128 + N. Call it from a thread that outlives the command: the kernel
    sends the death signal when the thread that started the guard ends."""
    guard = [sys.executable, "-I", "-S", "-c", GUARD, str(os.getpid()), *argv]
    with subprocess.Popen(
        guard,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException:
            _kill_group(process.pid)
            process.wait()
            raise
    return subprocess.CompletedProcess(list(argv), process.returncode, stdout, stderr)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
