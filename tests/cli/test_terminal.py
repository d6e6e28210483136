"""`repro/cli/_terminal.py`: what may reach a terminal, as a table of cases, and the
content stream that is exact when redirected and escaped on a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import pty

import pytest

from repro.cli._terminal import echo_content, json_safe, terminal_safe
from tests.conftest import read_pty

CASES = [
    ("plain text, é, 漢字, emoji 🙂", "plain text, é, 漢字, emoji 🙂"),
    ("lines\nand\ttabs", "lines\nand\ttabs"),
    ("clear \x1b[2J", "clear \\x1b[2J"),
    ("title \x1b]0;owned\x07", "title \\x1b]0;owned\\x07"),
    ("C1 CSI \x9b2J", "C1 CSI \\x9b2J"),
    ("cr\rbs\bdel\x7fnul\x00", "cr\\x0dbs\\x08del\\x7fnul\\x00"),
    (
        "bidi \u202eevil\u202c isolate \u2066x\u2069",
        "bidi \\u202eevil\\u202c isolate \\u2066x\\u2069",
    ),
    ("line sep \u2028", "line sep \\u2028"),
    (b"r\xe9sultat\xff".decode("utf-8", "surrogateescape"), "r\\xe9sultat\\xff"),
    ("\ud800 lone high surrogate", "\\ud800 lone high surrogate"),
]


@pytest.mark.parametrize(("raw", "shown"), CASES, ids=[shown for _, shown in CASES])
def test_terminal_safe(raw: str, shown: str) -> None:
    assert terminal_safe(raw) == shown
    assert terminal_safe(shown) == shown  # escaping is idempotent on its output


def test_json_safe_keeps_the_values_and_no_raw_control_or_surrogate() -> None:
    document = {raw: [raw, {"k": raw}] for raw, _ in CASES}
    text = json_safe(json.dumps(document, ensure_ascii=False))
    text.encode("utf-8")  # no lone surrogate left: it can be written
    assert not [c for c in text if c == "\x1b" or "\x7f" <= c <= "\x9f" or c == "\u202e"]
    assert json.loads(text) == document


DIFF = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-A = 1\n+A = '\x1b[2J'\n"


def test_content_is_exact_when_redirected(capfd: pytest.CaptureFixture[str]) -> None:
    echo_content(DIFF, nl=False)
    assert capfd.readouterr().out == DIFF


def test_content_is_escaped_on_a_terminal() -> None:
    controller, terminal = pty.openpty()
    with os.fdopen(terminal, "w", encoding="utf-8") as stream:
        echo_content(DIFF, nl=False, stream=stream)
    seen = read_pty(controller).decode()
    os.close(controller)
    assert "\x1b" not in seen
    assert "+A = '\\x1b[2J'" in seen
