"""Credentials taken out of unit files: each case through clean_unit, then read back
with repro's own reader (repro.units.command) as systemd would read it."""

from __future__ import annotations

import pytest

from repro.redaction import is_secret_variable, looks_like_token, strip_url_credentials
from repro.snapshot.workspace.unitsecrets import clean_unit, secret_flag
from repro.units.command import parse_service
from repro.units.dropin import (
    DROPIN_NAME,
    REQUIRED_MARK,
    render_dropin,
    required_names,
    unset_names,
)

HF = "hf_" + "a1B2c3D4e5" * 4
SK = "sk-proj-" + "Zy9Xw8Vu7T" * 3
GHP = "ghp_" + "Q1w2E3r4T5" * 4
REF = f"EnvironmentFile=-${{REPRO_HOME}}/services/s.service.d/{DROPIN_NAME}"

CASES = [
    # (what, [Service] lines, lines expected in the clean unit, {name: key})
    (
        "a secret name",
        [f"Environment=HF_TOKEN={HF}"],
        [],
        {"HF_TOKEN": "Environment"},
    ),
    (
        "quoted, with a plain one on the same line",
        [f'Environment="OPENAI_API_KEY={SK}" PLAIN=1'],
        ["Environment=PLAIN=1"],
        {"OPENAI_API_KEY": "Environment"},
    ),
    (
        "a token value under a harmless name",
        [f"Environment=HUB={HF} MODE=x"],
        ["Environment=MODE=x"],
        {"HUB": "Environment"},
    ),
    (
        "AWS_* and *PASSWORD*",
        ["Environment=AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE DB_PASSWORD_X=hunter22"],
        [],
        {"AWS_ACCESS_KEY_ID": "Environment", "DB_PASSWORD_X": "Environment"},
    ),
    (
        "--token=V and --api-key V",
        [f"ExecStart=/usr/bin/srv --api-key {SK} --token={GHP} --port 1"],
        ["ExecStart=/usr/bin/srv --api-key ${API_KEY} --token=${TOKEN} --port 1"],
        {"API_KEY": "ExecStart", "TOKEN": "ExecStart"},
    ),
    (
        "--hf-token and --password in ExecStartPre/Post",
        [
            f"ExecStartPre=/usr/bin/fetch --hf-token {HF}",
            "ExecStartPost=/usr/bin/login --password 'pa ss'",
        ],
        [
            "ExecStartPre=/usr/bin/fetch --hf-token ${HF_TOKEN}",
            "ExecStartPost=/usr/bin/login --password ${PASSWORD}",
        ],
        {"HF_TOKEN": "ExecStartPre", "PASSWORD": "ExecStartPost"},
    ),
    (
        "one credential in Environment= and ExecStart=: one name",
        [f"Environment=HF_TOKEN={HF}", f"ExecStart=/usr/bin/srv --token {HF}"],
        ["ExecStart=/usr/bin/srv --token ${HF_TOKEN}"],
        {"HF_TOKEN": "Environment"},
    ),
    (
        "a URL's user:token, over a continuation line",
        [
            "ExecStart=/usr/bin/srv \\",
            f'  --index https://x-access-token:{GHP}@github.com/o/r "a b"',
        ],
        ['ExecStart=/usr/bin/srv --index https://${INDEX_URL_CREDENTIALS}@github.com/o/r "a b"'],
        {"INDEX_URL_CREDENTIALS": "ExecStart"},
    ),
]


@pytest.mark.parametrize(("what", "lines", "kept", "taken"), CASES, ids=[c[0] for c in CASES])
def test_clean_unit(what: str, lines: list[str], kept: list[str], taken: dict[str, str]) -> None:
    text = "[Unit]\nDescription=x\n\n[Service]\n" + "\n".join(lines) + "\nRestart=always\n"
    cleaned = clean_unit(text, unit="s.service")
    for secret in (HF, SK, GHP, "hunter22", "pa ss", "AKIAIOSFODNN7EXAMPLE"):
        assert secret not in cleaned.text
    body = cleaned.text.split("[Service]\n", 1)[1].splitlines()
    assert body == [REF, *kept, "Restart=always"]
    assert {(item.name, item.key) for item in cleaned.taken} >= set(taken.items())
    assert set(cleaned.names) == set(taken)
    service = parse_service(cleaned.text, unit="s.service", provided=cleaned.names)
    assert not [w for w in service.warnings if "no Environment= line sets" in w]
    assert not set(service.environment) & set(taken)


