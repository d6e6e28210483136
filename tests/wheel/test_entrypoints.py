"""repro.wheel.entrypoints: one reader of entry_points.txt for the installer, the rebuild
and the scan, against importlib.metadata's reading of a wheel setuptools built, and one
error policy: what is not INI is an EntryPointsError naming the file, never
configparser's own exception."""

from __future__ import annotations

import importlib.metadata
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repro.errors import EntryPointsError, InputError
from repro.wheel.entrypoints import (
    ENTRY_POINTS,
    checked_scripts,
    parse_scripts,
    read_scripts,
    reference,
)
from tests.wheel.conftest import CONSOLE_SCRIPTS, GUI_SCRIPTS, RealWheel


def _dist_info(real_wheel: RealWheel, into: Path) -> Path:
    with zipfile.ZipFile(real_wheel.path) as archive:
        for name in archive.namelist():
            if name.startswith(f"{real_wheel.dist_info}/"):
                archive.extract(name, into)
    return into / real_wheel.dist_info


def test_a_built_wheels_scripts_read_as_importlib_metadata_reads_them(
    real_wheel: RealWheel, tmp_path: Path
) -> None:
    dist_info = _dist_info(real_wheel, tmp_path)
    sections = parse_scripts((dist_info / ENTRY_POINTS).read_bytes(), ENTRY_POINTS)
    assert sections == {"console_scripts": CONSOLE_SCRIPTS, "gui_scripts": GUI_SCRIPTS}
    stdlib = importlib.metadata.PathDistribution(dist_info).entry_points
    for section, scripts in sections.items():
        assert scripts == {ep.name: ep.value for ep in stdlib.select(group=section)}
        for name, value in scripts.items():
            (point,) = stdlib.select(group=section, name=name)
            assert reference(value) == (point.module, point.attr)
    assert read_scripts(dist_info) == {**CONSOLE_SCRIPTS, **GUI_SCRIPTS}


def test_the_installer_gets_each_script_with_its_module_and_object(
    real_wheel: RealWheel, tmp_path: Path
) -> None:
    data = (_dist_info(real_wheel, tmp_path) / ENTRY_POINTS).read_bytes()
    assert checked_scripts(data, ENTRY_POINTS, (3, 11)) == [
        ("wheeldemo", "wheeldemo", "main"),
        ("wheeldemo-sub", "wheeldemo.cli", "run"),
        ("wheeldemo-gui", "wheeldemo", "main"),
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("pkg.mod:obj.attr", ("pkg.mod", "obj.attr")),
        ("pkg.mod : obj [extra1, extra2]", ("pkg.mod", "obj")),
        ("pkg.mod", ("pkg.mod", "")),
        ("  pkg:main  ", ("pkg", "main")),
    ],
)
def test_a_reference_is_module_and_object_without_extras(
    value: str, expected: tuple[str, str]
) -> None:
    assert reference(value) == expected


def test_a_name_listed_twice_is_read_as_pip_reads_it_the_last_wins() -> None:
    text = "[console_scripts]\ntool = a:first\ntool = b:second\n[console_scripts]\nx = c:d\n"
    assert parse_scripts(text, ENTRY_POINTS)["console_scripts"] == {"tool": "b:second", "x": "c:d"}


def test_a_dist_info_without_entry_points_has_no_scripts(tmp_path: Path) -> None:
    assert read_scripts(tmp_path) == {}
    (tmp_path / ENTRY_POINTS).write_text("[other_group]\nx = a:b\n")
    assert read_scripts(tmp_path) == {}


@pytest.mark.parametrize(
    "data",
    [
        b"no section\n",
        b"[console_scripts\nx = a:b\n",
        b"[console_scripts]\nno delimiter\n",
        b"[console_scripts]\nx = a:b\n\xff\xfe\n",
        b"x = a:b\n[console_scripts]\n",
    ],
    ids=["no-section", "open-header", "no-delimiter", "not-utf8", "option-before-section"],
)
def test_a_file_that_is_not_ini_is_an_error_naming_it(data: bytes, tmp_path: Path) -> None:
    with pytest.raises(EntryPointsError, match=r"^entry_points\.txt: not UTF-8 INI \("):
        parse_scripts(data, ENTRY_POINTS)
    (tmp_path / ENTRY_POINTS).write_bytes(data)
    with pytest.raises(EntryPointsError) as raised:
        read_scripts(tmp_path)
    assert raised.value.message.startswith(f"{tmp_path / ENTRY_POINTS}: ")
    assert isinstance(raised.value, InputError)


@pytest.mark.parametrize(
    "line",
    [
        "../escape = demo:main",
        "a/b = demo:main",
        "bad\x01name = demo:main",
        "x = os;import evil:main",
        "x = demo:",
        "x = :main",
        "x = demo:main()",
    ],
)
def test_an_entry_point_an_installer_must_not_write_is_refused(line: str) -> None:
    data = f"[console_scripts]\ngood = demo:main\n{line}\n".encode()
    with pytest.raises(EntryPointsError, match=r"^entry_points\.txt: entry point .*bad entry"):
        checked_scripts(data, ENTRY_POINTS, None)
    # the pack side reads names only: the same file is no error there
    assert "good" in parse_scripts(data, ENTRY_POINTS)["console_scripts"]


@pytest.mark.parametrize(
    ("listed", "version", "expected"),
    [
        (["pip", "pip3", "pip3.7"], (3, 12), ["pip", "pip3", "pip3.12"]),
        (["pip"], None, ["pip"]),
        (["easy_install", "easy_install-2.7"], (3, 11), ["easy_install", "easy_install-3.11"]),
        (["pip3.7", "other"], (3, 11), ["pip3.7", "other"]),  # no `pip`: left as listed
    ],
)
def test_pips_versioned_names_are_made_for_the_target_python(
    listed: list[str], version: tuple[int, int] | None, expected: list[str]
) -> None:
    data = ("[console_scripts]\n" + "".join(f"{n} = pip:main\n" for n in listed)).encode()
    assert sorted(s for s, _, _ in checked_scripts(data, ENTRY_POINTS, version)) == sorted(expected)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="[]=:;#% \t\n\r\x0b\x0cax.console_scripts\x00\x85\u2028", max_size=60))
def test_any_text_reads_or_is_an_entry_points_error(text: str) -> None:
    """configparser's errors (ParsingError, MissingSectionHeaderError, ...) never escape."""
    try:
        checked_scripts(text.encode("utf-8", "surrogatepass"), ENTRY_POINTS, (3, 11))
    except EntryPointsError as exc:
        assert exc.message.startswith("entry_points.txt: ")
