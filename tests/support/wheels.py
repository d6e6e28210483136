"""Wheels for tests: small real projects that pip builds, and hostile wheels built here.

- `pyproject_toml`, `build_wheel`: the one template of a small setuptools project and
  its build with the real `pip wheel`.
- Hostile wheels, byte by byte where zipfile would not write them: a raw zip writer
  (local headers and central directory written apart, so that they can disagree, alias,
  overlap or lie about sizes) and the wheel's own metadata around it.

The wheel package's own fixtures (a real wheel with scripts, a venv's layout) are in
tests/wheel/conftest.py.
"""

from __future__ import annotations

import base64
import hashlib
import stat
import struct
import sys
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.run import run


def pyproject_toml(
    name: str, version: str, packages: Sequence[str], *, setuptools: str = "", more: str = ""
) -> str:
    """pyproject.toml of a small setuptools project: `packages` by name, `setuptools` more
    keys of its [tool.setuptools] table, `more` further tables."""
    listed = ", ".join(f'"{package}"' for package in packages)
    return (
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'\n[project]\nname = "{name}"\nversion = "{version}"\n'
        f"\n[tool.setuptools]\npackages = [{listed}]\n{setuptools}" + more
    )


def build_wheel(project: Path, out: Path, *pip_args: str, timeout: float = 600) -> Path:
    """The wheel `pip wheel --no-deps` builds of `project` into `out`."""
    before = set(out.glob("*.whl"))
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check"]
    run([*argv, *pip_args, "-w", str(out), str(project)], timeout=timeout)
    (wheel,) = set(out.glob("*.whl")) - before
    return wheel


def record_row(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def wheel_files(
    name: str = "demo",
    version: str = "1.0",
    files: Mapping[str, bytes] | None = None,
    *,
    entry_points: str = "",
    purelib: bool = True,
    record: bytes | None = None,
) -> dict[str, bytes]:
    """Every member of a wheel, its RECORD (made, unless given) last."""
    dist_info = f"{name}-{version}.dist-info"
    members = dict(files if files is not None else {f"{name}/__init__.py": b"VALUE = 1\n"})
    members[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    )
    root = "true" if purelib else "false"
    members[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {root}\nTag: py3-none-any\n"
    ).encode()
    if entry_points:
        members[f"{dist_info}/entry_points.txt"] = entry_points.encode()
    if record is None:
        rows = [record_row(n, d) for n, d in members.items()] + [f"{dist_info}/RECORD,,"]
        record = ("\n".join(rows) + "\n").encode()
    members[f"{dist_info}/RECORD"] = record
    return members


def write_wheel(
    directory: Path,
    members: Mapping[str, bytes],
    name: str = "demo",
    version: str = "1.0",
    *,
    compression: int = zipfile.ZIP_STORED,
    modes: Mapping[str, int] | None = None,
    tag: str = "py3-none-any",
) -> Path:
    """`members` as a real zip, written by zipfile."""
    path = directory / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", compression) as archive:
        for member, data in members.items():
            info = zipfile.ZipInfo(member, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = compression
            info.external_attr = ((modes or {}).get(member, 0o644) | stat.S_IFREG) << 16
            archive.writestr(info, data)
    return path


@dataclass
class RawMember:
    """One local record; `local` overrides what its local header says (name, crc,
    csize, usize, method), `declared` what its central directory entry says."""

    name: str
    data: bytes  # the bytes as they are (compressed already when method is deflated)
    method: int = zipfile.ZIP_STORED
    crc: int = 0
    usize: int = 0
    local: dict[str, object] = field(default_factory=dict)
    declared: dict[str, object] = field(default_factory=dict)


def raw_member(name: str, plain: bytes, method: int = zipfile.ZIP_STORED) -> RawMember:
    if method == zipfile.ZIP_DEFLATED:
        packer = zlib.compressobj(9, zlib.DEFLATED, -15)
        data = packer.compress(plain) + packer.flush()
    else:
        data = plain
    return RawMember(name, data, method, zlib.crc32(plain), len(plain))


def _local(member: RawMember) -> bytes:
    name = str(member.local.get("name", member.name)).encode()
    crc, csize = member.local.get("crc", member.crc), member.local.get("csize", len(member.data))
    usize, method = (
        member.local.get("usize", member.usize),
        member.local.get("method", member.method),
    )
    header = struct.pack(
        "<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0x800, method, 0, 0x21, crc, csize, usize,
        len(name), 0,
    )  # fmt: skip
    return header + name + member.data


def _central(member: RawMember, offset: int) -> bytes:
    d = member.declared
    name = str(d.get("name", member.name)).encode()
    mode = int(d.get("mode", 0o644 | stat.S_IFREG))  # type: ignore[call-overload]
    header = struct.pack(
        "<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 0x314, 20, 0x800,
        d.get("method", member.method), 0, 0x21, d.get("crc", member.crc),
        d.get("csize", len(member.data)), d.get("usize", member.usize), len(name), 0, 0, 0,
        0, mode << 16, d.get("offset", offset),
    )  # fmt: skip
    return header + name


def raw_zip(members: Sequence[RawMember], extra_central: Sequence[RawMember] = ()) -> bytes:
    """The zip of `members`, each local record followed by the central directory of
    them all and of `extra_central` (entries with no local record of their own: their
    `declared` says which offset they point at)."""
    out = bytearray()
    offsets = []
    for member in members:
        offsets.append(len(out))
        out += _local(member)
    start = len(out)
    for member, offset in zip(members, offsets, strict=True):
        out += _central(member, offset)
    for member in extra_central:
        out += _central(member, 0)
    count = len(members) + len(extra_central)
    out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, count, count, len(out) - start, start, 0)
    return bytes(out)


def raw_wheel(
    directory: Path,
    members: Sequence[RawMember],
    extra_central: Sequence[RawMember] = (),
    name: str = "demo",
    version: str = "1.0",
) -> Path:
    path = directory / f"{name}-{version}-py3-none-any.whl"
    path.write_bytes(raw_zip(members, extra_central))
    return path


def raw_members(files: Mapping[str, bytes], method: int = zipfile.ZIP_STORED) -> list[RawMember]:
    return [raw_member(n, d, method) for n, d in files.items()]
