"""Install one wheel into a venv by unpacking it: repro's own installer of vault wheels.

What pip and uv do for a wheel, and nothing else (PEP 427, PEP 491, the binary
distribution format): every member goes to its scheme's directory (the root to purelib
or platlib as WHEEL's `Root-Is-Purelib` says, `<name>.data/<key>/` to that key's
directory), `#!python` scripts get the venv's interpreter, console and GUI entry points
become scripts (pip's `pipX.Y` for the target's Python), and the dist-info gets
INSTALLER, REQUESTED and a RECORD of the paths as installed. No code of the wheel runs
and no bytecode is compiled (as uv).

Where each member goes, and whether the wheel may write it there, is decided first for
the whole wheel (repro.wheel.audit: nothing is written for a refused wheel).
Each member is then read once: its bytes are hashed as they are written (stored ones
read with pread, deflated ones inflated here, bounded by the declared size, CRC-32
checked), and a member whose bytes are not the ones its RECORD row hashes is refused,
the files of the wheel written so far removed. The caller has checked the wheel's
SHA-256 against the bundle before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from repro.wheel.audit import (
    Member,
    WheelPlan,
    identity_of,
    plan_wheel,
    refuse,
)
from repro.wheel.record import RecordRow, record_hash, render_record
from repro.wheel.scheme import Scheme
from repro.wheel.scripts import shebang

_CHUNK = 1 << 20
_SMALL = 1 << 16  # a member this small is read in one pread
_PYTHON_SHEBANG = b"#!python"


@dataclass(frozen=True)
class Installed:
    name: str
    version: str
    files: int
    bytes: int


@dataclass
class _Written:
    """What this wheel's install made so far, removed again when it fails."""

    dirs: set[str] = field(default_factory=set)  # every directory known to exist
    created: list[str] = field(default_factory=list)  # directories made here, in order
    files: list[str] = field(default_factory=list)

    def make_parent(self, path: str) -> None:
        parent = os.path.dirname(path)
        missing: list[str] = []
        while parent not in self.dirs and not os.path.isdir(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        self.dirs.add(parent)
        for directory in reversed(missing):
            try:
                os.mkdir(directory)
            except FileExistsError:
                if not os.path.isdir(directory):
                    raise
            else:
                self.created.append(directory)
            self.dirs.add(directory)

    def undo(self) -> None:
        for path in reversed(self.files):
            with contextlib.suppress(OSError):
                os.unlink(path)
        for directory in reversed(self.created):
            with contextlib.suppress(OSError):
                os.rmdir(directory)  # only where empty: another wheel may have used it


def _open_new(path: str, executable: bool, written: _Written) -> int:
    """A new file at `path`, its directories made as needed (and noted in `written`)."""
    written.make_parent(path)
    mode = 0o777 if executable else 0o666  # less the umask, as pip and uv do
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, mode)
    written.files.append(path)
    return fd


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_bytes(path: str, data: bytes, executable: bool, written: _Written) -> None:
    fd = _open_new(path, executable, written)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


class _Hashes:
    """The RECORD row's hash and the installed RECORD's sha256, in one pass."""

    def __init__(self, member: Member) -> None:
        algo = member.digest.partition("=")[0] or "sha256"
        self.algo = algo
        self.listed = hashlib.new(algo)
        self.sha256 = self.listed if algo == "sha256" else hashlib.sha256()

    def update(self, data: bytes | memoryview) -> None:
        self.listed.update(data)
        if self.sha256 is not self.listed:
            self.sha256.update(data)


def _member_data(
    src: int, member: Member, wheel: Path, buffer: memoryview
) -> Iterator[bytes | memoryview]:
    """The member's bytes in chunks (a chunk of `buffer` is valid until the next one),
    never more than it declares; a deflated member's CRC-32 is checked at its end."""
    try:
        if member.method == zipfile.ZIP_STORED:
            yield from _stored(src, member, wheel, buffer)
        else:
            yield from _inflated(src, member, wheel)
    except zlib.error as exc:
        raise refuse(wheel, f"member {member.name!r}", f"not a deflate stream ({exc})") from exc


def _stored(
    src: int, member: Member, wheel: Path, buffer: memoryview
) -> Iterator[bytes | memoryview]:
    if member.size <= _SMALL:
        data = os.pread(src, member.size, member.offset)
        if len(data) != member.size:
            raise refuse(wheel, f"member {member.name!r}", "the wheel ends inside it")
        yield data
        return
    done = 0
    while done < member.size:
        want = min(len(buffer), member.size - done)
        got = os.preadv(src, [buffer[:want]], member.offset + done)
        if got <= 0:
            raise refuse(wheel, f"member {member.name!r}", "the wheel ends inside it")
        yield buffer[:got]
        done += got


