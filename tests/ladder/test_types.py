"""Tests of repro.ladder.types: the ladder's data and its JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repro.ladder.types import (
    LadderReport,
    LaunchSpec,
    RungContext,
    RungResult,
    RungScript,
    RungStatus,
)

PASS, FAIL, SKIP = RungStatus.PASS, RungStatus.FAIL, RungStatus.SKIP


@pytest.mark.parametrize(
    ("argv", "shell", "command"),
    [
        (("a", "b"), None, ("a", "b")),
        (("a",), "echo hi", ("a",)),  # argv wins over shell
        (None, "echo hi", ("/bin/sh", "-c", "echo hi")),
        ((), "echo hi", ("/bin/sh", "-c", "echo hi")),  # an empty argv is no command
    ],
)
def test_launch_command(
    argv: tuple[str, ...] | None, shell: str | None, command: tuple[str, ...]
) -> None:
    assert LaunchSpec("s", 1, "vllm", argv=argv, shell=shell).command == command


@pytest.mark.parametrize("shell", [None, ""])
def test_a_launch_without_argv_or_shell_has_no_command(shell: str | None) -> None:
    with pytest.raises(ValueError, match="'serve' has neither argv nor shell"):
        LaunchSpec("serve", 1, "vllm", argv=None, shell=shell).command  # noqa: B018


def _results(*statuses: RungStatus) -> tuple[RungResult, ...]:
    return tuple(RungResult(f"r{i}", s, 0.0, "") for i, s in enumerate(statuses))


@pytest.mark.parametrize(
    ("statuses", "ok"),
    [
        ((PASS,), True),
        ((PASS, SKIP), True),
        ((PASS, FAIL), False),
        ((FAIL, SKIP), False),
        ((SKIP, SKIP), False),
        ((), False),
    ],
)
def test_report_ok_needs_a_pass_and_no_failure(statuses: tuple[RungStatus, ...], ok: bool) -> None:
    assert LadderReport(Path("/py"), _results(*statuses)).ok is ok


def test_report_result_by_name_and_unknown_name() -> None:
    report = LadderReport(Path("/py"), _results(PASS, FAIL))
    assert report.result("r1").status is FAIL
    with pytest.raises(KeyError):
        report.result("torch")


def test_report_to_json_round_trips_through_json() -> None:
    result = RungResult(
        "torch",
        PASS,
        1.23456,
        "cuda ok",
        facts={"device_count": 2},
        warnings=("old driver",),
        hint=None,
        output_tail=("a", "b"),
    )
    document = json.loads(json.dumps(LadderReport(Path("/v/bin/python"), (result,)).to_json()))
    assert document == {
        "python": "/v/bin/python",
        "ok": True,
        "rungs": [
            {
                "name": "torch",
                "status": "pass",
                "duration_s": 1.235,
                "summary": "cuda ok",
                "facts": {"device_count": 2},
                "warnings": ["old driver"],
                "hint": None,
                "output_tail": ["a", "b"],
            }
        ],
    }


def test_rung_context_reads_its_own_script() -> None:
    scripts = {"torch": RungScript("rung_torch.py", 600), "nccl": RungScript("rung_nccl.py", 30)}
    context = RungContext("nccl", scripts)
    assert context.script.file == "rung_nccl.py"
    assert context.timeout == 30
    with pytest.raises(KeyError):
        RungContext("server", scripts).script  # noqa: B018
