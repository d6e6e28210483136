"""Tests of repro.ladder.common: a script run turned into a RungResult."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from repro.ladder.common import facts_of, failed, missing_module_hint, script_problem, skipped
from repro.ladder.interp import ScriptRun
from repro.ladder.types import RungStatus


def _run(
    returncode: int | None = 0,
    document: Mapping[str, Any] | None = None,
    tail: tuple[str, ...] = (),
) -> ScriptRun:
    return ScriptRun(returncode, document, tail, 2.5)


def test_skipped_is_a_zero_length_skip() -> None:
    result = skipped("nccl", "one GPU", {"device_count": 1})
    assert (result.name, result.status, result.duration_s) == ("nccl", RungStatus.SKIP, 0.0)
    assert (result.summary, dict(result.facts)) == ("one GPU", {"device_count": 1})
    assert dict(skipped("nccl", "x").facts) == {}


def test_failed_takes_the_runs_facts_duration_and_tail() -> None:
    run = _run(1, {"facts": {"cuda": "13.0"}}, ("a", "b"))
    result = failed("torch", run, "no GPU", "install a driver", extra_tail=("first",))
    assert result.status is RungStatus.FAIL and result.duration_s == 2.5
    assert dict(result.facts) == {"cuda": "13.0"}
    assert result.hint == "install a driver"
    assert result.output_tail == ("first", "a", "b")
    assert dict(failed("torch", run, "x", None, facts={"k": 1}).facts) == {"k": 1}
    assert dict(failed("torch", _run(1), "x", None).facts) == {}


def test_a_finished_script_is_no_problem() -> None:
    assert script_problem("torch", _run(0, {"facts": {}}), 60) is None
    assert script_problem("torch", _run(5, {"facts": {}}), 60) is None  # its rung judges


def test_a_timeout_names_the_deadline() -> None:
    result = script_problem("triton", _run(None, None, ("compiling",)), 300.0)
    assert result is not None and result.status is RungStatus.FAIL
    assert result.summary == "timed out after 300 s"
    assert result.hint is not None and "hung" in result.hint


@pytest.mark.parametrize(
    ("tail", "summary", "hint"),
    [
        ((), "the check crashed (exit code 1): (no output)", None),
        (("Segmentation fault",), "the check crashed (exit code 1): Segmentation fault", None),
        (
            ("Traceback", "ModuleNotFoundError: No module named 'torch'", "done"),
            "the check crashed (exit code 1): done",
            "an import failed in the target environment: "
            "ModuleNotFoundError: No module named 'torch'",
        ),
    ],
)
def test_a_crash_gives_the_last_line_and_an_import_hint(
    tail: tuple[str, ...], summary: str, hint: str | None
) -> None:
    result = script_problem("torch", _run(1, None, tail), 60)
    assert result is not None
    assert (result.summary, result.hint) == (summary, hint)


@pytest.mark.parametrize(
    ("tail", "hint"),
    [
        ((), None),
        (("all fine",), None),
        (("  ImportError: libcuda.so.1  ",), "ImportError: libcuda.so.1"),
        (
            ("ImportError: first", "ModuleNotFoundError: last"),
            "ModuleNotFoundError: last",
        ),  # the last one, nearest the crash
    ],
)
def test_missing_module_hint(tail: tuple[str, ...], hint: str | None) -> None:
    expected = None if hint is None else f"an import failed in the target environment: {hint}"
    assert missing_module_hint(tail) == expected


@pytest.mark.parametrize(
    ("document", "facts"),
    [
        (None, {}),
        ({}, {}),
        ({"facts": {"a": 1}}, {"a": 1}),
        ({"facts": ["not", "a", "dict"]}, {}),
    ],
)
def test_facts_of(document: Mapping[str, Any] | None, facts: dict[str, Any]) -> None:
    assert facts_of(_run(0, document)) == facts
