"""Tests of repro.bundle.stream: an archive's bytes as one stream."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from repro.bundle.stream import is_url, open_archive
from repro.errors import InputError

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("http://h/b.tar", True),
        ("https://h/b.tar", True),
        ("ftp://h/b.tar", False),
        ("HTTPS://h/b.tar", False),
        ("./http://x", False),
        ("b.tar", False),
        ("-", False),
    ],
)
def test_is_url(target: str, expected: bool) -> None:
    assert is_url(target) is expected


def test_a_file_is_read_and_closed(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    path.write_bytes(b"tar bytes")
    with open_archive(str(path)) as (stream, name):
        assert name == str(path)
        assert stream.read() == b"tar bytes"
    assert stream.closed


def test_a_missing_file_is_an_input_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "gone.tar"
    with (
        pytest.raises(InputError, match=f"{missing}: no such file or directory"),
        open_archive(str(missing)),
    ):
        pass


def test_a_directory_cannot_be_read(tmp_path: Path) -> None:
    with (
        pytest.raises(InputError, match=f"{tmp_path}: cannot read: Is a directory"),
        open_archive(str(tmp_path)),
    ):
        pass


def test_dash_is_stdin() -> None:
    script = (
        "from repro.bundle.stream import open_archive\n"
        "with open_archive('-') as (s, n):\n"
        "    print(n, s.read().decode())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=b"piped",
        capture_output=True,
        cwd=REPO_ROOT,
        check=True,
    )
    assert done.stdout == b"<stdin> piped\n"
