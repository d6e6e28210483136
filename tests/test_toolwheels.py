"""The cache of repro's own wheels stays bounded: each source edit makes a new set."""

from __future__ import annotations

import os
import time
import zipfile
from pathlib import Path

from repro.snapshot.toolwheels import prune_tool_wheel_cache


def _wheel_set(root: Path, name: str, age_s: float, *, complete: bool = True) -> Path:
    directory = root / name
    directory.mkdir()
    (directory / "repro-0.1.0-py3-none-any.whl").write_bytes(b"PK")
    if complete:
        (directory / ".complete").write_text("")
    stamp = time.time() - age_s
    os.utime(directory, (stamp, stamp))
    return directory


def test_prune_keeps_the_most_recently_used_sets(tmp_path: Path) -> None:
    sets = [_wheel_set(tmp_path, f"set{i}", age_s=60.0 * i) for i in range(6)]
    removed = prune_tool_wheel_cache(tmp_path, keep=4)
    assert sorted(removed) == sorted(sets[4:])
    assert [d.exists() for d in sets] == [True, True, True, True, False, False]


def test_prune_leaves_a_fresh_staging_directory_and_removes_a_day_old_one(
    tmp_path: Path,
) -> None:
    fresh = _wheel_set(tmp_path, "a.partial", age_s=10.0, complete=False)
    stale = _wheel_set(tmp_path, "b.partial", age_s=2 * 86400.0, complete=False)
    kept = _wheel_set(tmp_path, "c", age_s=0.0)
    assert prune_tool_wheel_cache(tmp_path, keep=1) == [stale]
    assert fresh.exists() and kept.exists() and not stale.exists()


def test_building_a_new_set_prunes_the_cache_to_its_bound(tmp_path: Path) -> None:
    """A real build of repro's wheels (from this checkout and the dev venv) into a cache
    already holding stale sets: the new set is complete and the cache stays bounded."""
    from repro.snapshot.toolwheels import KEEP_TOOL_WHEEL_SETS, tool_wheels

    stale = [_wheel_set(tmp_path, f"old{i}", age_s=3600.0 + i) for i in range(KEEP_TOOL_WHEEL_SETS)]
    wheels = tool_wheels(tmp_path, source_date_epoch=315532800)
    names = {w.name.split("-")[0] for w in wheels}
    assert {"repro", "click", "packaging"} <= names
    for wheel in wheels:  # deflated (they go into every bundle) and still whole
        with zipfile.ZipFile(wheel) as archive:
            assert archive.testzip() is None
            assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
            assert any(i.filename.endswith(".dist-info/RECORD") for i in archive.infolist())
    remaining = sorted(d for d in tmp_path.iterdir() if (d / ".complete").exists())
    assert len(remaining) == KEEP_TOOL_WHEEL_SETS
    assert wheels[0].parent in remaining
    assert not stale[-1].exists()  # the least recently used one went
    # a second call hits the cache and marks the set as used, building nothing
    assert tool_wheels(tmp_path, source_date_epoch=315532800) == wheels
