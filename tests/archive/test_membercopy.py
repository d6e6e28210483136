"""Tests of repro.archive.membercopy: members copied at their offsets, hashed once."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from repro.archive.membercopy import COPY_BUFFER, MemberCopier
from repro.errors import ArchiveError, VerificationError

REPO_ROOT = Path(__file__).resolve().parents[2]


def _source(tmp_path: Path, data: bytes) -> int:
    path = tmp_path / "archive"
    path.write_bytes(data)
    return os.open(path, os.O_RDONLY)


def _out(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)


def test_ranges_are_copied_and_hashed(tmp_path: Path) -> None:
    data = os.urandom(3 * COPY_BUFFER + 123)  # more than one buffer
    fd = _source(tmp_path, b"head" + data + b"tail")
    sizes: list[int] = []
    try:
        with MemberCopier(fd, "a.tar", jobs=2, on_copied=sizes.append) as copier:
            copier.submit("big", _out(tmp_path / "big"), 4, len(data))
            copier.submit("tail", _out(tmp_path / "tail"), 4 + len(data), 4)
            copier.submit("empty", _out(tmp_path / "empty"), 0, 0)
            digests = copier.finish()
    finally:
        os.close(fd)
    assert (tmp_path / "big").read_bytes() == data
    assert (tmp_path / "tail").read_bytes() == b"tail"
    assert (tmp_path / "empty").read_bytes() == b""
    assert digests == {
        "big": hashlib.sha256(data).hexdigest(),
        "tail": hashlib.sha256(b"tail").hexdigest(),
        "empty": hashlib.sha256(b"").hexdigest(),
    }
    assert sizes == [len(data), 4, 0]


def test_many_members_through_few_threads(tmp_path: Path) -> None:
    blob = bytes(range(256)) * 40
    fd = _source(tmp_path, blob)
    try:
        with MemberCopier(fd, "a.tar", jobs=1) as copier:
            for i in range(40):
                copier.submit(f"m{i}", _out(tmp_path / f"m{i}"), i * 256, 256)
            digests = copier.finish()
    finally:
        os.close(fd)
    assert len(digests) == 40
    assert {(tmp_path / f"m{i}").read_bytes() for i in range(40)} == {bytes(range(256))}


def test_a_range_past_the_end_is_a_truncated_archive(tmp_path: Path) -> None:
    fd = _source(tmp_path, b"short")
    try:
        with (
            pytest.raises(
                ArchiveError, match=r"a\.tar: archive is truncated: it ends inside member 'm'"
            ),
            MemberCopier(fd, "a.tar", jobs=1) as copier,
        ):
            copier.submit("m", _out(tmp_path / "m"), 2, 10)
            copier.finish()
    finally:
        os.close(fd)


def test_a_file_of_its_own_that_shrinks_is_a_verification_error(tmp_path: Path) -> None:
    own = tmp_path / "own"
    own.write_bytes(b"1234")
    archive_fd = _source(tmp_path, b"")
    try:
        with (
            pytest.raises(VerificationError, match="dir/m: the file became shorter"),
            MemberCopier(archive_fd, "dir", jobs=1) as copier,
        ):
            own_fd = os.open(own, os.O_RDONLY)
            copier.submit("m", _out(tmp_path / "m"), 0, 8, source_fd=own_fd)
            copier.finish()
    finally:
        os.close(archive_fd)


def test_descriptors_handed_over_are_closed(tmp_path: Path) -> None:
    fd = _source(tmp_path, b"abcdef")
    out = _out(tmp_path / "m")
    own = os.open(tmp_path / "archive", os.O_RDONLY)
    try:
        with MemberCopier(fd, "a.tar", jobs=1) as copier:
            copier.submit("m", out, 1, 3, source_fd=own)
            assert copier.finish() == {"m": hashlib.sha256(b"bcd").hexdigest()}
    finally:
        os.close(fd)
    for closed in (out, own):
        with pytest.raises(OSError):
            os.fstat(closed)


def test_direct_io_writes_the_same_bytes(tmp_path: Path) -> None:
    script = (
        "import os, sys\n"
        "from repro.archive.membercopy import MemberCopier, direct_io_enabled\n"
        "src, dst, size = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
        "fd = os.open(src, os.O_RDONLY)\n"
        "with MemberCopier(fd, src, jobs=1) as c:\n"
        "    c.submit('m', os.open(dst, os.O_WRONLY | os.O_CREAT, 0o644), 7, size)\n"
        "    print(direct_io_enabled(), c.finish()['m'])\n"
    )
    data = os.urandom((2 << 20) + 777)  # past DIRECT_MIN, an unaligned last block
    (tmp_path / "src").write_bytes(b"7 bytes" + data)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(tmp_path / "src"),
            str(tmp_path / "dst"),
            str(len(data)),
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "REPRO_DIRECT_IO": "1"},
        check=True,
    )
    enabled, digest = done.stdout.split()
    assert enabled == "True"
    assert digest == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "dst").read_bytes() == data
