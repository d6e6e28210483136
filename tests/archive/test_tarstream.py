"""Tests of repro.archive.tarstream: tar blocks and entries decoded without tarfile."""

from __future__ import annotations

import gzip
import io
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

import pytest
import zstandard

from repro.archive.common import CHUNK
from repro.archive.tarstream import (
    MAX_EXTENDED_HEADER,
    Entry,
    MemberData,
    TarStream,
    iter_entries,
)
from repro.errors import ArchiveError, UnsafeArchiveError


def _tar(members: list[tuple[tarfile.TarInfo, bytes]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buffer.getvalue()


def _file(name: str, data: bytes = b"", **pax: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.pax_headers = pax
    info.mode = 0o644
    return info, data


def _entries(data: bytes, source: str = "b.tar") -> Iterator[Entry]:
    return iter_entries(TarStream(io.BytesIO(data), source))


def _names(data: bytes) -> list[tuple[str, bytes, int]]:
    return [(e.name, e.typeflag, e.size) for e in _entries(data)]


SAMPLE = [_file("top/a.txt", b"alpha"), _file("top/" + "long/" * 30 + "b.txt", b"beta")]
EXPECTED = [("top/a.txt", b"0", 5), ("top/" + "long/" * 30 + "b.txt", b"0", 4)]


@pytest.mark.parametrize(
    "wrap",
    [
        lambda d: d,
        gzip.compress,
        lambda d: zstandard.ZstdCompressor().compress(d),
        lambda d: (
            zstandard.ZstdCompressor().compress(d[:3000])
            + zstandard.ZstdCompressor().compress(d[3000:])
        ),
    ],
    ids=["plain", "gzip", "zstd", "two-zstd-frames"],
)
def test_entries_of_each_compression(wrap: object) -> None:
    assert _names(wrap(_tar(SAMPLE))) == EXPECTED  # type: ignore[operator]


def test_gnu_long_names_and_links_are_folded_in() -> None:
    link = tarfile.TarInfo("top/" + "l" * 120)
    link.type = tarfile.SYMTYPE
    link.linkname = "t" * 120
    data = _tar([_file("top/" + "g" * 150, b"x"), (link, b"")], fmt=tarfile.GNU_FORMAT)
    entries = list(_entries(data))
    assert [e.name for e in entries] == ["top/" + "g" * 150, "top/" + "l" * 120]
    assert entries[1].typeflag == b"2" and entries[1].linkname == "t" * 120


def test_unread_data_is_skipped_and_a_stale_member_reads_as_ended() -> None:
    tar = TarStream(io.BytesIO(_tar(SAMPLE)), "b.tar")
    seen = []
    first: MemberData | None = None
    for entry in iter_entries(tar):
        seen.append(entry.name)
        if entry.name == "top/a.txt":
            first = MemberData(tar, entry.size, "a")
            tar.unread = first
            assert first.read(2) == b"al"  # a partial read: the rest is skipped
    assert seen == [e[0] for e in EXPECTED]
    assert first is not None and first.read(10) == b""


def test_a_seekable_plain_file_is_seekable(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    path.write_bytes(_tar(SAMPLE))
    with open(path, "rb") as stream:
        assert TarStream(stream, str(path)).seekable
    gz = tmp_path / "b.tar.gz"
    gz.write_bytes(gzip.compress(_tar(SAMPLE)))
    with open(gz, "rb") as stream:
        assert not TarStream(stream, str(gz)).seekable


@pytest.mark.parametrize(
    ("pax", "error", "message"),
    [
        (
            {"GNU.sparse.size": "10"},
            UnsafeArchiveError,
            "b.tar: member 'top/a.txt': sparse files are refused",
        ),
        (
            {"hdrcharset": "BINARY"},
            UnsafeArchiveError,
            "b.tar: member 'top/a.txt': names are not UTF-8",
        ),
        ({"size": "12x"}, ArchiveError, "b.tar: member 'top/a.txt': bad size in PAX header"),
    ],
)
def test_pax_records_that_are_refused(
    pax: dict[str, str], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        list(_entries(_tar([_file("top/a.txt", b"x", **pax)])))


def test_a_name_that_is_not_utf8_is_refused() -> None:
    info = tarfile.TarInfo("top/x")
    data = bytearray(_tar([(info, b"")], fmt=tarfile.USTAR_FORMAT))
    data[4] = 0xFF
    data[148:156] = b" " * 8
    data[148:156] = format(sum(data[:512]), "06o").encode() + b"\0 "
    with pytest.raises(UnsafeArchiveError, match=r"b.tar: member 'top/\\\\xff': name is not UTF-8"):
        list(_entries(bytes(data)))


def test_a_global_pax_header_is_refused() -> None:
    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "x"}
    ) as tar:
        tar.addfile(tarfile.TarInfo("top/a"), io.BytesIO(b""))
    with pytest.raises(UnsafeArchiveError, match="global PAX headers are refused"):
        list(_entries(buffer.getvalue()))


def test_an_extended_header_past_the_cap_is_refused_by_its_size() -> None:
    data = _tar([_file("top/a", b"", comment="c" * (MAX_EXTENDED_HEADER + 1))])
    with pytest.raises(
        UnsafeArchiveError, match=r"b.tar: header at byte 0: extended headers of over"
    ):
        list(_entries(data[:1024]))  # refused before its data is read


def test_an_extended_header_without_a_member() -> None:
    data = _tar([_file("top/" + "p" * 150, b"")])
    pax_only = data[:1024] + bytes(10240)  # the PAX header and its data, then the end
    with pytest.raises(ArchiveError, match="extended header without a member"):
        list(_entries(pax_only))


@pytest.mark.parametrize(
    ("cut", "message"),
    [
        (
            lambda d: d[:700],
            r"archive is truncated \(ends at byte 700, inside member 'top/a.txt'\)",
        ),
        (lambda d: d[:1536] + b"\x01" + bytes(9000), r"header at byte 1536: corrupt tar header"),
        (lambda d: d[:1536] + bytes(512) + b"x" + bytes(511), r"a lone zero block"),
        (lambda d: d + b"junk", "data after the end-of-archive marker"),
        (lambda d: gzip.compress(d)[:-12], "corrupt or truncated archive"),
        (lambda d: zstandard.ZstdCompressor().compress(d)[:-8], "zstd data is truncated"),
        (lambda d: b"\x28\xb5\x2f\xfd" + b"\xff" * 600, "corrupt zstd data"),
    ],
    ids=["in-data", "bad-header", "lone-zero", "trailer", "gzip", "zstd-truncated", "zstd-corrupt"],
)
def test_damaged_archives_name_where(cut: object, message: str) -> None:
    data = _tar([_file("top/a.txt", b"x" * 600)])
    with pytest.raises(ArchiveError, match=message):
        list(_entries(cut(data)))  # type: ignore[operator]


def _through_pipe(tmp_path: Path, data: bytes) -> list[tuple[str, bytes]]:
    """Every file's name and bytes, read from `data` coming through a real pipe (a
    buffered reader, as stdin is), member by member as extraction reads them."""
    path = tmp_path / "b.tar"
    path.write_bytes(data)
    found: list[tuple[str, bytes]] = []
    with subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE) as cat:
        assert isinstance(cat.stdout, io.BufferedReader)
        tar = TarStream(cast(BinaryIO, cat.stdout), "<stdin>")
        for entry in iter_entries(tar):
            if entry.typeflag == tarfile.REGTYPE:
                member = MemberData(tar, entry.size, entry.name)
                tar.unread = member
                reader = io.BufferedReader(member, CHUNK)
                found.append((entry.name, reader.read()))
    return found


def test_a_pipe_is_read_straight_through_its_own_buffer(tmp_path: Path) -> None:
    files = [
        _file("b/small", b"x" * 10),
        _file("b/empty"),
        _file("b/large", bytes(range(256)) * (3 * CHUNK // 256 + 7)),
    ]
    assert _through_pipe(tmp_path, _tar(files)) == [(i.name, d) for i, d in files]


def test_a_pipe_cut_inside_a_member_names_where(tmp_path: Path) -> None:
    data = _tar([_file("b/large", b"y" * (2 * CHUNK))])
    with pytest.raises(ArchiveError, match=r"truncated \(ends at byte \d+, inside b/large"):
        _through_pipe(tmp_path, data[: 1536 + CHUNK])
