"""Tests of repro.archive.tarformat: tar header encoding and decoding."""

from __future__ import annotations

import io
import tarfile

import pytest

from repro.archive import tarformat
from repro.archive.tarformat import (
    BLOCK,
    RECORD,
    decode_header,
    encode_entry,
    end_of_archive,
    name_problem,
    parse_pax,
    uncarried_name,
)
from repro.errors import ArchiveError


@pytest.mark.parametrize(
    ("rel", "problem"),
    [
        ("a/b.txt", None),
        ("é/ü.py", None),
        ("a" * 255, None),
        ("/".join(["d"] * 2048), None),  # 4095 bytes
        ("", "the name is empty"),
        ("/etc/passwd", "the name is absolute"),
        ("a\x00b", "the name holds a NUL, a control character or a backslash"),
        ("a\x7fb", "the name holds a NUL, a control character or a backslash"),
        ("a\\b", "the name holds a NUL, a control character or a backslash"),
        ("bad\udcff", "the name is not valid UTF-8"),
        ("/".join(["d"] * 2049), "the name is longer than 4096 bytes"),
        ("a//b", "the name has an empty component"),
        ("a/", "the name has an empty component"),
        ("a/./b", "the name has a '.' component"),
        ("../x", "the name has a '..' component"),
        ("a" * 256, "a component of the name is longer than 255 bytes"),
        ("é" * 128, "a component of the name is longer than 255 bytes"),  # 256 bytes
    ],
)
def test_name_problem(rel: str, problem: str | None) -> None:
    assert name_problem(rel) == problem


def test_uncarried_name() -> None:
    assert uncarried_name("ok/name") is None
    assert uncarried_name("x\udcff") == "the name is not valid UTF-8: a bundle cannot hold it"


def _read_back(data: bytes) -> tarfile.TarInfo:
    archive = data + tarformat.padding(0) + end_of_archive(len(data))
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        (member,) = tar.getmembers()
    return member


@pytest.mark.parametrize(
    ("path", "directory", "mode"),
    [
        ("top/a.txt", False, 0o644),
        ("top/bin/run", False, 0o755),
        ("top/dir", True, 0o755),
        ("top/" + "long" * 40 + ".py", False, 0o644),  # over 100 bytes: a PAX path
        ("top/modèle/config.json", False, 0o644),  # not ASCII: a PAX path
    ],
)
def test_tarfile_reads_the_header_back(path: str, directory: bool, mode: int) -> None:
    member = _read_back(encode_entry(path, directory=directory, mode=mode, size=0, mtime=1234))
    assert member.name == path
    assert member.isdir() is directory
    assert member.mode == mode
    assert (member.mtime, member.uid, member.gid, member.uname, member.gname) == (
        1234,
        0,
        0,
        "",
        "",
    )


def test_a_size_of_8_gib_goes_into_a_pax_header() -> None:
    size = tarformat.MAX_OCTAL_11
    header = encode_entry("t/big", directory=False, mode=0o644, size=size, mtime=0)
    with tarfile.open(fileobj=io.BytesIO(header + bytes(BLOCK)), mode="r|") as tar:
        member = tar.next()
        assert member is not None and member.size == size
    small = encode_entry("t/big", directory=False, mode=0o644, size=size - 1, mtime=0)
    assert len(small) == BLOCK  # one plain ustar header


def test_pax_record_lengths_count_themselves() -> None:
    # a record's length includes its own digits: lengths around 9/10 and 99/100 bytes
    for size in range(1, 300):
        record = tarformat._pax_record("path", "x" * size)
        length, _, _ = record.partition(b" ")
        assert int(length) == len(record)
        assert parse_pax(record, "w") == {"path": b"x" * size}


@pytest.mark.parametrize(
    ("written", "total"),
    [(0, RECORD), (512, RECORD), (9216, RECORD), (9217, 2 * RECORD), (RECORD, 2 * RECORD)],
)
def test_end_of_archive_pads_to_the_record(written: int, total: int) -> None:
    tail = end_of_archive(written)
    assert tail == bytes(len(tail)) and len(tail) >= 2 * BLOCK
    assert written + len(tail) == total


def _tarfile_header(**fields: object) -> bytes:
    info = tarfile.TarInfo(str(fields.pop("name", "top/x")))
    for key, value in fields.items():
        setattr(info, key, value)
    return info.tobuf(format=tarfile.USTAR_FORMAT)[:BLOCK]


def test_decode_a_tarfile_header() -> None:
    header = decode_header(_tarfile_header(size=42, mode=0o755), "w")
    assert header == tarformat.RawHeader(b"top/x", 0o755, 42, b"0", b"")
    link = decode_header(_tarfile_header(type=tarfile.SYMTYPE, linkname="../../etc"), "w")
    assert (link.typeflag, link.linkname) == (b"2", b"../../etc")


def test_decode_joins_the_ustar_prefix() -> None:
    name = "top/" + "d" * 120 + "/file.txt"
    header = decode_header(_tarfile_header(name=name), "w")
    assert header.name == name.encode()


def test_decode_gnu_base_256_size() -> None:
    block = bytearray(_tarfile_header())
    block[124:136] = b"\x80" + (5 << 33).to_bytes(11, "big")
    block[148:156] = b" " * 8
    block[148:156] = format(sum(block), "06o").encode() + b"\0 "
    assert decode_header(bytes(block), "w").size == 5 << 33


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (slice(148, 156), b"0000000\0", "w: corrupt tar header \\(bad checksum\\)"),
        (slice(257, 263), b"nottar", "w: not a ustar/pax tar header"),
        (slice(124, 136), b"12x4\0       ", "w: size field of a tar header is not a number"),
        (slice(100, 108), b"\xff" * 8, "w: negative mode in a tar header"),
    ],
)
def test_decode_refuses_bad_headers(field: slice, value: bytes, message: str) -> None:
    block = bytearray(_tarfile_header())
    block[field] = value
    if field.start != 148:  # keep the checksum right so the field itself is judged
        block[148:156] = b" " * 8
        block[148:156] = format(sum(block), "06o").encode() + b"\0 "
    with pytest.raises(ArchiveError, match=message):
        decode_header(bytes(block), "w")


@pytest.mark.parametrize(
    "data",
    [
        b"x path=a\n",
        b"5 path=a\n",
        b"99 path=a\n",
        b"10 path=ab",
        b"9 pathab\n",
        b"10 \xff\xfe=abc\n",  # a key that is not UTF-8
    ],
)
def test_parse_pax_refuses_malformed_records(data: bytes) -> None:
    with pytest.raises(ArchiveError, match="w: malformed PAX extended header"):
        parse_pax(data, "w")


def test_parse_pax_reads_what_tarfile_writes_and_stops_at_padding() -> None:
    info = tarfile.TarInfo("top/" + "n" * 150)
    info.pax_headers = {"comment": "a=b c"}
    buf = info.tobuf(format=tarfile.PAX_FORMAT)
    size = int(buf[124:136].rstrip(b"\0 "), 8)
    records = parse_pax(buf[BLOCK : BLOCK + size] + bytes(20), "w")
    assert records["path"] == ("top/" + "n" * 150).encode()
    assert records["comment"] == b"a=b c"
