"""Tests of repro.snapshot.tool.targetwheels: the tool's wheels for another bundle Python."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.tags import Tag, compatible_tags, cpython_tags, platform_tags

from repro.snapshot.tool.targetwheels import (
    TargetPython,
    bootstrap_wheels,
    target_requirements,
    target_tool_wheels,
)
from repro.snapshot.tool.wheels import ToolWheelInputs, ToolWheels, tool_wheel_inputs


def _cpython(full: str) -> TargetPython:
    major, minor = (int(part) for part in full.split(".")[:2])
    platforms = list(platform_tags())
    tags = (
        *cpython_tags((major, minor), platforms=platforms),
        *compatible_tags((major, minor), platforms=platforms),
    )
    return TargetPython(full, "cpython", tuple(tags))


@pytest.fixture(scope="module")
def inputs() -> ToolWheelInputs:
    return tool_wheel_inputs()


OWN = ToolWheels((Path("/w/repro-1.0-py3-none-any.whl"),), ("carried warning",))


@pytest.mark.parametrize(
    ("tags", "version", "platforms"),
    [
        (("cp312-cp312-manylinux_2_17_x86_64", "py3-none-any"), "3.12", ("manylinux_2_17_x86_64",)),
        (
            (
                "cp310-cp310-manylinux_2_28_aarch64",
                "cp310-abi3-manylinux_2_28_aarch64",
                "cp310-cp310-manylinux_2_17_aarch64",
                "py3-none-manylinux_2_28_aarch64",
                "py3-none-any",
            ),
            "3.10",
            ("manylinux_2_28_aarch64", "manylinux_2_17_aarch64"),
        ),
        (("py3-none-any",), "3.13", ()),
    ],
)
def test_version_and_platforms_of_a_target(
    tags: tuple[str, ...], version: str, platforms: tuple[str, ...]
) -> None:
    parsed = tuple(Tag(*tag.split("-")) for tag in tags)
    target = TargetPython(f"{version}.4", "cpython", parsed)
    assert target.version == version
    assert target.platforms == platforms


def test_a_target_of_the_packing_python_needs_nothing(
    inputs: ToolWheelInputs, tmp_path: Path
) -> None:
    target = _cpython("3.11.9")
    assert target_requirements(inputs, target) == []
    extra = target_tool_wheels(tmp_path, inputs, target, download=True)
    assert (extra.python, extra.wheels, extra.missing) == ("3.11", (), ())
    assert list(tmp_path.iterdir()) == []  # nothing cached, nothing downloaded


def test_a_pure_only_target_needs_every_compiled_tool_wheel(inputs: ToolWheelInputs) -> None:
    """A target whose tags take no compiled wheel (here: only py3-none-any) needs each
    compiled distribution at the version installed here, never a pure one or repro."""
    pure_only = TargetPython("3.11.7", "cpython", (Tag("py3", "none", "any"),))
    wanted = target_requirements(inputs, pure_only)
    compiled = {"zstandard", "zlib-ng"}
    versions = {d.canonical_name: d.version for d in inputs.wanted}
    assert {f"{n}=={versions[n]}" for n in compiled if n in versions} <= set(wanted)
    names = {w.split("==")[0] for w in wanted}
    assert not names & {"repro", "click", "packaging", "rich", "requests"}
    assert wanted == sorted(wanted)


def test_offline_without_a_cached_set_names_what_is_missing(
    inputs: ToolWheelInputs, tmp_path: Path
) -> None:
    target = _cpython("3.12.1")
    wanted = target_requirements(inputs, target)
    assert wanted  # the compiled ones, at least
    extra = target_tool_wheels(tmp_path, inputs, target, download=False)
    assert (extra.python, extra.wheels, extra.missing) == ("3.12", (), tuple(wanted))
    assert list(tmp_path.iterdir()) == []


def test_an_implementation_without_wheels_is_never_downloaded_for(
    inputs: ToolWheelInputs, tmp_path: Path
) -> None:
    base = _cpython("3.12.1")
    graal = TargetPython("3.12.1", "graalpy", base.tags)
    wanted = target_requirements(inputs, graal)
    extra = target_tool_wheels(tmp_path, inputs, graal, download=True)
    assert extra.missing == tuple(wanted) and extra.wheels == ()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target", [None, "3.11.2"])
def test_bootstrap_of_the_own_python_is_the_tool_wheels(
    inputs: ToolWheelInputs, tmp_path: Path, target: str | None
) -> None:
    result = bootstrap_wheels(
        OWN, "3.11", tmp_path, inputs, _cpython(target) if target else None, download=False
    )
    assert (result.wheels, result.pythons, result.warnings) == (
        OWN.wheels,
        ("3.11",),
        ("carried warning",),
    )


@pytest.mark.parametrize(
    ("full", "implementation", "why"),
    [
        ("3.9.18", "cpython", None),
        ("3.12.1", "cpython", "pack --offline downloads nothing; pack online once to cache them"),
        ("3.12.1", "graalpy", "no wheels are fetched for graalpy"),
    ],
)
def test_bootstrap_of_another_python_offline_warns_naming_it(
    inputs: ToolWheelInputs, tmp_path: Path, full: str, implementation: str, why: str | None
) -> None:
    target = TargetPython(full, implementation, _cpython(full).tags)
    result = bootstrap_wheels(OWN, "3.11", tmp_path, inputs, target, download=False)
    assert result.wheels == OWN.wheels and result.pythons == ("3.11",)
    xy = target.version
    if why is None:
        warning = (
            f"the bundle's Python {xy} cannot run repro (it needs Python >= 3.10): "
            "setup_env.sh needs another Python on the target (REPRO_BOOTSTRAP_PYTHON)"
        )
    else:
        missing = ", ".join(target_requirements(inputs, target))
        warning = (
            f"setup_env.sh cannot bootstrap Python {xy} (the bundle's own) without a "
            f"network: tool/wheels lacks a Python {xy} wheel of {missing} ({why})"
        )
    assert result.warnings == ("carried warning", warning)
