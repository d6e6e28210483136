"""Run a rung script with the target's interpreter (or a command of the bundle), in its
own process group."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

MARKER = "@@repro-rung-result@@"
TAIL_LINES = 40


@dataclass(frozen=True)
class ScriptRun:
    """What a rung script did: its exit, its result document, its last lines."""

    returncode: int | None  # None when it was killed for running past its timeout
    document: Mapping[str, Any] | None
    output_tail: tuple[str, ...]
    duration_s: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def script_path(name: str) -> Path:
    return Path(str(resources.files("repro.ladder.scripts").joinpath(name)))


def tail_lines(text: str, count: int = TAIL_LINES) -> tuple[str, ...]:
    lines = [line for line in text.splitlines() if not line.startswith(MARKER)]
    return tuple(lines[-count:])


def _parse_document(text: str) -> Mapping[str, Any] | None:
    for line in reversed(text.splitlines()):
        if line.startswith(MARKER):
            try:
                value = json.loads(line[len(MARKER) :])
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def kill_group(pgid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def run_script(
    python: Path,
    script: str,
    args: Sequence[str] = (),
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> ScriptRun:
    """Run ``python <script> args`` with output to a log; kill its whole group at the end."""
    argv = [str(python), str(script_path(script)), *args]
    return run_command(argv, timeout=timeout, env=env)


def run_command(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> ScriptRun:
    """Run ``argv`` in ``cwd`` (None: this process's) in a session of its own, output to
    a log; kill its whole group at the end, also when it ran past ``timeout``."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as log:
        try:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ if env is None else env),
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            message = f"cannot run {argv[0]}: {exc.strerror or exc}"
            return ScriptRun(127, None, (message,), time.monotonic() - started)
        returncode: int | None
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            # Also on KeyboardInterrupt: nothing the script started may outlive it.
            kill_group(process.pid)
            process.wait()
        duration = time.monotonic() - started
        log.seek(0)
        text = log.read().decode("utf-8", errors="replace")
    return ScriptRun(returncode, _parse_document(text), tail_lines(text), duration)
