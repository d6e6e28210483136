"""How a step that ends in an exception is recorded (repro.install.report.StepRecorder).

A bug in a stage (an exception that is no ReproError or OSError) keeps its traceback,
but the step is recorded as failed first, in the real state.toml and the saved report,
so the next run redoes it from clean; a ReproError is recorded by `failed`, as the
unpack run does. The stages here are plain functions that raise, passed as the run
passes its stages.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repro._toml import loads as toml_loads
from repro.errors import InstallError
from repro.install.report import REPORT, StageResult, StepRecorder, UnpackReport
from repro.install.state import STATE_DIR, BundleIdentity, UnpackState, load_state


def _recorder(target: Path) -> tuple[StepRecorder, list[tuple[str, str, str]]]:
    events: list[tuple[str, str, str]] = []
    state = UnpackState(target, BundleIdentity("demo", "1", "0" * 64))
    state.save()
    recorder = StepRecorder(
        UnpackReport(bundle="b.tar"), state, lambda *e: events.append((e[0], e[1], e[2]))
    )
    return recorder, events


def _bug() -> StageResult:
    table: dict[str, int] = {}
    return StageResult(str(table["missing"]))  # a KeyError: a bug, not bad input


def test_a_bug_in_a_stage_is_recorded_as_failed_and_keeps_its_traceback(
    tmp_path: Path,
) -> None:
    recorder, events = _recorder(tmp_path)
    with pytest.raises(KeyError):
        recorder.run("install", _bug)
    state = toml_loads((tmp_path / STATE_DIR / "state.toml").read_text())
    assert state["failed"] == "install" and state["started"] == "install"
    report = json.loads((tmp_path / STATE_DIR / REPORT).read_text())
    assert report["steps"] == [
        {
            "name": "install",
            "status": "failed",
            "detail": "internal error: KeyError: 'missing'",
            "facts": {},
        }
    ]
    assert ("install", "failed", "internal error: KeyError: 'missing'") in events
    assert recorder.running is None


def test_a_repro_error_is_recorded_by_the_run_and_the_rerun_clears_it(
    tmp_path: Path,
) -> None:
    recorder, _ = _recorder(tmp_path)

    def refused() -> StageResult:
        raise InstallError("six: refused")

    with pytest.raises(InstallError) as caught:
        recorder.run("install", refused)
    recorder.failed(caught.value)  # what the unpack run does with a ReproError
    loaded = load_state(tmp_path)
    assert loaded is not None and loaded.failed == "install" and loaded.started == "install"
    # the next run: the step again, done this time; nothing says failed any more
    again = StepRecorder(UnpackReport(bundle="b.tar"), loaded, lambda *e: None)
    again.run("install", lambda: StageResult("installed"))
    reloaded = load_state(tmp_path)
    assert reloaded is not None and reloaded.failed is None and reloaded.started is None
    assert reloaded.done == ["install"]
