"""Tests of repro.archive.common: compression detection and stream helpers."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

import pytest
import zstandard

from repro.archive.common import detect_compression, import_zstandard, is_seekable
from repro.errors import ArchiveError


def _tar_bytes(fmt: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        info = tarfile.TarInfo("b-1/x")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("head", "kind"),
    [
        # mtime fixed: gzip's header holds the time, and a test id that changes from one
        # second to the next is a different test to each xdist worker
        (gzip.compress(b"anything", mtime=0), "gz"),
        (zstandard.ZstdCompressor().compress(b"anything"), "zst"),
        (_tar_bytes(tarfile.PAX_FORMAT), "none"),
        (_tar_bytes(tarfile.USTAR_FORMAT), "none"),
        (_tar_bytes(tarfile.GNU_FORMAT), "none"),  # magic "ustar  "
    ],
    ids=["gzip", "zstd", "pax", "ustar", "gnu"],
)
def test_detects_what_the_real_writers_make(head: bytes, kind: str) -> None:
    assert detect_compression(head[:512]) == kind


@pytest.mark.parametrize(
    "head",
    [
        b"",
        b"PK\x03\x04" + bytes(600),  # a zip
        bytes(512),
        b"\x1f" + bytes(511),
        b"BZh91AY&SY" + bytes(600),  # bzip2 is no bundle compression
        _tar_bytes(tarfile.PAX_FORMAT)[:261],  # too short to hold the magic
    ],
)
def test_anything_else_is_refused_naming_the_source(head: bytes) -> None:
    with pytest.raises(ArchiveError, match=r"^b\.tar: not a tar archive") as caught:
        detect_compression(head, source="b.tar")
    assert caught.value.hint is not None and "repro pack" in caught.value.hint


def test_import_zstandard_gives_the_module() -> None:
    assert import_zstandard() is zstandard


def test_is_seekable(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    with open(path, "rb") as stream:
        assert is_seekable(stream)
    assert not is_seekable(stream)  # closed: False, not ValueError
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as pipe, os.fdopen(write_fd, "wb"):
        assert not is_seekable(pipe)
    assert is_seekable(io.BytesIO(b""))
    assert not is_seekable(object())  # type: ignore[arg-type]
