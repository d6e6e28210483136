"""Install one wheel into a venv by unpacking it: repro's own installer of vault wheels.

What pip and uv do for a wheel, and nothing else (PEP 427, PEP 491, the binary
distribution format): every member goes to its scheme's directory (the root to purelib
or platlib as WHEEL's `Root-Is-Purelib` says, `<name>.data/<key>/` to that key's
directory), `#!python` scripts get the venv's interpreter, console and GUI entry points
become scripts, and the dist-info gets INSTALLER, REQUESTED and a RECORD of the paths
as installed. No code of the wheel runs and no bytecode is compiled (as uv).

Stored members (rebuilt vault wheels store every file) are copied by the kernel
(`copy_file_range`: no byte passes through Python, and a file system with reflinks
shares the blocks); deflated ones are inflated through zipfile, which checks their
CRC-32. The caller has checked the wheel's SHA-256 against the bundle before.
"""

from __future__ import annotations

import base64
import configparser
import csv
import hashlib
import io
import os
import stat
import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import BytesHeaderParser
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from repro.errors import InstallError

INSTALLER_NAME = "repro"
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_MAGIC = b"PK\x03\x04"
_CHUNK = 1 << 20
_SCHEME_KEYS = ("purelib", "platlib", "scripts", "headers", "data")
# pip's limit: a longer `#!` line is cut by the kernel (BINPRM_BUF_SIZE, 128 bytes).
_SHEBANG_MAX = 127

# uv's template (pip's differs only in stripping the suffix with a regular expression)
_ENTRY_POINT_SCRIPT = """\
# -*- coding: utf-8 -*-
import sys
from {module} import {head}
if __name__ == "__main__":
    if sys.argv[0].endswith("-script.pyw"):
        sys.argv[0] = sys.argv[0][:-11]
    elif sys.argv[0].endswith(".exe"):
        sys.argv[0] = sys.argv[0][:-4]
    sys.exit({call}())
"""


@dataclass(frozen=True)
class Scheme:
    """Where a venv keeps each kind of file (sysconfig's scheme of its interpreter)."""

    purelib: Path
    platlib: Path
    scripts: Path
    data: Path
    include_site: Path  # headers go to include_site / <distribution name>
    python: Path  # the interpreter scripts are pointed at

    def base(self, key: str, distribution: str) -> Path:
        if key == "headers":
            return self.include_site / distribution
        path: Path = getattr(self, key)
        return path


@dataclass(frozen=True)
class Installed:
    name: str
    version: str
    files: int
    bytes: int


def shebang(python: Path) -> bytes:
    """The `#!` line(s) a script starts with: the interpreter's path, or, where the kernel
    would cut it or split it at a space, pip's `/bin/sh` trampoline."""
    text = str(python)
    if len(text) + 2 <= _SHEBANG_MAX and " " not in text:
        return f"#!{text}\n".encode()
    quoted = text.replace("'", "'\"'\"'")
    return f"#!/bin/sh\n'''exec' '{quoted}' \"$0\" \"$@\"\n' '''\n".encode()


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode('ascii')}"


def _safe_parts(member: str, wheel: Path) -> tuple[str, ...]:
    """The member's path components, refused when it could leave its directory."""
    parts = tuple(member.split("/"))
    bad = (
        member.startswith("/")
        or "\\" in member
        or "\x00" in member
        or any(part in ("", ".", "..") for part in parts)
    )
    if bad:
        raise InstallError(f"{wheel.name}: member {member!r} is not a safe relative path")
    return parts


def _dist_info(names: list[str], wheel: Path) -> str:
    """The wheel's one `<name>-<version>.dist-info` directory for its own distribution."""
    name = canonicalize_name(parse_wheel_filename(wheel.name)[0])
    found = {
        top
        for top, sep, _ in (n.partition("/") for n in names)
        if sep and top.endswith(".dist-info")
        and canonicalize_name(top[: -len(".dist-info")].rpartition("-")[0]) == name
    }  # fmt: skip
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise InstallError(f"{wheel.name}: {what} .dist-info directory for {name}")
    return found.pop()


def _data_offset(fd: int, info: zipfile.ZipInfo, wheel: Path) -> int:
    header = os.pread(fd, _LOCAL_HEADER.size, info.header_offset)
    if len(header) != _LOCAL_HEADER.size or header[:4] != _LOCAL_MAGIC:
        raise InstallError(f"{wheel.name}: bad local header for {info.filename!r}")
    name_length, extra_length = (int(n) for n in struct.unpack_from("<HH", header, 26))
    return int(info.header_offset) + _LOCAL_HEADER.size + name_length + extra_length


def _copy_range(src: int, dst: int, offset: int, count: int) -> None:
    """count bytes of src from offset to dst: by the kernel where it can, else read/write."""
    done = 0
    try:
        while done < count:
            moved = os.copy_file_range(src, dst, count - done, offset + done)
            if moved == 0:
                break
            done += moved
    except OSError:
        pass  # another file system, or a kernel without it: the bytes left go by hand
    while done < count:
        chunk = os.pread(src, min(_CHUNK, count - done), offset + done)
        if not chunk:
            raise InstallError("the wheel ended inside a member")
        os.write(dst, chunk)
        done += len(chunk)


def _open_new(path: str, executable: bool, made: set[str]) -> int:
    """A new file at `path` (its directory made once: `made` holds those made)."""
    parent = os.path.dirname(path)
    if parent not in made:
        os.makedirs(parent, exist_ok=True)
        made.add(parent)
    mode = 0o777 if executable else 0o666  # less the umask, as pip and uv do
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(path, flags, mode)


