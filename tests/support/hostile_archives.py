"""An in-memory builder of hostile archives and the table of cases the reader must refuse.

In the style of CPython's TestExtractionFilters (Lib/test/test_tarfile.py): each case
builds real tar bytes with `tarfile`. Standard library only, so that the same table
can be run by an interpreter that has none of repro's dependencies (Debian's
/usr/bin/python3 3.11.2, whose tarfile has no extraction filters).
"""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field

TOP = "demo-1.0"


class ArchiveMaker:
    """Members added one by one, as raw TarInfo headers: nothing is sanitised."""

    def __init__(self, *, fmt: int = tarfile.PAX_FORMAT, **open_kwargs: object) -> None:
        self.buffer = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buffer, mode="w", format=fmt, **open_kwargs)  # type: ignore[call-overload]  # noqa: SIM115

    def add(
        self,
        name: str,
        *,
        type: bytes = tarfile.REGTYPE,
        data: bytes = b"",
        mode: int | None = None,
        linkname: str = "",
        size: int | None = None,
    ) -> ArchiveMaker:
        info = tarfile.TarInfo(name)
        info.type = type
        info.linkname = linkname
        info.mode = mode if mode is not None else (0o755 if type == tarfile.DIRTYPE else 0o644)
        if type in (tarfile.REGTYPE, tarfile.AREGTYPE):
            info.size = len(data) if size is None else size
            self.tar.addfile(info, io.BytesIO(data))
        else:
            self.tar.addfile(info)
        return self

    def top(self) -> ArchiveMaker:
        return self.add(f"{TOP}/", type=tarfile.DIRTYPE)

    def bytes(self) -> bytes:
        self.tar.close()
        return self.buffer.getvalue()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


@dataclass(frozen=True)
class Case:
    """A hostile archive, the error class it must raise and the member it must name."""

    id: str
    build: Callable[[], bytes]
    error: str  # "UnsafeArchiveError" or "ArchiveError"
    member: str
    limits: dict[str, int] = field(default_factory=dict)


def _plain() -> ArchiveMaker:
    return ArchiveMaker().top().add(f"{TOP}/ok.txt", data=b"fine\n")


def _good() -> bytes:
    return _plain().add(f"{TOP}/sub/more.txt", data=b"more\n").bytes()


def _corrupt_checksum() -> bytes:
    data = bytearray(_good())
    data[512 * 3 + 5] ^= 0x01  # inside the name in sub/more.txt's header
    return bytes(data)


def _truncated_in_data() -> bytes:
    data = _good()
    return data[: 512 * 4 + 3]  # inside sub/more.txt's data


def _truncated_at_header() -> bytes:
    data = _good()
    return data[: 512 * 3]  # just after ok.txt's data block: no further header


def _truncated_in_header() -> bytes:
    return _good()[: 512 * 3 + 200]  # inside sub/more.txt's header


def _trailing_garbage() -> bytes:
    return _good() + b"\x01" * 512


