"""Tests of repro.redaction: what counts as a secret."""

from __future__ import annotations

import pytest

from repro.redaction import (
    REDACTED,
    has_url_credentials,
    is_secret_name,
    looks_like_token,
    redact_assignment,
    redact_url_credentials,
    scrub_document,
    scrub_text,
    secret_assignment,
)

HF = "hf_" + "A" * 34
GH = "ghp_" + "b" * 36


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("wandb_api_key", True),
        ("DB_PASSWORD", True),
        ("GITHUB_AUTH", True),
        ("TOKENIZERS_PARALLELISM", True),
        ("CUDA_VISIBLE_DEVICES", False),
        ("PATH", False),
    ],
)
def test_is_secret_name(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    ("text", "token"),
    [
        (HF, True),
        (GH, True),
        ("sk-" + "x" * 20, True),
        ("AKIA" + "ABCDEFGHIJKLMNOP", True),
        ("xoxb-1234567890", True),
        ("glpat-" + "z" * 20, True),
        ("my" + HF, False),
        ("hf_short", False),
        ("sk-short", False),
    ],
)
def test_looks_like_token(text: str, token: bool) -> None:
    assert looks_like_token(text) is token


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("HF_TOKEN", "abc", "its name"),
        ("HF_TOKEN", "${HF_TOKEN}", None),
        ("HF_TOKEN", "$OTHER", None),
        ("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1", None),
        ("AWS_REGION", "us-east-1", "its name"),
        ("API_KEY", "off", None),
        ("MODEL", HF, "its value looks like a token"),
        ("INDEX", "https://u:p@host/simple", "its value is a URL with credentials"),
        ("INDEX", "https://host/simple", None),
    ],
)
def test_secret_assignment(name: str, value: str, why: str | None) -> None:
    assert secret_assignment(name, value) == why


@pytest.mark.parametrize(
    ("text", "scrubbed", "in_url"),
    [
        (f"see {HF} and {GH}.", f"see {REDACTED} and {REDACTED}.", False),
        ("git+https://x-access-token:tok@github.com/o/r", "git+https://github.com/o/r", True),
        ("git+ssh://git@github.com/o/r", "git+ssh://git@github.com/o/r", False),
        (f"git+ssh://{GH}@github.com/o/r", "git+ssh://github.com/o/r", True),
        ("https://h/x?access_token=abc&page=2", "https://h/x?access_token=&page=2", True),
        ("https://h/x?page=2", "https://h/x?page=2", False),
        ("plain text", "plain text", False),
    ],
)
def test_scrub_text(text: str, scrubbed: str, in_url: bool) -> None:
    assert scrub_text(text) == scrubbed
    assert has_url_credentials(text) is in_url


def test_scrub_text_replaces_known_values_longest_first() -> None:
    assert scrub_text("pw=abcdef and abc", ["abc", "abcdef", ""]) == f"pw={REDACTED} and {REDACTED}"


def test_scrub_document_walks_every_string() -> None:
    document = {"a": [HF, {"b": ("x", 1)}], "n": None, "k": True}
    assert scrub_document(document) == {"a": [REDACTED, {"b": ["x", 1]}], "n": None, "k": True}


def test_redact_url_credentials_and_assignment() -> None:
    assert (
        redact_url_credentials("https://user:pass@host/simple") == f"https://{REDACTED}@host/simple"
    )
    assert redact_assignment("PIP_INDEX_URL", "https://u:p@h/s") == f"https://{REDACTED}@h/s"
    assert redact_assignment("HF_TOKEN", "anything") == REDACTED
    assert redact_assignment("CUDA_HOME", "/usr/local/cuda") == "/usr/local/cuda"
