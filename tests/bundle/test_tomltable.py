"""Tests of repro.bundle.tomltable: typed TOML access that collects problems."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from repro import _toml
from repro.bundle.tomltable import TomlTable, choice, is_int, toml_type


def _table(text: str, where: str = "") -> tuple[TomlTable, list[str]]:
    problems: list[str] = []
    return TomlTable(_toml.loads(text), where, problems), problems


def test_typed_values_and_no_problems() -> None:
    table, problems = _table(
        'name = "b"\nsize = 3\nratio = 2\nargs = ["x"]\n[env]\nA = "1"\n'
        "[sizes]\nw = 10\n[[runs]]\nn = 1\n[[runs]]\nn = 2\n"
    )
    assert table.string("name") == "b"
    assert table.integer("size") == 3
    assert table.number("ratio", 0.5) == 2.0
    assert table.strings("args") == ("x",)
    assert table.mapping("env") == {"A": "1"}
    assert table.sizes("sizes") == {"w": 10}
    assert [run.integer("n") for run in table.tables("runs")] == [1, 2]
    assert table.opt_string("absent") is None
    table.finish()
    assert problems == []


def test_every_problem_is_collected_with_its_key_path() -> None:
    table, problems = _table(
        'size = true\nargs = ["x", 1]\ntypo = 1\n[launch]\nport = "80"\nextra = 2\n', "bundle"
    )
    assert table.string("name", "dflt") == "dflt"
    assert table.integer("size", 7) == 7
    assert table.strings("args") is None
    launch = table.table("launch", required=True)
    assert launch is not None
    assert launch.integer("port") == 0
    launch.finish()
    table.finish()
    assert problems == [
        "missing key 'bundle.name' (a string)",
        "key 'bundle.size' must be an integer, not a boolean",
        "key 'bundle.args' must be a list of strings, not an array",
        "key 'bundle.launch.port' must be an integer, not a string",
        "unknown key 'extra' in [bundle.launch]",
        "unknown key 'typo' in [bundle]",
    ]


def test_optional_keys_are_no_problem_when_absent() -> None:
    table, problems = _table("")
    assert table.integer("n", 5, required=False) == 5
    assert table.number("x", 1.5) == 1.5
    assert table.strings("l") is None
    assert table.table("t", required=False) is None
    assert table.tables("ts") == []
    assert table.mapping("m") == {}
    assert table.sizes("s") == {}
    table.finish()
    assert problems == []


def test_finish_at_top_level_and_array_item_paths() -> None:
    table, problems = _table("[[runs]]\nn = 'x'\nk = 1\n\n[sizes]\nw = -1\n")
    runs = table.tables("runs")
    runs[0].integer("n")
    runs[0].finish()
    assert table.sizes("sizes") == {}
    _, top = _table("stray = 1\n")
    TomlTable({"stray": 1}, "", top).finish()
    assert problems == [
        "key 'runs[0].n' must be an integer, not a string",
        "unknown key 'k' in [runs[0]]",
        "key 'sizes' must be a table of sizes (non-negative integers), not a table",
    ]
    assert top == ["unknown key 'stray' in the top level"]


def test_choice() -> None:
    table, problems = _table('a = "zst"\nb = "bz2"\n')
    assert choice(table, "a", ("none", "gz", "zst")) == "zst"
    assert choice(table, "b", ("none", "gz", "zst")) == "none"
    assert choice(table, "c", ("none", "gz")) == "none"
    assert problems == [
        "key 'b' must be one of none, gz, zst, not 'bz2'",
        "missing key 'c' (a string)",
    ]


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (True, "a boolean"),
        (1, "an integer"),
        (1.5, "a float"),
        ("s", "a string"),
        ([1], "an array"),
        ({"a": 1}, "a table"),
        (datetime.date(2024, 1, 1), "a date/time"),
    ],
)
def test_toml_type(value: Any, name: str) -> None:
    assert toml_type(value) == name


@pytest.mark.parametrize(("value", "expected"), [(1, True), (0, True), (True, False), (1.0, False)])
def test_is_int(value: object, expected: bool) -> None:
    assert is_int(value) is expected
