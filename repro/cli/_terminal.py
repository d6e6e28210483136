"""Everything repro prints is escaped for the terminal here, in one place.

Unit text, launch commands, file names and bundle metadata come from a bundle or a
workspace: untrusted. An ESC sequence in them, printed raw, clears the screen, moves
the cursor over earlier lines, retitles the window or worse; a C1 control (U+009B is
CSI) does the same on many terminals. So every text repro prints goes through
`terminal_safe`: control characters other than newline and tab, DEL, C1 controls,
the bidirectional overrides that reorder what is shown, and undecodable bytes (file
names that are not UTF-8 arrive as surrogates) are shown as `\\xNN` / `\\uNNNN`.

Three ways out, each routed here: the rich consoles (a render hook escapes the text of
every segment after layout; rich's own style sequences are added later and kept), the
plain `echo` (errors, paths, lists), and `echo_json` (JSON escapes for the same
characters, so the document still parses to the same values). Content streams a user
may redirect to a file (diffs) are escaped only on a terminal (`echo_content`).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, TextIO

import click
from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderHook, RenderResult
from rich.segment import Segment

# C0 but newline and tab, DEL, C1, the bidirectional embeddings, overrides and isolates
# (and LRM/RLM, ALM), line and paragraph separators, lone surrogates.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte surrogateescape could not decode
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """`text` as it may reach a terminal: unchanged unless it holds a control or
    reordering character or an undecodable byte, each then written as an escape."""
    return _UNSAFE.sub(_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group(0)):04x}"


def json_safe(text: str) -> str:
    """A JSON document (`json.dumps(..., ensure_ascii=False)`) with the characters
    `terminal_safe` escapes written as JSON `\\uNNNN` escapes: the same values once
    parsed (json.dumps has escaped C0 already; these are the rest)."""
    return _UNSAFE.sub(_json_escape, text)


class _Escaped:
    """A renderable whose segments have their text escaped (control segments, rich's
    own cursor moves, are kept)."""

    def __init__(self, inner: ConsoleRenderable) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for segment in console.render(self.inner, options):
            if segment.control or not _UNSAFE.search(segment.text):
                yield segment
            else:
                yield Segment(terminal_safe(segment.text), segment.style)


class TerminalSafeHook(RenderHook):
    """Installed on every console repro prints with (see `cli/_common._console`)."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Escaped(renderable) for renderable in renderables]


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """click.echo, escaped. (click strips ESC sequences when not on a terminal and
    passes them through on one: neither is what a name from a bundle needs.)"""
    click.echo(terminal_safe(text), err=err, nl=nl)


def echo_json(document: Any) -> None:
    click.echo(json_safe(json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False)))


def echo_content(text: str, *, nl: bool = True, stream: TextIO | None = None) -> None:
    """File content (a diff): exact when stdout is redirected (the file or pipe gets the
    bytes as they are), escaped on a terminal."""
    out = stream if stream is not None else sys.stdout
    shown = terminal_safe(text) if out.isatty() else text
    click.echo(shown, nl=nl, file=out, color=True)
