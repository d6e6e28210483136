"""Tests of repro.units.dropin: the secrets drop-in environment file."""

from __future__ import annotations

import pytest

from repro.units.dropin import (
    DROPIN_NAME,
    REQUIRED_MARK,
    dropin_member,
    dropin_reference,
    read_values,
    render_dropin,
    required_names,
    unset_names,
)


def test_member_and_reference() -> None:
    assert dropin_member("sglang.service") == f"sglang.service.d/{DROPIN_NAME}"
    assert dropin_reference("sglang.service") == (
        "EnvironmentFile=-${REPRO_HOME}/services/sglang.service.d/repro-secrets.env"
    )


def test_render_sorts_and_deduplicates_and_reads_back() -> None:
    text = render_dropin("sglang.service", ["WANDB_API_KEY", "HF_TOKEN", "HF_TOKEN"])
    lines = text.splitlines()
    assert lines[0].startswith("# Credentials sglang.service needs")
    assert lines[2:] == [REQUIRED_MARK, "HF_TOKEN=", REQUIRED_MARK, "WANDB_API_KEY="]
    assert text.endswith("\n")
    assert required_names(text) == ("HF_TOKEN", "WANDB_API_KEY")
    assert read_values(text) == {"HF_TOKEN": "", "WANDB_API_KEY": ""}
    assert unset_names(text, ["HF_TOKEN", "WANDB_API_KEY"]) == ("HF_TOKEN", "WANDB_API_KEY")


def test_required_names_only_after_the_mark() -> None:
    text = "\n".join(
        [
            "PLAIN=1",
            REQUIRED_MARK,
            "  export HF_TOKEN=",
            "OTHER=2",
            "  " + REQUIRED_MARK + "  ",
            "# a comment breaks the pairing",
            "LOST=",
            REQUIRED_MARK + "\r",
            "CRLF_TOKEN=\r",
        ]
    )
    assert required_names(text) == ("HF_TOKEN", "CRLF_TOKEN")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A=1\nA=2\n", {"A": "2"}),
        ('A="quoted value"\n', {"A": "quoted value"}),
        ("A='single'\n", {"A": "single"}),
        ("export B = spaced \n", {"B": "spaced"}),
        ("A=x\r\nB=y\r\n", {"A": "x", "B": "y"}),
        ("# A=1\n1BAD=2\n=3\nnot an assignment\n", {}),
        ("A=has=equals\n", {"A": "has=equals"}),
        # systemd ends lines at \n only: a form feed or U+2028 stays in the value
        ("A=x\x0cB=y\n", {"A": "x\x0cB=y"}),
        ("A=x\u2028B=y\n", {"A": "x\u2028B=y"}),
    ],
)
def test_read_values(text: str, expected: dict[str, str]) -> None:
    assert read_values(text) == expected


def test_unset_names_last_assignment_wins() -> None:
    text = "HF_TOKEN=hf_x\nHF_TOKEN=\nKEY=\nKEY=v\n"
    assert unset_names(text, ["HF_TOKEN", "KEY", "ABSENT"]) == ("HF_TOKEN", "ABSENT")
