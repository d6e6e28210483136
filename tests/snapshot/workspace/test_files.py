"""Tests of repro.snapshot.workspace.files: the workspace files carried under files/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from repro.errors import ConfigError
from repro.snapshot.workspace.files import looks_secret, select_files, token_in_code


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        (".netrc", True),
        (".pypirc", True),
        (".env", True),
        ("server.pem", True),
        ("tls.key", True),
        ("id_ed25519.pub", True),
        ("hf_token.txt", True),
        ("API_TOKEN", True),
        ("db.secret", True),
        ("credentials.json", True),
        ("tokenizer.json", True),  # a name holding "token" is refused by its name
        ("config.json", False),
        ("env.sh", False),
        ("keys.md", False),
        ("results.yaml", False),
    ],
)
def test_looks_secret_by_name(name: str, secret: bool) -> None:
    assert looks_secret(Path("bench") / name) is secret


def _workspace(root: Path) -> Path:
    for rel, text in {
        "bench/run.sh": "echo run\n",
        "bench/lib/util.py": "X = 1\n",
        "bench/__pycache__/util.cpython-311.pyc": "junk",
        "bench/.git/config": "[core]\n",
        "bench/.env": "A=1\n",
        "results/a.json": "{}",
        "results/tmp/b.json": "{}",
        "README.md": "# ws\n",
    }.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_select_expands_directories_and_skips_caches_and_secrets(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    selection = select_files(ws, ["bench", "README.md"])
    assert [(f.bundle_path, f.source) for f in selection.files] == [
        ("files/README.md", ws / "README.md"),
        ("files/bench/lib/util.py", ws / "bench/lib/util.py"),
        ("files/bench/run.sh", ws / "bench/run.sh"),
    ]
    assert selection.refused_secrets == (ws / "bench/.env",)


def test_select_excludes_and_takes_a_file_once(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    selection = select_files(
        ws, ["results/**/*.json", "results/a.json"], exclude=[ws / "results" / "tmp"]
    )
    assert [f.bundle_path for f in selection.files] == ["files/results/a.json"]


def test_select_never_follows_a_link(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    outside = tmp_path / "outside.txt"
    outside.write_text("not the workspace's\n")
    os.symlink(outside, ws / "bench" / "escape.txt")
    os.symlink(ws / "README.md", ws / "bench" / "inside-link.md")
    selection = select_files(ws, ["bench/*"])
    assert [f.bundle_path for f in selection.files] == [
        "files/bench/lib/util.py",
        "files/bench/run.sh",
    ]


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("../elsewhere/*", r"ws\.toml: \[files\] include: '\.\./elsewhere/\*' escapes"),
        ("/etc/*", r"ws\.toml: \[files\] include: '/etc/\*' escapes the workspace"),
        ("bench/../../x", "escapes the workspace"),
        ("nothing/*.csv", r"ws\.toml: \[files\] include: 'nothing/\*\.csv' matches nothing"),
    ],
)
def test_a_bad_pattern_names_the_config_and_the_pattern(
    tmp_path: Path, pattern: str, message: str
) -> None:
    ws = _workspace(tmp_path)
    with pytest.raises(ConfigError, match=message):
        select_files(ws, [pattern], config="ws.toml")


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b'TOKEN = "hf_' + b"a" * 34 + b'"\n', "a token (hf_...)"),
        (b"k = 'ghp_" + b"B" * 36 + b"'\n", "a token (ghp...)"),
        (b"-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n", "a private key"),
        (b'URL = "https://user:hunter22@example.com/simple"\n', "a URL with credentials"),
        (b'API_KEY = os.environ["API_KEY"]\n', None),  # a name, not a value
        (b"def tokenize(text): return text.split()\n", None),
        (b"x = 'sk-short'\n", None),
    ],
)
def test_token_in_code(data: bytes, why: str | None) -> None:
    assert token_in_code(data) == why


def test_token_in_code_finds_a_known_value_of_eight_or_more_characters() -> None:
    data = b"PASSWORD = 'quietvalue42'\n"
    assert token_in_code(data, ["quietvalue42"]) == "the value of a secret environment variable"
    assert token_in_code(b"x = 'short'\n", ["short"]) is None  # under 8: not searched