def test_nothing_to_take_keeps_the_bytes() -> None:
    text = (
        "[Service]\nEnvironment=TOKENIZERS_PARALLELISM=false HF_HUB_DISABLE_IMPLICIT_TOKEN=1\n"
        "Environment=HF_TOKEN_PATH=/x HF_TOKEN=${FROM_ELSEWHERE}\n"
        "ExecStart=/usr/bin/srv --tokenizer /t --max-tokens 9 --ssl-keyfile /k \\\n"
        "   --token $HF_TOKEN --repo git+ssh://git@github.com/o/r\n"
    )
    cleaned = clean_unit(text, unit="s.service")
    assert cleaned.text == text
    assert cleaned.taken == ()


def test_the_argv_keeps_the_reference_for_the_launch() -> None:
    text = f"[Service]\nExecStart=/v/bin/vllm serve m --api-key {SK} --port 8001\n"
    cleaned = clean_unit(text, unit="s.service")
    service = parse_service(cleaned.text, unit="s.service", provided=cleaned.names)
    argv = ("/v/bin/vllm", "serve", "m", "--api-key", "${API_KEY}", "--port", "8001")
    assert service.argv == argv


def test_dropin_lists_names_with_empty_values() -> None:
    text = render_dropin("s.service", ["TOKEN", "API_KEY"])
    assert required_names(text) == ("API_KEY", "TOKEN")
    assert text.count(REQUIRED_MARK) == 2 and "API_KEY=\n" in text and "TOKEN=\n" in text
    assert unset_names(text + "TOKEN=abc\n", ["API_KEY", "TOKEN"]) == ("API_KEY",)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("WANDB_API_KEY", True),
        ("CLIENT_SECRET", True),
        ("DB_PASSWORD_FILE", True),
        ("AWS_REGION", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("HF_TOKEN_PATH", False),
        ("SGLANG_KEY_VALUE_CACHE", False),
        ("MAX_TOKENS", False),
    ],
)
def test_secret_variable_names(name: str, secret: bool) -> None:
    assert is_secret_variable(name) is secret


@pytest.mark.parametrize(
    ("word", "secret"),
    [
        ("--token", True),
        ("--api-key", True),
        ("--hf-token", True),
        ("--password", True),
        ("--tokenizer", False),
        ("--max-tokens", False),
        ("--ssl-keyfile", False),
        ("token", False),
    ],
)
def test_secret_flags(word: str, secret: bool) -> None:
    assert secret_flag(word) is secret


@pytest.mark.parametrize(
    ("url", "stripped"),
    [
        (f"git+https://x-access-token:{GHP}@github.com/o/r@v1", "git+https://github.com/o/r@v1"),
        ("https://user:pw@host/simple", "https://host/simple"),
        (f"https://{GHP}@github.com/o/r", "https://github.com/o/r"),
        ("git+ssh://git@github.com/o/r", "git+ssh://git@github.com/o/r"),
        ("https://host/f.whl?access_token=abc&x=1", "https://host/f.whl?access_token=&x=1"),
        ("pkg @ https://host/pkg-1.0.tar.gz", "pkg @ https://host/pkg-1.0.tar.gz"),
    ],
)
def test_url_credentials_stripped(url: str, stripped: str) -> None:
    assert strip_url_credentials(url) == stripped


def test_token_shapes() -> None:
    for token in (HF, SK, GHP, "github_pat_" + "A1b2" * 12):
        assert looks_like_token(f"x={token}")
    for text in ("task-scheduler-configuration-v2", "hf_short", "disk-abcdefghijklmnopqrstuvwxyz"):
        assert not looks_like_token(text)