def _inflated(src: int, member: Member, wheel: Path) -> Iterator[bytes]:
    inflater = zlib.decompressobj(-15)
    left, at, out, crc = member.compressed, member.offset, 0, 0
    while not inflater.eof:
        if inflater.unconsumed_tail:
            data = inflater.decompress(inflater.unconsumed_tail, _CHUNK)
        elif left > 0:
            chunk = os.pread(src, min(_CHUNK, left), at)
            if not chunk:
                raise refuse(wheel, f"member {member.name!r}", "the wheel ends inside it")
            at, left = at + len(chunk), left - len(chunk)
            data = inflater.decompress(chunk, _CHUNK)
        else:  # all input given: what zlib still holds back (a run of zeros, say)
            data = inflater.decompress(b"", _CHUNK)
            if not data:
                break
        out += len(data)
        if out > member.size:
            rule = f"inflates past the {member.size} bytes the central directory declares"
            raise refuse(wheel, f"member {member.name!r}", rule)
        crc = zlib.crc32(data, crc)
        yield data
    if out != member.size or crc != member.crc:
        rule = "its bytes do not match the CRC-32 and size the central directory declares"
        raise refuse(wheel, f"member {member.name!r}", rule)


def _check_listed(member: Member, hashes: _Hashes, wheel: Path) -> None:
    if not member.digest:
        return  # a signature of RECORD: RECORD lists no hash for it
    got = record_hash(hashes.listed.digest(), hashes.algo)
    if got != member.digest.rstrip("="):  # a row written with base64's padding
        rule = f"its bytes hash to {got}, RECORD lists {member.digest}"
        raise refuse(wheel, f"member {member.name!r}", rule)


def _install_member(
    src: int, member: Member, plan: WheelPlan, written: _Written, buffer: memoryview,
) -> tuple[bytes, int]:  # fmt: skip
    """Write one member, hashed as it is written; its installed (sha256, size)."""
    hashes = _Hashes(member)
    if member.script:
        return _install_script(src, member, plan, written, buffer, hashes)
    fd = _open_new(member.dest, member.executable, written)
    try:
        for chunk in _member_data(src, member, plan.wheel, buffer):
            hashes.update(chunk)
            _write_all(fd, chunk)
    finally:
        os.close(fd)
    _check_listed(member, hashes, plan.wheel)
    return hashes.sha256.digest(), member.size


class _Output:
    """A file being written, and the sha256 and size of what went into it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes | memoryview) -> None:
        self.sha256.update(data)
        self.size += len(data)
        _write_all(self.fd, data)


def _install_script(
    src: int, member: Member, plan: WheelPlan, written: _Written, buffer: memoryview,
    hashes: _Hashes,
) -> tuple[bytes, int]:  # fmt: skip
    """A `.data/scripts/` member, streamed: its first line is held back only while it
    may be `#!python`, which becomes the venv's interpreter line (as pip and uv do)."""
    out = _Output(_open_new(member.dest, True, written))
    head = b""
    deciding = True  # the first line is held until it is known to be `#!python` or not
    try:
        for chunk in _member_data(src, member, plan.wheel, buffer):
            hashes.update(chunk)
            if not deciding:
                out.write(chunk)
                continue
            head += bytes(chunk)
            if len(head) >= len(_PYTHON_SHEBANG) and not head.startswith(_PYTHON_SHEBANG):
                out.write(head)
                deciding = False
            elif b"\n" in head:
                out.write(shebang(plan.scheme.python) + head.partition(b"\n")[2])
                deciding = False
        if deciding:
            if head.startswith(_PYTHON_SHEBANG):
                head = shebang(plan.scheme.python) + head.partition(b"\n")[2]
            out.write(head)
    finally:
        os.close(out.fd)
    _check_listed(member, hashes, plan.wheel)
    return out.sha256.digest(), out.size


def install_wheel(wheel: Path, scheme: Scheme) -> Installed:
    """Unpack `wheel` into the venv `scheme` describes; returns what was written."""
    return install_plan(plan_wheel(wheel, scheme))


def install_plan(plan: WheelPlan) -> Installed:
    """Write what `plan` (of repro.wheel.audit) says; a failure removes the files written."""
    written = _Written()
    record: list[RecordRow] = []
    total = 0
    buffer = memoryview(bytearray(_CHUNK))
    with plan.wheel.open("rb") as handle:
        src = handle.fileno()
        if identity_of(src) != plan.identity:
            raise refuse(plan.wheel, "file", "changed after its central directory was read")
        try:
            for member in plan.members:
                digest, size = _install_member(src, member, plan, written, buffer)
                record.append((member.record, digest, size))
                total += size
            *extras, last = plan.generated
            for extra in extras:
                _write_bytes(extra.dest, extra.content, extra.executable, written)
                digest = hashlib.sha256(extra.content).digest()
                record.append((extra.record, digest, len(extra.content)))
            rows = [*sorted(record, key=lambda row: row[0]), (last.record, None, None)]
            _write_bytes(last.dest, render_record(rows), False, written)
        except BaseException:
            written.undo()
            raise
    return Installed(plan.name, plan.version, len(record), total)