def _write_bytes(path: str, data: bytes, executable: bool, made: set[str]) -> None:
    fd = _open_new(path, executable, made)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _parse_record(data: bytes, wheel: Path) -> dict[str, tuple[str, str]]:
    try:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InstallError(f"{wheel.name}: unreadable RECORD: {exc}") from exc
    return {row[0]: (row[1], row[2]) for row in rows if len(row) >= 3}


def _entry_points(data: bytes) -> Iterator[tuple[str, str, str]]:
    """(script name, module, attribute path) of each console and GUI entry point."""
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(data.decode("utf-8"))
    for section in ("console_scripts", "gui_scripts"):
        if not parser.has_section(section):
            continue
        for script, value in parser.items(section):
            target = value.partition("[")[0].strip()
            module, _, attrs = target.partition(":")
            yield script.strip(), module.strip(), attrs.strip()


def install_wheel(wheel: Path, scheme: Scheme) -> Installed:
    """Unpack `wheel` into the venv `scheme` describes; returns what was written."""
    name, version, _, _ = parse_wheel_filename(wheel.name)
    with wheel.open("rb") as handle, zipfile.ZipFile(handle) as archive:
        infos = archive.infolist()
        dist_info = _dist_info([i.filename for i in infos], wheel)
        data_dir = dist_info[: -len(".dist-info")] + ".data"
        meta = BytesHeaderParser().parsebytes(archive.read(f"{dist_info}/WHEEL"))
        if not str(meta.get("Wheel-Version", "")).startswith("1."):
            raise InstallError(f"{wheel.name}: Wheel-Version {meta.get('Wheel-Version')!r}")
        purelib = str(meta.get("Root-Is-Purelib", "")).strip().lower() == "true"
        root = scheme.purelib if purelib else scheme.platlib
        listed = _parse_record(archive.read(f"{dist_info}/RECORD"), wheel)
        record: list[tuple[str, str, str]] = []
        written = 0
        fd_src = handle.fileno()
        made: set[str] = set()
        # plain strings in the loop: a wheel of torch's size has tens of thousands of
        # members, and pathlib's objects cost more than the file's own creation
        root_dir = str(root)
        bases = {key: str(scheme.base(key, name)) for key in _SCHEME_KEYS}
        from_root = {key: os.path.relpath(base, root_dir) for key, base in bases.items()}

        def generated(path: str, content: bytes, executable: bool) -> None:
            _write_bytes(path, content, executable, made)
            rel = os.path.relpath(path, root_dir).replace(os.sep, "/")
            record.append((rel, record_hash(content), str(len(content))))

        # every member and entry point is judged before the first byte is written: a
        # refused wheel leaves nothing of itself in the venv
        plan: list[tuple[zipfile.ZipInfo, str, str, bool]] = []
        for info in infos:
            member = info.filename
            if member.endswith("/") or member == f"{dist_info}/RECORD":
                continue  # directories are made as needed; RECORD is written anew below
            parts = _safe_parts(member, wheel)
            if stat.S_ISLNK(info.external_attr >> 16):
                raise InstallError(f"{wheel.name}: member {member!r} is a symbolic link")
            if parts[0] == data_dir:
                if len(parts) < 3 or parts[1] not in _SCHEME_KEYS:
                    raise InstallError(f"{wheel.name}: {member!r}: unknown scheme")
                rest = "/".join(parts[2:])
                dest = os.path.join(bases[parts[1]], rest)
                plan.append((info, dest, f"{from_root[parts[1]]}/{rest}", parts[1] == "scripts"))
            else:
                plan.append((info, os.path.join(root_dir, member), member, False))
        scripts: list[tuple[str, str, str]] = []
        entry_points = f"{dist_info}/entry_points.txt"
        if entry_points in archive.NameToInfo:
            for script, module, attrs in _entry_points(archive.read(entry_points)):
                if not script or "/" in script or not module or not attrs:
                    raise InstallError(f"{wheel.name}: bad entry point {script!r}")
                scripts.append((script, module, attrs))

        for info, dest, rel, is_script in plan:
            if is_script:
                content = archive.read(info)
                if content.startswith(b"#!python"):
                    content = shebang(scheme.python) + content.partition(b"\n")[2]
                generated(dest, content, True)
                written += len(content)
                continue
            fd = _open_new(dest, bool((info.external_attr >> 16) & 0o111), made)
            try:
                if info.compress_type == zipfile.ZIP_STORED:
                    offset = _data_offset(fd_src, info, wheel)
                    _copy_range(fd_src, fd, offset, info.file_size)
                else:
                    with archive.open(info) as source:
                        while chunk := source.read(_CHUNK):
                            os.write(fd, chunk)
            finally:
                os.close(fd)
            digest, size = listed.get(info.filename, ("", ""))
            record.append((rel, digest, size or str(info.file_size)))
            written += info.file_size
        for script, module, attrs in scripts:
            head = attrs.partition(".")[0]
            body = _ENTRY_POINT_SCRIPT.format(module=module, head=head, call=attrs)
            content = shebang(scheme.python) + body.encode()
            generated(os.path.join(bases["scripts"], script), content, True)
        info_dir = os.path.join(root_dir, dist_info)
        for extra, content in (("INSTALLER", f"{INSTALLER_NAME}\n".encode()), ("REQUESTED", b"")):
            generated(os.path.join(info_dir, extra), content, False)
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerows(sorted(set(record)))
        writer.writerow((f"{dist_info}/RECORD", "", ""))
        _write_bytes(os.path.join(info_dir, "RECORD"), out.getvalue().encode("utf-8"), False, made)
    return Installed(str(name), str(version), len(record), written)
