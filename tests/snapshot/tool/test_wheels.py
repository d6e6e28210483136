"""repro's own wheels for setup_env.sh: the cache stays bounded (each source edit makes a
new set), and a bundle of another Python X.Y carries the wheels that Python needs."""

from __future__ import annotations

import hashlib
import json
import os
import time
import zipfile
from pathlib import Path

import pytest

from repro.snapshot.tool.wheels import prune_tool_wheel_cache


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
    fresh = _wheel_set(tmp_path, "a.partial-1-ab", age_s=10.0, complete=False)
    stale = _wheel_set(tmp_path, "b.partial-2-cd", age_s=2 * 86400.0, complete=False)
    kept = _wheel_set(tmp_path, "c", age_s=0.0)
    assert prune_tool_wheel_cache(tmp_path, keep=1) == [stale]
    assert fresh.exists() and kept.exists() and not stale.exists()


def test_building_a_new_set_prunes_the_cache_to_its_bound(tmp_path: Path) -> None:
    """A real build of repro's wheels (from this checkout and the dev venv) into a cache
    already holding stale sets: the new set is complete and the cache stays bounded."""
    from repro.snapshot.tool.wheels import KEEP_TOOL_WHEEL_SETS, tool_wheels

    stale = [_wheel_set(tmp_path, f"old{i}", age_s=3600.0 + i) for i in range(KEEP_TOOL_WHEEL_SETS)]
    built = tool_wheels(tmp_path, source_date_epoch=315532800)
    wheels = built.wheels
    assert built.warnings == ()
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
    assert tool_wheels(tmp_path, source_date_epoch=315532800) == built


# --- wheels for the bundle's own Python ---------------------------------------------------


def _pure(dist_info: Path) -> bool:
    tags = [
        line.split(":", 1)[1].strip()
        for line in (dist_info / "WHEEL").read_text().splitlines()
        if line.startswith("Tag:")
    ]
    return all(tag.endswith("-none-any") for tag in tags)


def _compiled_tool_dists() -> dict[str, str]:
    """Canonical name -> version of each distribution of repro's closure here whose wheel
    is not pure (the ones a Python of another X.Y cannot install)."""
    from repro.snapshot.tool.wheels import tool_wheel_inputs

    inputs = tool_wheel_inputs()
    return {
        d.canonical_name: d.version
        for d in inputs.wanted
        if d.canonical_name not in inputs.sources and not _pure(d.dist_info)
    }


def test_a_target_python_below_311_needs_tomli_and_the_compiled_wheels() -> None:
    """The markers are the target's: tomli (python_version < "3.11") is asked for a 3.10
    target, never for this 3.11 interpreter; a target of this X.Y needs nothing extra."""
    from packaging.tags import compatible_tags, cpython_tags, platform_tags

    from repro.snapshot.tool.targetwheels import TargetPython, target_requirements
    from repro.snapshot.tool.wheels import requirement_closure, tool_wheel_inputs

    platforms = list(platform_tags())  # this box's, as a target of another X.Y here has
    inputs = tool_wheel_inputs()
    for version, full in (((3, 10), "3.10.14"), ((3, 12), "3.12.1"), ((3, 11), "3.11.7")):
        tags = (
            *cpython_tags(version, platforms=platforms),
            *compatible_tags(version, platforms=platforms),
        )
        wanted = target_requirements(inputs, TargetPython(full, "cpython", tuple(tags)))
        names = {w.split("==")[0].split(">")[0] for w in wanted}
        if version == (3, 11):
            assert wanted == []
            continue
        compiled = _compiled_tool_dists()
        assert {f"{n}=={v}" for n, v in compiled.items()} <= set(wanted)
        assert ("tomli" in names) == (version == (3, 10)), wanted
    assert "tomli" not in requirement_closure()


