"""Tests of repro._toml: TOML reading, deep nesting a decode error."""

from __future__ import annotations

import datetime

import pytest

from repro import _toml


def test_parses_a_document() -> None:
    text = 'name = "b"\nsize = 3\n[tool]\nlist = ["x", "y"]\nwhen = 2024-01-02T03:04:05Z\n'
    assert _toml.loads(text) == {
        "name": "b",
        "size": 3,
        "tool": {
            "list": ["x", "y"],
            "when": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
        },
    }


@pytest.mark.parametrize(
    "text",
    [
        "a = ",
        "a = 1\na = 2\n",
        "[t]\n[t]\n",
        'a = "unterminated\n',
        "a = [" * 100_000,
        "a = " + "{b = " * 100_000,
    ],
)
def test_bad_documents_raise_decode_error(text: str) -> None:
    with pytest.raises(_toml.TOMLDecodeError):
        _toml.loads(text)


def test_deep_nesting_names_the_problem() -> None:
    with pytest.raises(_toml.TOMLDecodeError, match="nested too deeply"):
        _toml.loads("a = " + "[" * 100_000)


def test_moderate_nesting_still_parses() -> None:
    value = _toml.loads("a = " + "[" * 20 + "]" * 20)["a"]
    depth = 0
    while value != []:
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
        depth += 1
    assert depth == 19
