"""Subprocess runs for tests: the one runner of commands, and the one of repro's CLI.

Each run has an explicit argv, a timeout, and the environment the caller gives (this
process's by default); its output is captured. `run` is for commands that must succeed
(an AssertionError naming the command, its exit status and its output otherwise);
`run_process` for the ones whose exit status the test judges; `run_repro` runs the real
CLI as a user would, in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_process(
    argv: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """`argv` run to its end, stdout and stderr captured as text; any exit status."""
    return subprocess.run(
        [str(part) for part in argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else dict(env),
        cwd=cwd,
        check=False,
    )


def run(
    argv: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 600,
    log: Path | None = None,
) -> str:
    """`argv`, which must succeed: its stdout. With `log`, its output (stdout and stderr
    together, after a `$ ARGV` line) is appended to that file instead, and a failure
    quotes the log's tail."""
    if log is None:
        result = run_process(argv, env=env, cwd=cwd, timeout=timeout)
        if result.returncode != 0:
            raise AssertionError(
                f"{list(argv)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        return result.stdout
    words = [str(part) for part in argv]
    with log.open("ab") as out:
        out.write(("$ " + " ".join(words) + "\n").encode())
        out.flush()
        logged = subprocess.run(
            words,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            env=None if env is None else dict(env),
            cwd=cwd,
            check=False,
        )
    if logged.returncode != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise AssertionError(f"{words[:4]} failed with {logged.returncode}:\n{tail}")
    return ""


def run_repro(
    *args: str,
    input: bytes | None = None,
    cwd: Path | None = None,
    timeout: float = 600,
    env: Mapping[str, str | None] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run the real CLI in a subprocess, as a user would. `env` adds or overrides
    variables of this process's environment; a value of None removes the variable."""
    merged: dict[str, str | None] = {**os.environ, **(env or {})}
    child = {key: value for key, value in merged.items() if value is not None}
    child["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + child.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "repro", *args],
        input=input,
        capture_output=True,
        cwd=cwd,
        env=child,
        timeout=timeout,
        check=False,
    )
