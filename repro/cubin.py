"""Which GPU architectures a shared object carries code for.

Kernels live in the `.nv_fatbin` section of an ELF shared object: one or more
fat-binary containers, each a 16-byte header followed by entries (an entry
header, then its payload). An entry's kind says cubin (SASS) or PTX, its SM
field the architecture (major * 10 + minor), and its flags whether the code is
architecture-specific (`sm_90a`) or family-specific (`sm_100f`). With
`cuobjdump` on PATH its `--list-elf`/`--list-ptx` answer instead.
"""

from __future__ import annotations

import mmap
import re
import shutil
import struct
import subprocess
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX = 0x01
KIND_ELF = (0x02, 0x10)
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY_SPECIFIC = 0x200000
_ELF_MAGIC = b"\x7fELF"
_CUOBJDUMP_NAME = re.compile(r"\.(?P<arch>(?:sm|compute)_\d+[af]?)\.(?:cubin|ptx)\b")


class NotAnElfError(ValueError):
    pass


def _suffix(flags: int) -> str:
    if flags & FLAG_ARCH_SPECIFIC:
        return "a"
    if flags & FLAG_FAMILY_SPECIFIC:
        return "f"
    return ""


def fatbin_archs(data: bytes | mmap.mmap, start: int = 0, end: int | None = None) -> set[str]:
    """Architectures of every entry of the fat-binary containers in data[start:end]."""
    end = len(data) if end is None else end
    archs: set[str] = set()
    position = start
    while position + 16 <= end:
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, position)
        if magic != FATBIN_MAGIC or header_size < 16:
            position += 8  # containers are 8-aligned inside the section; skip padding
            continue
        entry = position + header_size
        container_end = min(position + header_size + fat_size, end)
        while entry + 64 <= container_end:
            kind, _, entry_size, padded_size = struct.unpack_from("<HHII", data, entry)
            if entry_size < 64:
                break
            sm = struct.unpack_from("<I", data, entry + 28)[0]
            flags = struct.unpack_from("<Q", data, entry + 40)[0]
            if kind == KIND_PTX:
                archs.add(f"compute_{sm}{_suffix(flags)}")
            elif kind in KIND_ELF:
                archs.add(f"sm_{sm}{_suffix(flags)}")
            entry += entry_size + padded_size
        position = container_end
    return archs


def _fatbin_section(data: bytes | mmap.mmap) -> tuple[int, int] | None:
    if data[:4] != _ELF_MAGIC:
        raise NotAnElfError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise NotAnElfError("not a little-endian 64-bit ELF file")
    section_offset = struct.unpack_from("<Q", data, 0x28)[0]
    entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    if section_offset == 0 or count == 0 or section_offset + count * entry_size > len(data):
        return None

    def header(index: int) -> tuple[int, int, int]:
        base = section_offset + index * entry_size
        name = struct.unpack_from("<I", data, base)[0]
        offset, size = struct.unpack_from("<QQ", data, base + 0x18)
        return name, offset, size

    names_offset = header(names_index)[1]
    for index in range(count):
        name, offset, size = header(index)
        start = names_offset + name
        if data[start : start + 11] == b".nv_fatbin\0":
            return offset, offset + size
    return None


def elf_archs(path: Path) -> set[str]:
    """Architectures of the kernels in one shared object (empty: no CUDA code)."""
    with open(path, "rb") as stream:
        try:
            view = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # empty file
            return set()
        with view:
            try:
                section = _fatbin_section(view)
            except (NotAnElfError, struct.error, IndexError):
                return set()
            if section is None:
                return set()
            return fatbin_archs(view, *section)


def cuobjdump_archs(path: Path, tool: str, timeout: float = 120) -> set[str] | None:
    archs: set[str] = set()
    for flag in ("--list-elf", "--list-ptx"):
        try:
            result = subprocess.run(
                [tool, flag, str(path)],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        archs.update(m.group("arch") for m in _CUOBJDUMP_NAME.finditer(result.stdout))
    return archs


def shared_object_archs(path: Path) -> set[str]:
    tool = shutil.which("cuobjdump")
    if tool is not None:
        found = cuobjdump_archs(path, tool)
        if found is not None:
            return found
    return elf_archs(path)


def is_shared_object(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


def files_archs(paths: Iterable[Path]) -> set[str]:
    archs: set[str] = set()
    for path in paths:
        if is_shared_object(path.name) and path.is_file():
            archs |= shared_object_archs(path)
    return archs


def wheel_archs(wheel: Path) -> set[str]:
    """Architectures of every shared object in a wheel, read without installing it."""
    archs: set[str] = set()
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as temp:
        for info in archive.infolist():
            if info.is_dir() or not is_shared_object(info.filename):
                continue
            target = Path(temp) / "member.so"
            with archive.open(info) as source, open(target, "wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
            archs |= shared_object_archs(target)
    return archs
