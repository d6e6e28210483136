"""Apply a unified diff with zero fuzz.

Every context and removed line of a hunk must match the target exactly; a hunk
may be found at an offset from the line its header names (as GNU patch does
with --fuzz=0), searching outward from that line. Anything else is a conflict.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from repro.errors import DiffApplyError

_HUNK = re.compile(r"^@@ -(?P<old>\d+)(?:,(?P<oldlen>\d+))? \+(?P<new>\d+)(?:,(?P<newlen>\d+))? @@")
NO_NEWLINE = "\\ No newline at end of file"


@dataclass(frozen=True)
class Hunk:
    old_start: int
    old: tuple[str, ...]
    new: tuple[str, ...]


def unified_diff(pristine: str, patched: str, path: str) -> str:
    """A unified diff that GNU patch and apply_unified_diff both read.

    difflib leaves out the "\\ No newline at end of file" marker; it is added
    after any line that lacks its newline.
    """
    out: list[str] = []
    for line in difflib.unified_diff(
        pristine.splitlines(keepends=True),
        patched.splitlines(keepends=True),
        f"a/{path}",
        f"b/{path}",
    ):
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n")
            out.append(NO_NEWLINE + "\n")
    return "".join(out)


def _strip_newline_marker(lines: list[str]) -> None:
    if lines and lines[-1].endswith("\n"):
        lines[-1] = lines[-1][:-1]


def parse_hunks(diff: str) -> list[Hunk]:
    hunks: list[Hunk] = []
    lines = diff.splitlines(keepends=True)
    index = 0
    while index < len(lines) and not lines[index].startswith("@@"):
        index += 1
    while index < len(lines):
        match = _HUNK.match(lines[index])
        if match is None:
            raise DiffApplyError(f"line {index + 1}: expected a hunk header, got {lines[index]!r}")
        index += 1
        old: list[str] = []
        new: list[str] = []
        last: list[list[str]] = []
        while index < len(lines) and not lines[index].startswith("@@"):
            line = lines[index]
            if line.rstrip("\n") == NO_NEWLINE:
                for target in last:
                    _strip_newline_marker(target)
            elif line.startswith(" "):
                old.append(line[1:])
                new.append(line[1:])
                last = [old, new]
            elif line.startswith("-"):
                old.append(line[1:])
                last = [old]
            elif line.startswith("+"):
                new.append(line[1:])
                last = [new]
            elif line in ("\n", ""):
                old.append("\n")
                new.append("\n")
                last = [old, new]
            else:
                raise DiffApplyError(f"line {index + 1}: unexpected {line!r} inside a hunk")
            index += 1
        old_start = int(match.group("old"))
        if match.group("oldlen") == "0":
            old_start += 1  # "-N,0" means insert after line N
        hunks.append(Hunk(old_start, tuple(old), tuple(new)))
    return hunks


def _find(target: list[str], old: tuple[str, ...], expected: int, floor: int) -> int | None:
    limit = len(target) - len(old)
    for offset in range(0, max(limit, expected) + 1):
        for start in (expected - offset, expected + offset):
            if floor <= start <= limit and tuple(target[start : start + len(old)]) == old:
                return start
    return None


def apply_unified_diff(original: str, diff: str) -> str:
    """Return `original` with `diff` applied, or raise DiffApplyError."""
    target = original.splitlines(keepends=True)
    hunks = parse_hunks(diff)
    if not hunks:
        raise DiffApplyError("the diff holds no hunks")
    delta = 0
    floor = 0
    for number, hunk in enumerate(hunks, 1):
        expected = max(hunk.old_start - 1 + delta, 0)
        start = _find(target, hunk.old, expected, floor)
        if start is None:
            raise DiffApplyError(f"hunk {number} (at line {hunk.old_start}) does not apply")
        target[start : start + len(hunk.old)] = list(hunk.new)
        delta += len(hunk.new) - len(hunk.old)
        floor = start + len(hunk.new)
    return "".join(target)


def count_diff_lines(diff: str) -> tuple[int, int]:
    """Lines a unified diff adds and removes.

    Hunk headers give each hunk's old and new lengths, so a removed line that itself
    starts with '--' is told apart from a '--- a/file' header.
    """
    added = removed = 0
    old_left = new_left = 0
    for line in diff.splitlines():
        if old_left == 0 and new_left == 0:
            match = _HUNK.match(line)
            if match:
                old_left = int(match.group("oldlen") or 1)
                new_left = int(match.group("newlen") or 1)
            continue
        if line.startswith("+"):
            added += 1
            new_left -= 1
        elif line.startswith("-"):
            removed += 1
            old_left -= 1
        elif line.startswith(" ") or line == "":
            old_left -= 1
            new_left -= 1
    return added, removed
