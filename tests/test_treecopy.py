"""Tests of repro.treecopy: a bundle directory copied into staging, hashed on the way."""

from __future__ import annotations

import hashlib
import os
import socket
import stat
from pathlib import Path

import pytest

from repro.archive.reader import ArchiveLimits
from repro.errors import InputError, UsageError, VerificationError
from repro.treecopy import copy_bundle_dir


def _bundle(root: Path) -> dict[str, bytes]:
    files = {
        "bundle.toml": b"v = 1\n",
        "env/wheels/k.whl": os.urandom(70_000),
        "setup_env.sh": b"#!/bin/sh\n",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "setup_env.sh").chmod(0o700)
    (root / "empty").mkdir()
    return files


def test_copies_files_and_returns_their_digests(tmp_path: Path) -> None:
    source, dest = tmp_path / "b", tmp_path / "staging"
    source.mkdir()
    files = _bundle(source)
    digests = copy_bundle_dir(source, dest, jobs=2)
    assert digests == {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
    assert {rel: (dest / rel).read_bytes() for rel in files} == files
    assert stat.S_IMODE((dest / "setup_env.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "bundle.toml").stat().st_mode) == 0o644
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755 and (dest / "empty").is_dir()


def test_a_staging_inside_the_source_and_skipped_files_are_not_copied(tmp_path: Path) -> None:
    source = tmp_path / "b"
    source.mkdir()
    files = _bundle(source)
    lock = source / ".repro.lock"
    lock.write_text("")
    digests = copy_bundle_dir(source, source / ".staging", skip=[lock, tmp_path / "absent"])
    assert set(digests) == set(files)
    assert not (source / ".staging" / ".staging").exists()


def test_everything_that_is_no_file_is_named_at_once(tmp_path: Path) -> None:
    source = tmp_path / "b"
    source.mkdir()
    _bundle(source)
    (source / "ln").symlink_to("bundle.toml")
    os.mkfifo(source / "env" / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(source / "s"))
    (source / "back\\slash").write_text("x")
    try:
        with pytest.raises(VerificationError) as caught:
            copy_bundle_dir(source, tmp_path / "staging")
    finally:
        sock.close()
    message = caught.value.message
    assert message.startswith(f"{source}: the bundle directory holds what a bundle never holds")
    for item in (
        "ln: a symbolic link",
        "env/pipe: a FIFO",
        "s: a socket",
        "back\\slash: the name holds",
    ):
        assert f"  - {item}" in message, message


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (ArchiveLimits(max_members=2), "more than 2 files; a bundle holds fewer"),
        (ArchiveLimits(max_member_bytes=60_000), "over the size limits of a bundle"),
        (ArchiveLimits(max_total_bytes=100), "over the size limits of a bundle"),
    ],
)
def test_limits(tmp_path: Path, limits: ArchiveLimits, message: str) -> None:
    source = tmp_path / "b"
    source.mkdir()
    _bundle(source)
    with pytest.raises(VerificationError, match=message):
        copy_bundle_dir(source, tmp_path / "staging", limits=limits)


def test_a_missing_source_or_an_existing_dest(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=f"{tmp_path / 'gone'}: cannot open the directory"):
        copy_bundle_dir(tmp_path / "gone", tmp_path / "staging")
    (tmp_path / "b").mkdir()
    (tmp_path / "staging").mkdir()
    with pytest.raises(
        UsageError, match=f"cannot create a staging directory at {tmp_path / 'staging'}"
    ):
        copy_bundle_dir(tmp_path / "b", tmp_path / "staging")
