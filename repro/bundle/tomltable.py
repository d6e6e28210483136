"""Typed access to a TOML table that collects problems instead of raising.

A loader asks each key for the type it expects; a missing or mistyped key becomes one
line in a shared list of problems, and `finish` adds every key nobody asked for, so a
file's problems are all reported at once and a typo never passes silently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

T = TypeVar("T")
_MISSING = object()


class TomlTable:
    """Typed access to one TOML table; problems are collected, not raised."""

    def __init__(self, data: Mapping[str, Any], where: str, problems: list[str]) -> None:
        self._data = data
        self._where = where
        self._problems = problems
        self._used: set[str] = set()

    def _key(self, key: str) -> str:
        return f"{self._where}.{key}" if self._where else key

    def _get(self, key: str, check: Callable[[Any], bool], expected: str, required: bool) -> Any:
        self._used.add(key)
        value = self._data.get(key, _MISSING)
        if value is _MISSING:
            if required:
                self._problems.append(f"missing key '{self._key(key)}' ({expected})")
            return _MISSING
        if not check(value):
            self._problems.append(
                f"key '{self._key(key)}' must be {expected}, not {toml_type(value)}"
            )
            return _MISSING
        return value

    def string(self, key: str, default: str = "") -> str:
        value = self._get(key, lambda v: isinstance(v, str), "a string", True)
        return default if value is _MISSING else cast(str, value)

    def opt_string(self, key: str) -> str | None:
        value = self._get(key, lambda v: isinstance(v, str), "a string", False)
        return None if value is _MISSING else cast(str, value)

    def integer(self, key: str, default: int = 0, *, required: bool = True) -> int:
        value = self._get(key, is_int, "an integer", required)
        return default if value is _MISSING else cast(int, value)

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self._get(key, lambda v: isinstance(v, bool), "true or false", False)
        return default if value is _MISSING else cast(bool, value)

    def number(self, key: str, default: float) -> float:
        value = self._get(key, lambda v: is_int(v) or isinstance(v, float), "a number", False)
        return default if value is _MISSING else float(value)

    def strings(self, key: str, *, required: bool = False) -> tuple[str, ...] | None:
        value = self._get(
            key,
            lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v),
            "a list of strings",
            required,
        )
        return None if value is _MISSING else tuple(value)

    def table(self, key: str, *, required: bool) -> TomlTable | None:
        value = self._get(key, lambda v: isinstance(v, dict), "a table", required)
        if value is _MISSING:
            return None
        return TomlTable(value, self._key(key), self._problems)

    def tables(self, key: str) -> list[TomlTable]:
        value = self._get(
            key,
            lambda v: isinstance(v, list) and all(isinstance(i, dict) for i in v),
            "an array of tables",
            False,
        )
        if value is _MISSING:
            return []
        return [
            TomlTable(item, f"{self._key(key)}[{i}]", self._problems)
            for i, item in enumerate(value)
        ]

    def mapping(self, key: str) -> dict[str, str]:
        value = self._get(
            key,
            lambda v: isinstance(v, dict) and all(isinstance(i, str) for i in v.values()),
            "a table of strings",
            False,
        )
        return {} if value is _MISSING else dict(value)

    def sizes(self, key: str) -> dict[str, int]:
        value = self._get(
            key,
            lambda v: isinstance(v, dict) and all(is_int(i) and i >= 0 for i in v.values()),
            "a table of sizes (non-negative integers)",
            False,
        )
        return {} if value is _MISSING else dict(value)

    def problem(self, key: str, text: str) -> None:
        self._problems.append(f"key '{self._key(key)}' {text}")

    def finish(self) -> None:
        for key in sorted(set(self._data) - self._used):
            where = f"[{self._where}]" if self._where else "the top level"
            self._problems.append(f"unknown key '{key}' in {where}")


def is_int(value: object) -> bool:
    """An integer, and not a boolean (which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def toml_type(value: object) -> str:
    """The TOML type of a parsed value, as a message names it."""
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string"}
    for kind, name in names.items():
        if type(value) is kind:
            return name
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return "a date/time"


def choice(table: TomlTable, key: str, choices: tuple[T, ...]) -> T:
    """The string at `key`, which must be one of `choices` (the first when it is not)."""
    value = table.string(key)
    if value not in choices:
        if value:
            table.problem(key, f"must be one of {', '.join(map(str, choices))}, not {value!r}")
        return choices[0]
    return cast(T, value)
