"""Tests of repro.ladder.interp: a rung script run in its own process group."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from repro.ladder.interp import MARKER, TAIL_LINES, run_script, script_path, tail_lines


def _stand_in_python(tmp_path: Path, body: str) -> Path:
    """A test double of the target's interpreter: a shell script run as `python SCRIPT`
    (the real one is tested below with this interpreter)."""
    path = tmp_path / "stand-in-python"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_the_real_python_rung_script_gives_its_document() -> None:
    run = run_script(Path(sys.executable), "rung_python.py", timeout=60)
    assert run.returncode == 0 and not run.timed_out
    assert run.document is not None
    assert run.document["facts"]["executable"] == sys.executable
    assert not any(line.startswith(MARKER) for line in run.output_tail)
    assert run.duration_s > 0


def test_script_path_names_a_shipped_script() -> None:
    assert script_path("rung_python.py").is_file()


@pytest.mark.parametrize(
    ("output", "document"),
    [
        (f'{MARKER} {{"facts": {{"a": 1}}}}', {"facts": {"a": 1}}),
        (f'{MARKER} {{"n": 1}}\n{MARKER} {{"n": 2}}', {"n": 2}),  # the last one counts
        (f"{MARKER} not json", None),
        (f"{MARKER} [1, 2]", None),  # not an object
        ('{"facts": {}}', None),  # no marker
    ],
)
def test_the_document_is_the_last_marker_line(
    tmp_path: Path, output: str, document: dict[str, object] | None
) -> None:
    python = _stand_in_python(tmp_path, f"cat <<'END'\n{output}\nEND\nexit 3\n")
    run = run_script(python, "rung_python.py", timeout=30)
    assert run.returncode == 3
    assert run.document == document


def test_the_script_and_args_are_passed_and_stderr_is_in_the_tail(tmp_path: Path) -> None:
    python = _stand_in_python(tmp_path, 'echo "args: $*"; echo oops >&2\n')
    run = run_script(python, "rung_torch.py", ["--cpu", "x y"], timeout=30)
    assert run.output_tail == (f"args: {script_path('rung_torch.py')} --cpu x y", "oops")


def test_env_replaces_the_environment(tmp_path: Path) -> None:
    python = _stand_in_python(tmp_path, 'echo "v=$ONLY_THIS home=$HOME"\n')
    run = run_script(python, "rung_python.py", timeout=30, env={"ONLY_THIS": "1"})
    assert run.output_tail == ("v=1 home=",)


def test_a_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    python = _stand_in_python(
        tmp_path, f"sleep 60 & echo $! > {pids}; echo $$ >> {pids}; sleep 60\n"
    )
    started = time.monotonic()
    run = run_script(python, "rung_python.py", timeout=1)
    assert time.monotonic() - started < 20
    assert run.timed_out and run.returncode is None and run.document is None
    children = [int(line) for line in pids.read_text().split()]
    assert len(children) == 2
    assert all(_gone(pid) for pid in children)


def test_a_finished_script_leaves_nothing_behind(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    python = _stand_in_python(tmp_path, f"sleep 60 & echo $! > {pids}; exit 0\n")
    assert run_script(python, "rung_python.py", timeout=30).returncode == 0
    assert _gone(int(pids.read_text()))


def test_an_interpreter_that_cannot_run_is_exit_127(tmp_path: Path) -> None:
    run = run_script(tmp_path / "no-python", "rung_python.py", timeout=30)
    assert run.returncode == 127 and run.document is None
    assert len(run.output_tail) == 1
    assert run.output_tail[0].startswith(f"cannot run {tmp_path / 'no-python'}: ")


def test_tail_lines_keeps_the_last_lines_without_markers() -> None:
    text = "\n".join(f"line {i}" for i in range(100)) + f"\n{MARKER} {json.dumps({})}\n"
    tail = tail_lines(text)
    assert len(tail) == TAIL_LINES
    assert tail[0] == f"line {100 - TAIL_LINES}" and tail[-1] == "line 99"
    assert tail_lines("a\nb\nc", count=2) == ("b", "c")
    assert os.linesep not in "".join(tail)
