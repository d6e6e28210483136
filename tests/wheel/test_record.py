"""repro.wheel.record: RECORD read and written as csv reads and writes it, its one hash
encoding, on hand-made rows and on the RECORD of a wheel setuptools built.

The end-to-end battery (hostile but legal names through pip, `repro pack` and
pypa/installer's validation) is tests/wheel/test_record_csv.py."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import zipfile
from pathlib import Path

import pytest
from installer.records import RecordEntry as InstallerEntry
from installer.records import parse_record_file

from repro.errors import InputError, VaultError
from repro.wheel.record import (
    iter_wheel_record,
    join_record_path,
    parse_record,
    read_dist_record,
    read_record,
    record_hash,
    record_hash_to_hex,
    record_rows,
    render_record,
)
from tests.wheel.conftest import QUOTED_NAMES, RealWheel

QUOTES = ('say"hi".txt', "a,b.txt", "sp ace.txt", " lead.txt", "é✓ ünï.txt", "'single'.txt")
BREAKS = ("l\u2028s.txt", "n\x85l.txt", "f\fe.txt", "v\vt.txt", "g\x1ds.txt", "p\u2029s.txt")
DIGEST = bytes.fromhex("ab" * 32)


def _urlsafe(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


# --- the hash encoding ---------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 2, 3, 31, 32, 33, 1000])
@pytest.mark.parametrize("algorithm", ["sha256", "sha384", "sha512", "blake2b"])
def test_record_hash_is_urlsafe_base64_of_the_digest_unpadded(algorithm: str, size: int) -> None:
    data = bytes(range(256)) * 4
    digest = hashlib.new(algorithm, data[:size]).digest()
    field = record_hash(digest, algorithm)
    assert field == f"{algorithm}=" + base64.urlsafe_b64encode(digest).decode().rstrip("=")
    assert "=" not in field.partition("=")[2] and "+" not in field and "/" not in field


@pytest.mark.parametrize("size", [0, 1, 5, 100, 4096])
def test_record_hash_and_its_decoding_round_trip_through_hashlib(size: int) -> None:
    data = b"\xff\x00-_" * size
    hexdigest = hashlib.sha256(data).hexdigest()
    field = record_hash(hashlib.sha256(data).digest())
    assert field.startswith("sha256=")
    assert record_hash_to_hex(field) == hexdigest
    # a row written with base64's padding reads the same
    padded = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
    assert record_hash_to_hex(padded) == hexdigest


@pytest.mark.parametrize("value", ["md5=AAAA", "sha256=", "sha256", ""])
def test_a_hash_field_that_is_not_a_sha256_decodes_to_none(value: str) -> None:
    assert record_hash_to_hex(value) is None


# --- written and read ----------------------------------------------------------------------


@pytest.mark.parametrize("name", [*QUOTES, *BREAKS, 'q"\n"x.txt', "cr\rlf.txt", "x\r\ny.txt"])
def test_record_written_and_read_equals_csv(name: str) -> None:
    path = f"pkg/{name}"
    data = render_record([(path, DIGEST, 5), ("pkg-1.dist-info/RECORD", None, None)])
    rows = list(csv.reader(io.StringIO(data.decode(), newline="")))
    assert rows == [
        [path, "sha256=" + _urlsafe(DIGEST), "5"],
        ["pkg-1.dist-info/RECORD", "", ""],
    ]
    entries = parse_record(data.decode(), "RECORD")
    assert [(e.path, e.sha256, e.size) for e in entries] == [
        (path, DIGEST.hex(), 5),
        ("pkg-1.dist-info/RECORD", None, None),
    ]


@pytest.mark.parametrize("name", [*QUOTES, "plain.txt"])
def test_pypa_installer_reads_a_rendered_record_and_its_hashes_validate(name: str) -> None:
    data = f"content of {name}\n".encode()
    text = render_record(
        [
            (f"pkg/{name}", hashlib.sha256(data).digest(), len(data)),
            ("pkg-1.dist-info/RECORD", None, None),
        ]
    ).decode()
    (first, last) = [
        InstallerEntry.from_elements(*row) for row in parse_record_file(text.splitlines())
    ]
    assert first.path == f"pkg/{name}" and first.size == len(data)
    assert first.validate(data)
    assert (last.path, last.hash_, last.size) == ("pkg-1.dist-info/RECORD", None, None)


def test_the_unquoted_inner_quote_of_the_old_writer_is_read_as_csv_reads_it() -> None:
    """`"pkg/say"hi".txt",...` (inner quotes not doubled, as repro wrote it) names another
    file for csv: the pack side reads what csv reads, never a name of its own."""
    text = '"pkg/say"hi".txt",sha256=' + _urlsafe(bytes.fromhex("cd" * 32)) + ",3\n"
    (row,) = csv.reader(io.StringIO(text, newline=""))
    (entry,) = parse_record(text, "RECORD")
    assert entry.path == row[0] != 'pkg/say"hi".txt'


def test_rows_keep_each_field_as_written_and_the_line_each_ends_on() -> None:
    """The installer's audit compares a row's hash with its algorithm and its size as
    text: `record_rows` hands them over unread; empty lines are no rows."""
    text = '"pkg/a\nb.txt",sha512=xyz,07\n\npkg/c.txt,,\n'
    assert list(record_rows(text, "RECORD")) == [
        (2, "pkg/a\nb.txt", "sha512=xyz", "07"),
        (4, "pkg/c.txt", "", ""),
    ]


def test_paths_are_normalised_and_joined_under_a_prefix() -> None:
    text = "pkg\\win.py,,\n../../../bin/tool,,\npkg/./x.py,,\n"
    assert [e.path for e in parse_record(text, "RECORD")] == [
        "pkg/win.py",
        "../../../bin/tool",
        "pkg/x.py",
    ]
    assert join_record_path("/v/lib/py/site/", "pkg/x.py") == "/v/lib/py/site/pkg/x.py"
    assert join_record_path("/v/lib/py/site/", "../../../bin/tool") == "/v/bin/tool"


def test_a_malformed_row_names_the_file_and_the_line_csv_ends_it_on(tmp_path: Path) -> None:
    record = tmp_path / "RECORD"
    good = render_record([("pkg/a\nb.txt", DIGEST, 1), ("pkg/f\fg.txt", DIGEST, 1)])
    record.write_bytes(good + b"pkg/bad.txt,sha256=x\n")
    with pytest.raises(InputError) as raised:
        read_record(record)
    # the quoted \n makes the first row two lines long: the bad row ends on line 4
    assert f"{record}:4: expected 3 fields" in raised.value.message
    record.write_bytes(good + b"pkg/neg.txt,,-1\n")
    with pytest.raises(InputError, match="negative"):
        read_record(record)
    record.write_bytes(good + b"pkg/size.txt,,ten\n")
    with pytest.raises(InputError, match=r":4: size 'ten' is not a number"):
        read_record(record)


def test_a_field_csv_cannot_read_is_an_input_error_naming_the_line() -> None:
    text = "pkg/a.txt,,\n" + "x" * (csv.field_size_limit() + 1) + ",,\n"
    with pytest.raises(InputError, match=r"^RECORD:\d+: not a csv row"):
        list(record_rows(text, "RECORD"))


def test_an_installed_distribution_without_record_says_how_to_get_one(tmp_path: Path) -> None:
    dist_info = tmp_path / "demo-1.0.dist-info"
    dist_info.mkdir()
    with pytest.raises(InputError, match="no such file") as raised:
        read_dist_record(dist_info)
    assert raised.value.hint is not None and "pip" in raised.value.hint


# --- a real wheel's RECORD -------------------------------------------------------------------


def test_a_built_wheels_record_lists_every_member_with_its_hash(real_wheel: RealWheel) -> None:
    entries = {e.path: e for e in iter_wheel_record(real_wheel.path)}
    with zipfile.ZipFile(real_wheel.path) as archive:
        names = archive.namelist()
        assert sorted(entries) == sorted(names)
        for name in names:
            if name == f"{real_wheel.dist_info}/RECORD":
                assert (entries[name].sha256, entries[name].size) == (None, None)
                continue
            data = archive.read(name)
            assert entries[name].sha256 == hashlib.sha256(data).hexdigest(), name
            assert entries[name].size == len(data), name
        text = archive.read(f"{real_wheel.dist_info}/RECORD").decode()
    # the same RECORD, written again, is the bytes the build wrote
    rows = [
        (e.path, bytes.fromhex(e.sha256) if e.sha256 else None, e.size) for e in entries.values()
    ]
    assert render_record(rows).decode() == text
    assert {f"wheeldemo/{n}" for n in QUOTED_NAMES} <= set(entries)


def test_a_wheel_without_a_readable_record_is_a_vault_error(tmp_path: Path) -> None:
    bare = tmp_path / "bare-1.0-py3-none-any.whl"
    with zipfile.ZipFile(bare, "w") as archive:
        archive.writestr("bare/__init__.py", "")
    with pytest.raises(VaultError, match=r"no \.dist-info/RECORD"):
        list(iter_wheel_record(bare))
    bad = tmp_path / "bad-1.0-py3-none-any.whl"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("bad-1.0.dist-info/RECORD", "bad/x.py,sha256=x\n")
    with pytest.raises(VaultError, match=r"!bad-1.0.dist-info/RECORD:1: expected 3 fields"):
        list(iter_wheel_record(bad))
