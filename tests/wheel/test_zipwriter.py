"""The planned stored ZIP that rebuilt wheels are streamed as: read back by Python's
zipfile and Info-ZIP's unzip, byte counts known ahead, ZIP64 where fields overflow."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zipfile
import zlib
from pathlib import Path

import pytest

from repro.errors import InputError, NotAsRecorded
from repro.wheel import zipwriter
from repro.wheel.zipwriter import ZipMember, ZipPlan

DATE = (2024, 5, 17, 13, 45, 30)


def _plan(tmp_path: Path) -> tuple[ZipPlan, dict[str, bytes]]:
    big = tmp_path / "big.so"
    big.write_bytes(os.urandom(3 << 20))
    big.chmod(0o755)
    info = big.stat()
    content = {
        "pkg/__init__.py": b"VALUE = 1\n",
        "pkg/big.so": big.read_bytes(),
        "pkg/n\u00e4me.txt": b"non-ascii name\n",
        "pkg-1.0.dist-info/RECORD": b"",
    }
    members = (
        ZipMember.from_bytes("pkg/__init__.py", content["pkg/__init__.py"]),
        ZipMember(
            "pkg/big.so",
            info.st_size,
            zlib.crc32(content["pkg/big.so"]),
            True,
            source=str(big),
            mtime_ns=info.st_mtime_ns,
        ),
        ZipMember.from_bytes("pkg/n\u00e4me.txt", content["pkg/n\u00e4me.txt"]),
        ZipMember.from_bytes("pkg-1.0.dist-info/RECORD", b""),
    )
    return ZipPlan(members, DATE), content


def _check_readers(path: Path, content: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None
        assert [i.filename for i in archive.infolist()] == list(content)
        for info in archive.infolist():
            assert archive.read(info) == content[info.filename]
            assert info.compress_type == zipfile.ZIP_STORED
            assert info.date_time == DATE
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in archive.infolist()}
    assert modes["pkg/big.so"] == 0o755
    assert modes["pkg/__init__.py"] == 0o644
    unzip = subprocess.run(["unzip", "-tq", str(path)], capture_output=True, text=True)
    assert unzip.returncode == 0, unzip.stdout + unzip.stderr


def test_planned_size_digest_and_bytes_agree(tmp_path: Path) -> None:
    plan, content = _plan(tmp_path)
    target = tmp_path / "pkg-1.0-py3-none-any.whl"
    written = plan.write(target)
    data = target.read_bytes()
    assert len(data) == plan.size
    assert written == plan.sha256() == hashlib.sha256(data).hexdigest()
    assert b"".join(plan.iter_bytes()) == data
    _check_readers(target, content)


def test_zip64_fields_where_sizes_offsets_and_counts_overflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real ZIP64 needs 4 GiB; the thresholds are lowered so every ZIP64 path is taken
    (member sizes, local header offsets, the central directory's count and offset)."""
    monkeypatch.setattr(zipwriter, "ZIP64_SIZE", 1000)
    monkeypatch.setattr(zipwriter, "ZIP64_COUNT", 2)
    plan, content = _plan(tmp_path)
    target = tmp_path / "z64.whl"
    plan.write(target)
    data = target.read_bytes()
    assert len(data) == plan.size
    assert b"PK\x06\x06" in data and b"PK\x06\x07" in data  # ZIP64 end record and locator
    _check_readers(target, content)


def test_a_file_changed_after_planning_stops_the_stream(tmp_path: Path) -> None:
    plan, _ = _plan(tmp_path)
    source = tmp_path / "big.so"
    source.write_bytes(source.read_bytes()[:-1] + b"\0")  # same size, new mtime
    os.utime(source, ns=(1, 1))
    with pytest.raises(InputError, match="changed while it was packed"):
        b"".join(plan.iter_bytes())
    source.write_bytes(b"short")
    with pytest.raises(InputError, match=r"big\.so changed"):
        plan.sha256()


def test_a_pending_digest_is_checked_when_the_plan_is_streamed(tmp_path: Path) -> None:
    """A member whose sha256 the scan took from RECORD unread is checked by whichever
    path writes it: here the tar stream (a pipe or gzip), as the hole writers do."""
    source = tmp_path / "big.bin"
    data = os.urandom(3 << 20)
    source.write_bytes(data)
    mtime = source.stat().st_mtime_ns

    def plan(sha256: str) -> ZipPlan:
        member = ZipMember(
            "pkg/big.bin", len(data), zlib.crc32(data), False, source=str(source),
            mtime_ns=mtime, sha256=sha256, sha256_pending=True,
        )  # fmt: skip
        return ZipPlan((member,), (2020, 1, 1, 0, 0, 0))

    good = plan(hashlib.sha256(data).hexdigest())
    assert b"".join(good.iter_bytes()).count(data) == 1
    with pytest.raises(NotAsRecorded, match=r"big\.bin differs from its RECORD hash"):
        b"".join(plan("0" * 64).iter_bytes())
