"""Tests of repro.ladder.runner: the rungs climbed in order, stopping at a failure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from repro.errors import UsageError
from repro.ladder.registry import RUNG_NAMES
from repro.ladder.runner import parse_rungs, run_ladder
from repro.ladder.types import LadderSpec, RungResult, RungStatus


@pytest.mark.parametrize(
    ("text", "rungs"),
    [
        ("torch", ("torch",)),
        ("server, python ,torch", ("python", "torch", "server")),
        ("python,python,", ("python",)),
        (",".join(reversed(RUNG_NAMES)), RUNG_NAMES),
    ],
)
def test_parse_rungs_gives_ladder_order(text: str, rungs: tuple[str, ...]) -> None:
    assert parse_rungs(text) == rungs


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("torch,gpu,cuda", "unknown rung(s) in --rungs: gpu, cuda"),
        ("", "unknown rung(s) in --rungs: (none given)"),
        (" , ", "unknown rung(s) in --rungs: (none given)"),
        ("Torch", "unknown rung(s) in --rungs: Torch"),
    ],
)
def test_parse_rungs_refuses_unknown_or_no_names(text: str, named: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_rungs(text)
    assert caught.value.message == named
    assert caught.value.hint == f"choose from {', '.join(RUNG_NAMES)}"


def test_the_python_rung_passes_with_a_real_interpreter() -> None:
    seen: list[RungResult] = []
    report = run_ladder(LadderSpec(Path(sys.executable), rungs=("python",)), on_rung=seen.append)
    assert [r.name for r in report.results] == ["python"]
    assert report.results[0].status is RungStatus.PASS
    assert report.results[0].duration_s > 0
    assert report.ok and seen == list(report.results)


def test_after_a_failure_the_rest_are_skipped(tmp_path: Path) -> None:
    seen: list[str] = []
    spec = LadderSpec(tmp_path / "no-python", rungs=("torch", "python"))
    report = run_ladder(spec, on_rung=lambda r: seen.append(r.name))
    assert seen == ["python", "torch"]  # ladder order, not the order asked
    python, torch = report.results
    assert python.status is RungStatus.FAIL
    assert torch.status is RungStatus.SKIP
    assert torch.summary == "not run: rung python failed"
    assert not report.ok


def test_keep_going_runs_every_rung_after_a_failure(tmp_path: Path) -> None:
    spec = LadderSpec(tmp_path / "no-python", rungs=("python", "torch"), keep_going=True)
    report = run_ladder(spec)
    assert [r.name for r in report.results] == ["python", "torch"]
    assert report.result("torch").summary != "not run: rung python failed"
    assert report.result("python").status is RungStatus.FAIL
    assert report.python == tmp_path / "no-python"
