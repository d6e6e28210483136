"""A unit file's lines, read as systemd reads them: the one reader of unit text.

systemd (src/basic/fileio.c read_line_full, src/shared/conf-parser.c config_parse)
ends a line at "\\n", "\\r", NUL or a run of them ("\\r\\n" is one end); Python's
str.splitlines() also ends one at "\\f", "\\v", "\\x1c"-"\\x1e", "\\x85", U+2028 and
U+2029 and never at NUL. Where the two disagree a unit shows repro one set of settings
and systemd runs another, so such text is refused, naming the file and line: every
control character (Unicode Cc) except tab and newline ("\\r" only as part of "\\r\\n"),
U+2028/U+2029, the bidirectional-text controls (text that displays in another order
than systemd reads it) and a byte-order mark past the very start (systemd drops one at
the start, as repro does).

Then, as config_parse: a line whose first non-blank character is "#" or ";" is a
comment, also inside a continuation; a line ending in an odd number of backslashes
continues on the next (the last backslash becomes a space, the next line is appended
as it is); "[NAME]" opens a section (a "[" line without "]" is refused, as systemd
refuses the unit); KEY=VALUE is an assignment, both sides stripped of blanks.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from repro.errors import UnitTextError

BOM = "\ufeff"
_BLANKS = " \t\n\r"  # systemd's WHITESPACE
_COMMENTS = "#;"
# Characters that change how text is displayed, not what it says: a reviewer would read
# another line than systemd does.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


@dataclass(frozen=True)
class UnitLine:
    """One logical line: its first physical line's number, the text systemd parses
    (continuations joined), and the physical lines it was made of (with their ends)."""

    number: int
    text: str
    raw: tuple[str, ...]
    kind: str  # "blank", "comment", "section", "assignment" or "other"
    section: str | None  # the section it is in (for "section": the one it opens)
    key: str = ""
    value: str = ""


def forbidden_character(char: str) -> bool:
    """True for a character unit text may not hold (tab and newline are allowed)."""
    if char in "\t\n":
        return False
    if char in _BIDI or char == BOM:
        return True
    return unicodedata.category(char) in ("Cc", "Zl", "Zp")


def describe_character(char: str) -> str:
    name = unicodedata.name(char, "") or {
        "\x00": "NUL",
        "\x0b": "LINE TABULATION",
        "\x0c": "FORM FEED",
        "\r": "CARRIAGE RETURN",
        "\x85": "NEXT LINE",
    }.get(char, "control character")
    return f"U+{ord(char):04X} ({name})"


def physical_lines(text: str, *, source: str) -> list[str]:
    """`text` split at "\\n" only, each line with its end; a "\\r\\n" end is kept as it
    is. Refused (UnitTextError, naming `source` and the line): any character that
    `forbidden_character` names, and a "\\r" that does not end its line."""
    body = text.removeprefix(BOM)
    lines = body.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    for number, line in enumerate(out, start=1):
        content = line.removesuffix("\n").removesuffix("\r")
        bad = next((char for char in content if forbidden_character(char)), None)
        if bad is not None:
            raise UnitTextError(
                f"{source}:{number}: holds {describe_character(bad)}, which systemd reads "
                "unlike repro would show it (a line end, or a character a reviewer cannot "
                "see); refused",
                hint="unit files are plain text: lines end with a newline, and hold no "
                "control characters but tabs; write the character as an escape "
                "(\\x0c) or remove it, and pack again",
            )
    return out


def _ends_continued(text: str) -> bool:
    """An odd run of trailing backslashes: config_parse counts escapes left to right."""
    escaped = False
    for char in text:
        escaped = not escaped if char == "\\" else False
    return escaped


def _is_comment(line: str) -> bool:
    stripped = line.lstrip(_BLANKS)
    return bool(stripped) and stripped[0] in _COMMENTS


def _strip_end(line: str) -> str:
    return line.removesuffix("\n").removesuffix("\r")


def unit_lines(text: str, *, source: str) -> list[UnitLine]:
    """Every logical line of a unit file, in order (comments and blank lines too, so a
    rewriter keeps them); see the module's docstring for the rules."""
    out: list[UnitLine] = []
    section: str | None = None
    pending: list[str] = []  # physical lines of a continuation so far
    joined = ""
    start = 0
    for number, raw in enumerate(physical_lines(text, source=source), start=1):
        if _is_comment(raw):
            if pending:
                pending.append(raw)  # a comment inside a continuation is skipped
            else:
                out.append(UnitLine(number, raw.strip(_BLANKS), (raw,), "comment", section))
            continue
        if not pending:
            start, joined = number, ""
        pending.append(raw)
        joined += _strip_end(raw)
        if _ends_continued(joined):
            joined = joined[:-1] + " "
            continue
        line, section = _logical(start, joined, tuple(pending), section, source)
        out.append(line)
        pending = []
    if pending:  # the file ends inside a continuation: systemd parses what it has
        line, section = _logical(start, joined, tuple(pending), section, source)
        out.append(line)
    return out


def _logical(
    number: int, joined: str, raw: tuple[str, ...], section: str | None, source: str
) -> tuple[UnitLine, str | None]:
    text = joined.strip(_BLANKS)
    if not text:
        return UnitLine(number, text, raw, "blank", section), section
    if text[0] in _COMMENTS:  # a continuation whose joined text starts as a comment
        return UnitLine(number, text, raw, "comment", section), section
    if text.startswith("["):
        if not text.endswith("]"):
            raise UnitTextError(
                f"{source}:{number}: {text!r} is not a section header; systemd refuses the unit",
                hint="a section header is [NAME] on a line of its own",
            )
        name = text[1:-1]
        return UnitLine(number, text, raw, "section", name), name
    key, sep, value = text.partition("=")
    if not sep:
        return UnitLine(number, text, raw, "other", section), section
    line = UnitLine(
        number, text, raw, "assignment", section, key.strip(_BLANKS), value.strip(_BLANKS)
    )
    return line, section


def unit_assignments(text: str, *, source: str) -> Iterator[UnitLine]:
    """The assignments of a unit file inside a section, in order (systemd ignores
    those before the first section header)."""
    for line in unit_lines(text, source=source):
        if line.kind == "assignment" and line.section is not None:
            yield line


def check_unit_text(text: str, *, source: str) -> None:
    """Refuse (UnitTextError) unit text systemd and repro would read differently."""
    unit_lines(text, source=source)
