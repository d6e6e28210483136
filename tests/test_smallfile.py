"""Tests of repro.smallfile: the sha256 of a small file a bundle names."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import pytest

from repro.errors import InputError, SmallFileRefused
from repro.smallfile import small_file_sha256


def test_digest_of_a_small_file(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_bytes(b'{"hidden_size": 4096}\n')
    digest = small_file_sha256(config, within=[tmp_path], limit=1 << 20)
    assert digest == hashlib.sha256(b'{"hidden_size": 4096}\n').hexdigest()


def test_empty_file_and_file_at_the_limit(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "ten").write_bytes(b"0123456789")
    assert small_file_sha256(tmp_path / "empty", within=[tmp_path], limit=0) == (
        hashlib.sha256(b"").hexdigest()
    )
    assert small_file_sha256(tmp_path / "ten", within=[tmp_path], limit=10) == (
        hashlib.sha256(b"0123456789").hexdigest()
    )


def test_over_the_limit_is_refused_naming_the_sizes(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * 11)
    with pytest.raises(SmallFileRefused, match=r"big: 11 bytes, over 10: not read"):
        small_file_sha256(big, within=[tmp_path], limit=10)


def test_a_link_into_a_second_home_is_read(tmp_path: Path) -> None:
    model, blobs = tmp_path / "model", tmp_path / "blobs"
    model.mkdir()
    blobs.mkdir()
    (blobs / "abc").write_bytes(b"tok")
    (model / "tokenizer.json").symlink_to(blobs / "abc")
    assert small_file_sha256(model / "tokenizer.json", within=[model, blobs], limit=10) == (
        hashlib.sha256(b"tok").hexdigest()
    )


def test_a_link_out_of_its_homes_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (tmp_path / "secret").write_bytes(b"s")
    (model / "config.json").symlink_to(tmp_path / "secret")
    with pytest.raises(SmallFileRefused, match=r"config.json: leads to .*secret, outside"):
        small_file_sha256(model / "config.json", within=[model], limit=10)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(SmallFileRefused, match="not a regular file"):
        small_file_sha256(fifo, within=[tmp_path], limit=10)


def test_a_directory_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(SmallFileRefused, match="d: not a regular file"):
        small_file_sha256(tmp_path / "d", within=[tmp_path], limit=10)
    with pytest.raises(SmallFileRefused, match="gone: cannot open"):
        small_file_sha256(tmp_path / "gone", within=[tmp_path], limit=10)


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(SmallFileRefused, match=r"cannot open|not a regular file"):
            small_file_sha256(path, within=[tmp_path], limit=10)


def test_a_proc_file_that_streams_past_its_size_is_refused() -> None:
    # /proc/self/status says 0 bytes and then yields its text
    proc = Path("/proc/self/status")
    with pytest.raises(SmallFileRefused, match=r"yields more bytes than its size \(0\)"):
        small_file_sha256(proc, within=[Path("/proc")], limit=1 << 20)


def test_refusal_is_an_input_error() -> None:
    assert issubclass(SmallFileRefused, InputError)
