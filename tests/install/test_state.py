"""Tests of repro.install.state: TARGET/.repro/state.toml written and read back."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from repro.errors import InstallError, UsageError
from repro.install.state import (
    STEPS,
    BundleIdentity,
    UnpackState,
    load_state,
    open_state,
)

BUNDLE = BundleIdentity("llm", "1.0", "ab" * 32)
OTHER = BundleIdentity("llm", "2.0", "cd" * 32)


def _on_disk(target: Path) -> dict[str, Any]:
    document: dict[str, Any] = tomllib.loads((target / ".repro" / "state.toml").read_text())
    return document


def test_steps_and_facts_round_trip_through_the_file(tmp_path: Path) -> None:
    state = UnpackState(tmp_path, BUNDLE)
    state.mark_started("install")
    assert _on_disk(tmp_path)["started"] == "install"
    state.mark_done("verify")
    state.mark_done("install", pins=3, files={"a": "1"})
    document = _on_disk(tmp_path)
    assert document == {
        "bundle": {"name": "llm", "version": "1.0", "manifest_sha256": "ab" * 32},
        "done": ["verify", "install"],
        "facts": {"install": {"pins": 3, "files": {"a": "1"}}},
    }
    loaded = load_state(tmp_path)
    assert loaded is not None
    assert (loaded.bundle, loaded.done, loaded.facts) == (
        BUNDLE,
        ["verify", "install"],
        state.facts,
    )
    assert loaded.started is None and loaded.failed is None


def test_done_is_written_in_step_order_whatever_the_order_of_marks(tmp_path: Path) -> None:
    state = UnpackState(tmp_path, BUNDLE)
    for step in ("smoke", "verify", "patch", "verify"):
        state.mark_done(step)
    assert _on_disk(tmp_path)["done"] == ["verify", "patch", "smoke"]


def test_a_failed_step_stays_started_until_done(tmp_path: Path) -> None:
    state = UnpackState(tmp_path, BUNDLE)
    state.mark_started("patch")
    state.mark_failed("patch")
    document = _on_disk(tmp_path)
    assert (document["started"], document["failed"]) == ("patch", "patch")
    loaded = load_state(tmp_path)
    assert loaded is not None and (loaded.started, loaded.failed) == ("patch", "patch")
    loaded.mark_done("patch")
    assert "started" not in _on_disk(tmp_path) and "failed" not in _on_disk(tmp_path)


def test_clear_started(tmp_path: Path) -> None:
    state = UnpackState(tmp_path, BUNDLE)
    state.mark_started("models")
    state.clear_started()
    assert "started" not in _on_disk(tmp_path)


@pytest.mark.parametrize("mark", ["mark_started", "mark_failed", "mark_done"])
def test_an_unknown_step_is_refused(tmp_path: Path, mark: str) -> None:
    with pytest.raises(ValueError, match="deploy"):
        getattr(UnpackState(tmp_path, BUNDLE), mark)("deploy")
    assert not (tmp_path / ".repro").exists()


def test_forget_drops_the_step_and_every_later_one(tmp_path: Path) -> None:
    state = UnpackState(tmp_path, BUNDLE)
    for step in STEPS[:6]:
        state.mark_done(step)
    state.mark_started("services")
    state.forget("install")
    assert state.done == ["verify", "preflight", "venv"]
    assert state.started is None
    assert _on_disk(tmp_path)["done"] == ["verify", "preflight", "venv"]


def test_made_venv_reads_the_venv_steps_record(tmp_path: Path) -> None:
    state = UnpackState(tmp_path, BUNDLE)
    assert state.made_venv is None
    state.mark_done("venv", made={"pyvenv.cfg": "00"})
    assert state.made_venv == {"pyvenv.cfg": "00"}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("not = [toml", ""),
        ('done = ["verify"]\n', "'bundle'"),
        ('[bundle]\nname = "x"\nversion = "1"\n', "'manifest_sha256'"),
        (
            'started = "deploy"\n[bundle]\nname = "x"\nversion = "1"\nmanifest_sha256 = "0"\n',
            "started = 'deploy' is not a step",
        ),
        (
            'failed = 3\n[bundle]\nname = "x"\nversion = "1"\nmanifest_sha256 = "0"\n',
            "failed = 3 is not a step",
        ),
    ],
)
def test_an_unreadable_state_names_the_file(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / ".repro" / "state.toml"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(InstallError) as caught:
        load_state(tmp_path)
    assert caught.value.message.startswith(f"{path}: unreadable unpack state: ")
    assert reason in caught.value.message
    assert caught.value.hint is not None and "--replace" in caught.value.hint


def test_unknown_done_steps_are_dropped_on_reading(tmp_path: Path) -> None:
    path = tmp_path / ".repro" / "state.toml"
    path.parent.mkdir()
    path.write_text(
        'done = ["verify", "teleport"]\n'
        '[bundle]\nname = "x"\nversion = "1"\nmanifest_sha256 = "0"\n'
    )
    loaded = load_state(tmp_path)
    assert loaded is not None and loaded.done == ["verify"]


def test_open_state_resumes_the_same_bundle(tmp_path: Path) -> None:
    UnpackState(tmp_path, BUNDLE).mark_done("verify")
    assert open_state(tmp_path, BUNDLE, replace=False).done == ["verify"]


def test_open_state_refuses_another_bundle_unless_replacing(tmp_path: Path) -> None:
    UnpackState(tmp_path, BUNDLE).mark_done("verify")
    with pytest.raises(UsageError) as caught:
        open_state(tmp_path, OTHER, replace=False)
    assert caught.value.message == f"{tmp_path} holds llm 1.0, not llm 2.0"
    fresh = open_state(tmp_path, OTHER, replace=True)
    assert (fresh.bundle, fresh.done) == (OTHER, [])


def test_open_state_refuses_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / ".repro").mkdir()  # the lock's directory alone is not foreign
    assert open_state(tmp_path, BUNDLE, replace=False).done == []
    (tmp_path / "precious.txt").write_text("x")
    with pytest.raises(UsageError, match="exists and is not a repro target"):
        open_state(tmp_path, BUNDLE, replace=False)
    assert open_state(tmp_path, BUNDLE, replace=True).bundle == BUNDLE
    assert open_state(tmp_path / "new", BUNDLE, replace=False).done == []
