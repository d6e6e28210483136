"""Tests of repro.snapshot.tool.cacheset: a cached set staged apart and published by rename."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from repro.snapshot.tool.cacheset import COMPLETE, publish, staging_for


def test_staging_is_a_new_empty_sibling_of_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "deep" / "er" / "py3.12-abc"
    staging = staging_for(cache)
    assert staging.is_dir()
    assert list(staging.iterdir()) == []
    assert staging.parent == cache.parent
    assert staging.name.startswith(f"py3.12-abc.partial-{os.getpid()}-")
    assert not cache.exists()


def test_publish_makes_the_staged_set_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "set"
    staging = staging_for(cache)
    (staging / "a-1.0-py3-none-any.whl").write_bytes(b"wheel")
    assert publish(staging, cache) == cache
    assert sorted(p.name for p in cache.iterdir()) == [COMPLETE, "a-1.0-py3-none-any.whl"]
    assert (cache / "a-1.0-py3-none-any.whl").read_bytes() == b"wheel"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]


def test_publish_replaces_a_set_left_incomplete(tmp_path: Path) -> None:
    cache = tmp_path / "set"
    cache.mkdir()
    (cache / "half-written.whl").write_bytes(b"trunc")  # a killed run's, no .complete
    staging = staging_for(cache)
    (staging / "b.whl").write_bytes(b"whole")
    publish(staging, cache)
    assert sorted(p.name for p in cache.iterdir()) == [COMPLETE, "b.whl"]


def test_publish_keeps_a_complete_set_and_drops_ours(tmp_path: Path) -> None:
    cache = tmp_path / "set"
    cache.mkdir()
    (cache / COMPLETE).write_text("")
    (cache / "winner.whl").write_bytes(b"first")
    staging = staging_for(cache)
    (staging / "loser.whl").write_bytes(b"second")
    publish(staging, cache)
    assert sorted(p.name for p in cache.iterdir()) == [COMPLETE, "winner.whl"]
    assert not staging.exists()


def test_publish_of_a_missing_staging_directory_names_it(tmp_path: Path) -> None:
    gone = tmp_path / "set.partial-1-dead"
    with pytest.raises(FileNotFoundError, match=r"set\.partial-1-dead"):
        publish(gone, tmp_path / "set")
    assert not (tmp_path / "set").exists()


_RACER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from repro.snapshot.tool.cacheset import publish, staging_for
    cache = Path(sys.argv[1])
    staging = staging_for(cache)
    (staging / "w.whl").write_text(sys.argv[2])
    sys.stdin.read()  # every racer has staged before any publishes
    publish(staging, cache)
    """
)


def test_processes_publishing_at_once_leave_one_whole_set(tmp_path: Path) -> None:
    cache = tmp_path / "set"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(cache), f"racer-{n}"],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for n in range(4)
    ]
    for racer in racers:
        assert racer.stdin is not None
        racer.stdin.close()
    errors = [racer.stderr.read() if racer.stderr else b"" for racer in racers]
    for racer in racers:
        racer.wait(timeout=60)
    assert [racer.returncode for racer in racers] == [0, 0, 0, 0], errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]
    assert sorted(p.name for p in cache.iterdir()) == [COMPLETE, "w.whl"]
    assert (cache / "w.whl").read_text() in {f"racer-{n}" for n in range(4)}
