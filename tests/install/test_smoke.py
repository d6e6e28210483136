"""Tests of repro.install.smoke: the unpack's smoke verdict."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from repro.install.smoke import SmokeResult, verdict
from repro.ladder import RungResult, RungStatus, registry, run_ladder
from repro.ladder.types import LadderSpec


def _r(name: str, status: RungStatus, summary: str = "") -> RungResult:
    return RungResult(name, status, 0.0, summary)


P, F, S = RungStatus.PASS, RungStatus.FAIL, RungStatus.SKIP


@pytest.mark.parametrize(
    ("results", "said"),
    [
        ([_r(n, P) for n in registry.RUNG_NAMES], "every rung passed"),
        (
            [_r("python", P), _r("torch", F, "no GPU"), _r("nccl", F, "one GPU")],
            "torch: no GPU; nccl: one GPU",
        ),
        (
            [_r(n, P) for n in registry.RUNG_NAMES[:-1]] + [_r("server", S, "no launch")],
            "python, torch, triton, kernels, nccl, engine passed; server skipped: no launch",
        ),
        (
            [_r("python", P), _r("torch", P)],
            "python, torch passed; not run: triton, kernels, nccl, engine, server",
        ),
        ([], "no rung passed; not run: " + ", ".join(registry.RUNG_NAMES)),
    ],
)
def test_verdict_says_what_ran_and_what_did_not(results: list[RungResult], said: str) -> None:
    assert verdict(results) == said


def test_smoke_result_json_of_a_real_ladder() -> None:
    report = run_ladder(LadderSpec(Path(sys.executable), rungs=("python",)))
    result = SmokeResult(report.ok, verdict(report.results), report)
    document = json.loads(json.dumps(result.to_json()))
    assert document["passed"] is True
    assert document["summary"] == (
        "python passed; not run: torch, triton, kernels, nccl, engine, server"
    )
    assert document["ladder"]["rungs"][0]["name"] == "python"
