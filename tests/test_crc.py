"""Tests of repro.crc: the CRC-32 a stored ZIP member records."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import pytest

from repro.crc import crc32


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0),
        (b"123456789", 0xCBF43926),  # the CRC-32 check value of the ISO-HDLC polynomial
        (b"a", 0xE8B7BE43),
        (bytes(1 << 16), zlib.crc32(bytes(1 << 16))),
    ],
)
def test_known_values(data: bytes, expected: int) -> None:
    assert crc32(data) == expected


def test_running_value_continues_over_pieces() -> None:
    data = bytes(range(256)) * 1000
    running = 0
    for start in range(0, len(data), 4097):
        running = crc32(data[start : start + 4097], running)
    assert running == zlib.crc32(data)


def test_matches_what_zipfile_records(tmp_path: Path) -> None:
    payload = b"import torch\n" * 5000
    archive = tmp_path / "w.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("pkg/mod.py", payload)
    with zipfile.ZipFile(archive) as zf:
        assert crc32(payload) == zf.getinfo("pkg/mod.py").CRC
        assert zf.testzip() is None
