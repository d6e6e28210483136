"""Tests of repro.archive.reader: archive members checked before anything is written."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

import pytest

from repro.archive.reader import (
    ArchiveLimits,
    SafeMember,
    iter_members,
    iter_members_at,
    read_member,
)
from repro.errors import ArchiveError, UnsafeArchiveError


def _tar(members: list[tuple[str, int, bytes | None]]) -> bytes:
    """(name, mode, data or None for a directory) made with tarfile, the real writer."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, mode, data in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


SAMPLE = _tar(
    [
        ("b-1", 0o755, None),
        ("b-1/bundle.toml", 0o644, b"format_version = 1\n"),
        ("b-1/bin/run", 0o700, b"#!/bin/sh\n"),
        ("b-1/priv", 0o600, b"p"),
        ("b-1/env", 0o555, None),
    ]
)


def test_members_relative_to_the_top_with_normalised_modes() -> None:
    got = [
        (m, d.read() if d else None) for m, d in iter_members(io.BytesIO(SAMPLE), source="b.tar")
    ]
    assert got == [
        (SafeMember("bundle.toml", "file", 19, 0o644, "b-1"), b"format_version = 1\n"),
        (SafeMember("bin/run", "file", 10, 0o755, "b-1"), b"#!/bin/sh\n"),
        (SafeMember("priv", "file", 1, 0o644, "b-1"), b"p"),
        (SafeMember("env", "dir", 0, 0o755, "b-1"), None),
    ]


def test_offsets_of_an_uncompressed_file_point_at_the_data(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    path.write_bytes(b"X" * 1000)  # the tar need not start at byte 0
    with open(path, "ab") as out:
        out.write(SAMPLE)
    with open(path, "rb") as stream:
        stream.seek(1000)
        found = {m.name: (m.size, at) for m, _, at in iter_members_at(stream, source=str(path))}
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(fd, 19, found["bundle.toml"][1]) == b"format_version = 1\n"  # type: ignore[arg-type]
        assert os.pread(fd, 10, found["bin/run"][1]) == b"#!/bin/sh\n"  # type: ignore[arg-type]
    finally:
        os.close(fd)
    assert found["env"] == (0, None)


def test_a_compressed_archive_has_no_offsets() -> None:
    offsets = [
        at for _, _, at in iter_members_at(io.BytesIO(gzip.compress(SAMPLE)), source="b.tar.gz")
    ]
    assert offsets == [None, None, None, None]


def test_gnu_tar_reads_what_the_reader_admits(tmp_path: Path) -> None:
    import subprocess

    path = tmp_path / "b.tar"
    path.write_bytes(SAMPLE)
    listed = subprocess.run(["tar", "-tf", str(path)], capture_output=True, check=True, text=True)
    admitted = {f"b-1/{m.name}" for m, _ in iter_members(io.BytesIO(SAMPLE), source="b")}
    assert admitted <= {line.rstrip("/") for line in listed.stdout.splitlines()}


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (ArchiveLimits(max_members=3), "is past the limit of 3 members"),
        (ArchiveLimits(max_member_bytes=18), "'b-1/bundle.toml' is 19 bytes, over the limit of 18"),
        (
            ArchiveLimits(max_total_bytes=25),
            "'b-1/bin/run' takes the archive over the limit of 25 bytes",
        ),
    ],
)
def test_limits_are_applied(limits: ArchiveLimits, message: str) -> None:
    with pytest.raises(UnsafeArchiveError, match=message) as caught:
        list(iter_members(io.BytesIO(SAMPLE), source="b.tar", limits=limits))
    assert str(caught.value).startswith("b.tar: member ")
    assert caught.value.hint is not None and "nothing was extracted" in caught.value.hint


def test_a_repeated_directory_is_allowed_a_repeated_file_is_not() -> None:
    twice = _tar([("b-1/d/x", 0o644, b""), ("b-1/d", 0o755, None)])
    assert [m.name for m, _ in iter_members(io.BytesIO(twice), source="b")] == ["d/x", "d"]
    dup = _tar([("b-1/d", 0o755, None), ("b-1/d", 0o755, None)])
    with pytest.raises(UnsafeArchiveError, match="'b-1/d/' appears twice"):
        list(iter_members(io.BytesIO(dup), source="b"))


def test_a_directory_with_data_is_refused() -> None:
    data = bytearray(_tar([("b-1/d", 0o755, None)]))
    data[124:136] = b"00000000001\0"
    data[148:156] = b" " * 8
    data[148:156] = format(sum(data[:512]), "06o").encode() + b"\0 "
    with pytest.raises(UnsafeArchiveError, match="is a directory with data"):
        list(iter_members(io.BytesIO(bytes(data)), source="b"))


def test_an_archive_of_only_the_end_marker_is_empty() -> None:
    empty = gzip.compress(bytes(10240))  # gzip: detected by its magic, not a tar header
    with pytest.raises(ArchiveError, match=r"^b\.tar\.gz: the archive is empty"):
        list(iter_members(io.BytesIO(empty), source="b.tar.gz"))


def test_read_member(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    path.write_bytes(SAMPLE)
    assert read_member(path, "bin/run") == b"#!/bin/sh\n"
    with pytest.raises(ArchiveError, match=f"{path}: has no file 'env'"):
        read_member(path, "env")  # a directory is no file
    with pytest.raises(ArchiveError, match=f"cannot open {tmp_path / 'gone.tar'}"):
        read_member(tmp_path / "gone.tar", "x")