@pytest.fixture(scope="module")
def workspace_312(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.snapshot.conftest import PYTHON_312
    from tests.support.bundles import make_workspace

    return make_workspace(tmp_path_factory.mktemp("ws312"), PYTHON_312)


@pytest.mark.slow
def test_a_bundle_of_a_312_venv_packed_on_311_carries_cp312_tool_wheels(
    workspace_312: Path, tmp_path: Path
) -> None:
    from tests.support.bundles import member_names, pack_workspace, read_member

    cache = tmp_path / "cache"
    first = pack_workspace(workspace_312, tmp_path / "a", cache=cache)
    assert first.path is not None
    names = member_names(first.path)
    wheels = [n.rsplit("/", 1)[1] for n in names if n.startswith("ws-1/tool/wheels/")]
    compiled = _compiled_tool_dists()
    assert {"zstandard", "zlib-ng"} <= set(compiled)
    for name, version in compiled.items():
        prefix = f"{name.replace('-', '_')}-{version}-"
        ours = [w for w in wheels if w.startswith(prefix)]
        # the packing interpreter's wheel, and one for the bundle's Python 3.12 (pure
        # where the index has only that for 3.12)
        assert any("-cp311-" in w for w in ours), (name, ours)
        assert any("-cp312-" in w or "-none-any" in w for w in ours if "-cp311-" not in w)
    assert any(w.startswith("zstandard-") and "-cp312-cp312-" in w for w in wheels)
    setup = read_member(first.path, "ws-1/setup_env.sh").decode()
    assert 'wheel_pythons="3.11, 3.12"' in setup
    assert "candidates=(python3.12 python3.11 python3)" in setup
    assert not any("bootstrap" in w for w in first.warnings), first.warnings
    # the same inputs give the same bytes, the extra wheels coming from the cache now
    second = pack_workspace(workspace_312, tmp_path / "b", cache=cache)
    assert second.path is not None
    assert (
        hashlib.sha256(first.path.read_bytes()).hexdigest()
        == hashlib.sha256(second.path.read_bytes()).hexdigest()
    )
    assert (
        len([d for d in cache.joinpath("tool-wheels").iterdir() if d.name.startswith("py3.12-")])
        == 1
    )


@pytest.mark.slow
def test_an_offline_pack_on_a_cold_cache_says_which_python_it_cannot_bootstrap(
    workspace_312: Path, tmp_path: Path
) -> None:
    from tests.support.bundles import member_names, pack_workspace, read_member

    result = pack_workspace(
        workspace_312, tmp_path / "out", cache=tmp_path / "empty", download=False
    )
    assert result.path is not None
    (warning,) = [w for w in result.warnings if "setup_env.sh cannot bootstrap" in w]
    assert "Python 3.12" in warning
    for name, version in _compiled_tool_dists().items():
        assert f"{name}=={version}" in warning
    report = json.loads(read_member(result.path, "ws-1/env/pack-report.json"))
    assert warning in report["warnings"]
    wheels = [n for n in member_names(result.path) if n.startswith("ws-1/tool/wheels/")]
    assert wheels and not any("-cp312-" in w for w in wheels)
    setup = read_member(result.path, "ws-1/setup_env.sh").decode()
    assert 'wheel_pythons="3.11"' in setup


def test_two_packs_at_once_stage_apart_and_the_first_published_set_wins(tmp_path: Path) -> None:
    from repro.snapshot.tool.cacheset import publish, staging_for

    cache = tmp_path / "set"
    first, second = staging_for(cache), staging_for(cache)
    assert first != second
    (first / "a.whl").write_text("first")
    (second / "a.whl").write_text("second")
    assert publish(first, cache) == cache
    assert publish(second, cache) == cache
    assert (cache / "a.whl").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]


def test_an_editable_repro_is_wheeled_from_the_checkout_that_runs() -> None:
    """repro imported from a checkout other than the editable install's (a git worktree
    first on sys.path): the bundle's repro wheel is built from the running code."""
    import repro
    from repro.snapshot.tool.wheels import tool_wheel_inputs

    running = Path(repro.__file__).resolve().parent.parent
    inputs = tool_wheel_inputs()
    assert inputs.sources["repro"] == running