CASES: list[Case] = [
    Case(
        "dotdot",
        lambda: _plain().add(f"{TOP}/../evil", data=b"x").bytes(),
        "UnsafeArchiveError",
        "../evil",
    ),
    Case(
        "dotdot-inside",
        lambda: _plain().add(f"{TOP}/a/../../evil", data=b"x").bytes(),
        "UnsafeArchiveError",
        "../../evil",
    ),
    Case(
        "absolute",
        lambda: _plain().add("/tmp/repro-evil", data=b"x").bytes(),
        "UnsafeArchiveError",
        "/tmp/repro-evil",
    ),
    Case(
        "symlink-then-write-through",
        lambda: (
            _plain()
            .add(f"{TOP}/link", type=tarfile.SYMTYPE, linkname="/tmp/repro-target")
            .add(f"{TOP}/link/file", data=b"pwned")
            .bytes()
        ),
        "UnsafeArchiveError",
        f"{TOP}/link",
    ),
    Case(
        "symlink-relative-escape",
        lambda: _plain().add(f"{TOP}/up", type=tarfile.SYMTYPE, linkname="../..").bytes(),
        "UnsafeArchiveError",
        f"{TOP}/up",
    ),
    Case(
        "hardlink",
        lambda: _plain().add(f"{TOP}/hard", type=tarfile.LNKTYPE, linkname="/etc/passwd").bytes(),
        "UnsafeArchiveError",
        f"{TOP}/hard",
    ),
    Case(
        "chardev",
        lambda: _plain().add(f"{TOP}/tty", type=tarfile.CHRTYPE).bytes(),
        "UnsafeArchiveError",
        f"{TOP}/tty",
    ),
    Case(
        "blockdev",
        lambda: _plain().add(f"{TOP}/sda", type=tarfile.BLKTYPE).bytes(),
        "UnsafeArchiveError",
        f"{TOP}/sda",
    ),
    Case(
        "fifo",
        lambda: _plain().add(f"{TOP}/pipe", type=tarfile.FIFOTYPE).bytes(),
        "UnsafeArchiveError",
        f"{TOP}/pipe",
    ),
    Case(
        "duplicate",
        lambda: _plain().add(f"{TOP}/ok.txt", data=b"again").bytes(),
        "UnsafeArchiveError",
        f"{TOP}/ok.txt",
    ),
    Case(
        "case-collision",
        lambda: _plain().add(f"{TOP}/OK.txt", data=b"x").bytes(),
        "UnsafeArchiveError",
        f"{TOP}/OK.txt",
    ),
    Case(
        "case-collision-dirs",
        lambda: _plain().add(f"{TOP}/Lib/a", data=b"x").add(f"{TOP}/lib/b", data=b"y").bytes(),
        "UnsafeArchiveError",
        f"{TOP}/lib/b",
    ),
    Case(
        "two-top-dirs",
        lambda: _plain().add("other-1.0/x", data=b"x").bytes(),
        "UnsafeArchiveError",
        "other-1.0/x",
    ),
    Case(
        "file-at-top",
        lambda: ArchiveMaker().add("lonely.txt", data=b"x").bytes(),
        "UnsafeArchiveError",
        "lonely.txt",
    ),
    Case(
        "file-as-dir",
        lambda: _plain().add(f"{TOP}/ok.txt/inner", data=b"x").bytes(),
        "UnsafeArchiveError",
        f"{TOP}/ok.txt/inner",
    ),
    Case(
        "setuid",
        lambda: _plain().add(f"{TOP}/su", data=b"x", mode=0o4755).bytes(),
        "UnsafeArchiveError",
        f"{TOP}/su",
    ),
    Case(
        "setgid-dir",
        lambda: _plain().add(f"{TOP}/sg/", type=tarfile.DIRTYPE, mode=0o2755).bytes(),
        "UnsafeArchiveError",
        f"{TOP}/sg",
    ),
    Case(
        "sticky-dir",
        lambda: _plain().add(f"{TOP}/tmp/", type=tarfile.DIRTYPE, mode=0o1777).bytes(),
        "UnsafeArchiveError",
        f"{TOP}/tmp",
    ),
    Case(
        "world-writable",
        lambda: _plain().add(f"{TOP}/ww", data=b"x", mode=0o666).bytes(),
        "UnsafeArchiveError",
        f"{TOP}/ww",
    ),
    Case(
        "group-writable",
        lambda: _plain().add(f"{TOP}/gw", data=b"x", mode=0o664).bytes(),
        "UnsafeArchiveError",
        f"{TOP}/gw",
    ),
    Case(
        "backslash",
        lambda: _plain().add(f"{TOP}/a\\..\\b", data=b"x").bytes(),
        "UnsafeArchiveError",
        "a\\\\..\\\\b",
    ),
    Case(
        "control-char",
        lambda: _plain().add(f"{TOP}/bell\x07", data=b"x").bytes(),
        "UnsafeArchiveError",
        "bell\\x07",
    ),
    Case(
        "global-pax-header",
        lambda: ArchiveMaker(pax_headers={"path": "/etc"}).top().bytes(),
        "UnsafeArchiveError",
        "global PAX",
    ),
    Case(
        "oversized-member",
        lambda: _plain().add(f"{TOP}/big", data=b"y" * 11).bytes(),
        "UnsafeArchiveError",
        f"{TOP}/big",
        {"max_member_bytes": 10},
    ),
    Case(
        "total-too-large",
        lambda: _plain().add(f"{TOP}/a", data=b"y" * 8).add(f"{TOP}/b", data=b"z" * 8).bytes(),
        "UnsafeArchiveError",
        f"{TOP}/b",
        {"max_total_bytes": 15},
    ),
    Case(
        "too-many-members",
        lambda: _plain().add(f"{TOP}/a", data=b"1").add(f"{TOP}/b", data=b"2").bytes(),
        "UnsafeArchiveError",
        f"{TOP}/b",
        {"max_members": 3},
    ),
    Case("truncated-in-data", _truncated_in_data, "ArchiveError", "sub/more.txt"),
    Case("truncated-at-header", _truncated_at_header, "ArchiveError", "truncated"),
    Case("truncated-in-header", _truncated_in_header, "ArchiveError", "truncated"),
    Case("corrupt-header-checksum", _corrupt_checksum, "ArchiveError", "bad checksum"),
    Case("trailing-garbage", _trailing_garbage, "ArchiveError", "after the end-of-archive"),
    Case("not-an-archive", lambda: b"PK\x03\x04" + bytes(600), "ArchiveError", "not a tar"),
    Case("empty-file", lambda: b"", "ArchiveError", "not a tar"),
]
