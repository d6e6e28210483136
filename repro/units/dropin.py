"""The secrets drop-in: an environment file listing what the operator provides.

A credential taken out of a unit at pack time (repro/snapshot/workspace/unitsecrets.py) leaves
its name behind, with an empty value, in `services/<unit>.d/repro-secrets.env`; the
unit reads that file through `EnvironmentFile=-${REPRO_HOME}/services/<unit>.d/...`.
The unpacker renders it with mode 0600, never overwrites one an operator filled in,
and reports each name whose value is still empty. A value redacted in a captured
EnvironmentFile= file is marked the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

DROPIN_NAME = "repro-secrets.env"
REQUIRED_MARK = "# repro: removed at pack time; set the value here on the target"
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=(?P<value>.*)$")


def dropin_member(unit: str) -> str:
    """The drop-in's name under services/ in the bundle."""
    return f"{unit}.d/{DROPIN_NAME}"


def dropin_reference(unit: str) -> str:
    """The EnvironmentFile= line a unit gets; '-': a missing file is no error."""
    return f"EnvironmentFile=-${{REPRO_HOME}}/services/{dropin_member(unit)}"


def render_dropin(unit: str, names: Iterable[str]) -> str:
    """The drop-in's text: a header, then each name with an empty value."""
    lines = [
        f"# Credentials {unit} needs: repro took them out of the unit when it packed it.",
        "# Fill in each value (NAME=value, no quotes needed); keep this file mode 0600.",
    ]
    for name in sorted(set(names)):
        lines += [REQUIRED_MARK, f"{name}="]
    return "\n".join(lines) + "\n"


def _lines(text: str) -> list[str]:
    """Lines as systemd's env-file parser ends them: at "\\n" (a "\\r" before it
    dropped), never at a form feed or U+2028 as str.splitlines() would."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def required_names(text: str) -> tuple[str, ...]:
    """The names of `text` marked as removed at pack time, in order."""
    names: list[str] = []
    marked = False
    for line in _lines(text):
        if line.strip() == REQUIRED_MARK:
            marked = True
            continue
        match = _ASSIGNMENT.match(line)
        if marked and match is not None:
            names.append(match.group("name"))
        marked = False
    return tuple(names)


def read_values(text: str) -> dict[str, str]:
    """NAME=value assignments of an environment file, the last one winning as in
    systemd; quotes around a value are dropped."""
    values: dict[str, str] = {}
    for line in _lines(text):
        match = _ASSIGNMENT.match(line)
        if match is not None:
            values[match.group("name")] = match.group("value").strip().strip("\"'")
    return values


def unset_names(text: str, names: Iterable[str]) -> tuple[str, ...]:
    """Those of `names` that `text` leaves empty or does not set (the last
    assignment wins, as in systemd)."""
    values = read_values(text)
    return tuple(name for name in names if not values.get(name))
