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
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from repro.errors import NotAnElfError, UnreadableWheel

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX = 0x01
KIND_ELF = (0x02, 0x10)
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY_SPECIFIC = 0x200000
_ELF_MAGIC = b"\x7fELF"
_CUOBJDUMP_NAME = re.compile(r"\.(?P<arch>(?:sm|compute)_\d+[af]?)\.(?:cubin|ptx)\b")


# What zipfile (and the decompressors under it) raise on bytes that are not a sound zip:
# a missing or damaged central directory, a bad CRC, a member encrypted (RuntimeError)
# or compressed by a method it lacks (NotImplementedError), offsets past the end.
_ZIP_DAMAGE = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    EOFError,
    ValueError,
    RuntimeError,
    NotImplementedError,
    zlib.error,
    struct.error,
    OSError,
)


def _suffix(flags: int) -> str:
    if flags & FLAG_ARCH_SPECIFIC:
        return "a"
    if flags & FLAG_FAMILY_SPECIFIC:
        return "f"
    return ""


Reader = Callable[[int, int], bytes]
"""read(offset, count) -> up to `count` bytes of the object at `offset`."""

_MAGIC_BYTES = struct.pack("<I", FATBIN_MAGIC)
_SKIP_BLOCK = 1 << 16


def fatbin_archs(data: bytes | mmap.mmap, start: int = 0, end: int | None = None) -> set[str]:
    """Architectures of every entry of the fat-binary containers in data[start:end]."""
    return _walk_fatbin(
        lambda offset, count: data[offset : offset + count],
        start,
        len(data) if end is None else end,
    )


def _next_container(read: Reader, position: int, end: int) -> int:
    """The next 8-aligned offset at or after `position` where a container's magic is."""
    while position + 16 <= end:
        block = read(position, min(_SKIP_BLOCK, end - position))
        found = block.find(_MAGIC_BYTES)
        while found != -1 and found % 8:
            found = block.find(_MAGIC_BYTES, found + 1)
        if found != -1:
            return position + found
        if len(block) < 8:
            break
        position += max(8, len(block) - len(block) % 8 - 8)
    return end


def _walk_fatbin(read: Reader, start: int, end: int) -> set[str]:
    """Walk the containers' and entries' headers only; kernels themselves are never read."""
    archs: set[str] = set()
    position = start
    while position + 16 <= end:
        header = read(position, 16)
        if len(header) < 16:
            break
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", header)
        if magic != FATBIN_MAGIC or header_size < 16:
            # containers are 8-aligned inside the section; skip the padding between them
            position = _next_container(read, position + 8, end)
            continue
        entry = position + header_size
        container_end = min(position + header_size + fat_size, end)
        while entry + 64 <= container_end:
            head = read(entry, 48)
            if len(head) < 48:
                break
            kind, _, entry_size, padded_size = struct.unpack_from("<HHII", head)
            if entry_size < 64:
                break
            sm = struct.unpack_from("<I", head, 28)[0]
            flags = struct.unpack_from("<Q", head, 40)[0]
            if kind == KIND_PTX:
                archs.add(f"compute_{sm}{_suffix(flags)}")
            elif kind in KIND_ELF:
                archs.add(f"sm_{sm}{_suffix(flags)}")
            entry += entry_size + padded_size
        position = container_end
    return archs


def _fatbin_section_of(read: Reader, size: int) -> tuple[int, int] | None:
    ident = read(0, 64)
    if ident[:4] != _ELF_MAGIC:
        raise NotAnElfError("not an ELF file")
    if len(ident) < 64 or ident[4] != 2 or ident[5] != 1:
        raise NotAnElfError("not a little-endian 64-bit ELF file")
    section_offset = struct.unpack_from("<Q", ident, 0x28)[0]
    entry_size, count, names_index = struct.unpack_from("<HHH", ident, 0x3A)
    if section_offset == 0 or count == 0 or section_offset + count * entry_size > size:
        return None
    table = read(section_offset, count * entry_size)
    if entry_size < 0x28 or len(table) < count * entry_size or names_index >= count:
        return None

    def header(index: int) -> tuple[int, int, int]:
        base = index * entry_size
        name = struct.unpack_from("<I", table, base)[0]
        offset, length = struct.unpack_from("<QQ", table, base + 0x18)
        return name, offset, length

    names_offset = header(names_index)[1]
    for index in range(count):
        name, offset, length = header(index)
        if read(names_offset + name, 11) == b".nv_fatbin\0":
            return offset, min(offset + length, size)
    return None


def _fatbin_section(data: bytes | mmap.mmap) -> tuple[int, int] | None:
    return _fatbin_section_of(lambda offset, count: data[offset : offset + count], len(data))


def elf_archs(path: Path) -> set[str]:
    """Architectures of the kernels in one shared object (empty: no CUDA code).

    Headers are read with pread, a few bytes each: the kernels between them (most of a
    CUDA library's size) are neither read nor mapped, so a 500 MB libtorch_cuda.so takes
    milliseconds and no memory.
    """
    with open(path, "rb", buffering=0) as stream:
        fd = stream.fileno()
        size = os.fstat(fd).st_size

        def read(offset: int, count: int) -> bytes:
            return os.pread(fd, count, offset) if 0 <= offset < size else b""

        try:
            section = _fatbin_section_of(read, size)
        except (NotAnElfError, struct.error):
            return set()
        if section is None:
            return set()
        return _walk_fatbin(read, *section)


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


# A wheel's shared objects are copied out to be read; a deflate bomb would have them
# write without end (a 2 MB wheel wrote 2 GiB). At most this many bytes per byte of the
# wheel, and never less than the floor, are extracted for inspection.
MAX_INSPECTED_RATIO = 50
MIN_INSPECTED_BYTES = 256 << 20


@dataclass(frozen=True)
class WheelArchs:
    archs: frozenset[str]
    not_inspected: tuple[str, ...] = ()  # members past the extraction limit


def inspection_budget(wheel_bytes: int) -> int:
    return max(MIN_INSPECTED_BYTES, MAX_INSPECTED_RATIO * wheel_bytes)


def wheel_archs(wheel: Path, *, shown: str | None = None) -> WheelArchs:
    """Architectures of the shared objects in a wheel, read without installing it. Members
    past `inspection_budget` bytes in all (largest claims first refused) are not read and
    are named in `not_inspected`. A wheel that is no sound zip: `UnreadableWheel`, naming
    it as `shown` (the bundle's member name) when given."""
    try:
        return _wheel_archs(wheel)
    except UnreadableWheel:
        raise
    except _ZIP_DAMAGE as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise UnreadableWheel(
            f"{shown or wheel}: not a readable wheel ({type(exc).__name__}: {why}); its shared "
            "objects cannot be checked for this GPU",
            hint="the bundle's wheel is damaged or not a wheel: pack again, or check "
            "where the bundle came from",
        ) from exc


def _wheel_archs(wheel: Path) -> WheelArchs:
    archs: set[str] = set()
    skipped: list[str] = []
    budget = inspection_budget(wheel.stat().st_size)
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as temp:
        members = [
            info
            for info in archive.infolist()
            if not info.is_dir() and is_shared_object(info.filename)
        ]
        for info in sorted(members, key=lambda i: (i.file_size, i.filename)):
            if info.file_size > budget:  # zipfile stops reading at the declared size
                skipped.append(info.filename)
                continue
            budget -= info.file_size
            target = Path(temp) / "member.so"
            with archive.open(info) as source, open(target, "wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
            archs |= shared_object_archs(target)
    return WheelArchs(frozenset(archs), tuple(sorted(skipped)))
