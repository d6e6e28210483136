"""The header of a .safetensors file, read and checked without reading its tensors.

The format: an 8-byte little-endian unsigned length N, N bytes of a JSON object (each
tensor's name to its dtype, shape and [begin, end) offsets into the data; an optional
"__metadata__" of strings), then the data. The header is what tells a shard from a
truncated one or from another revision's at the cost of one small read: its tensors
must tile the data from 0 without gap or overlap, and 8 + N + the data's length must be
the file's size. Every input is hostile: the length is bounded (`MAX_HEADER_BYTES`), the
JSON must be an object of objects with no key twice, offsets integers in order.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.errors import SafetensorsHeaderError

SUFFIX = ".safetensors"
MAX_HEADER_BYTES = 100_000_000  # the reference implementation refuses larger headers
METADATA = "__metadata__"
_LENGTH = struct.Struct("<Q")
# bytes per element of the dtypes whose tensors can be checked against their shape
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "C64": 8,
}


@dataclass(frozen=True)
class SafetensorsHeader:
    tensor_count: int  # "__metadata__" is not a tensor
    dtypes: tuple[str, ...]  # each dtype once, sorted
    data_length: int  # the largest end offset: the bytes after the header
    header_length: int  # N
    header_sha256: str  # of the N header bytes


def is_safetensors(path: str | Path) -> bool:
    return os.fspath(path).endswith(SUFFIX)


def read_header(path: Path) -> SafetensorsHeader:
    """The header facts of the .safetensors file at `path` (links followed); a file that
    is not the format's, or not whole, raises SafetensorsHeaderError naming it and why."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise SafetensorsHeaderError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SafetensorsHeaderError(f"{path}: not a regular file")
        head = _read_exactly(fd, _LENGTH.size, 0)
        if len(head) < _LENGTH.size:
            raise SafetensorsHeaderError(
                f"{path}: {info.st_size} bytes, shorter than the 8-byte header length: "
                "truncated or not a safetensors file"
            )
        (length,) = _LENGTH.unpack(head)
        if length > MAX_HEADER_BYTES:
            raise SafetensorsHeaderError(
                f"{path}: header length {length} is over {MAX_HEADER_BYTES} bytes: "
                "not a safetensors file"
            )
        if _LENGTH.size + length > info.st_size:
            raise SafetensorsHeaderError(
                f"{path}: header length {length} runs past the file's {info.st_size} "
                "bytes: truncated or not a safetensors file"
            )
        raw = _read_exactly(fd, length, _LENGTH.size)
        if len(raw) < length:
            raise SafetensorsHeaderError(f"{path}: the file ended inside its header")
    except OSError as exc:
        raise SafetensorsHeaderError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    header = parse_header(raw, where=str(path))
    expected = _LENGTH.size + length + header[2]
    if expected != info.st_size:
        what = "truncated" if info.st_size < expected else "bytes after the tensors' data"
        raise SafetensorsHeaderError(
            f"{path}: {info.st_size} bytes, but its header says {expected} "
            f"(8 + {length} header + {header[2]} data): {what}"
        )
    return SafetensorsHeader(
        tensor_count=header[0],
        dtypes=header[1],
        data_length=header[2],
        header_length=length,
        header_sha256=hashlib.sha256(raw).hexdigest(),
    )


def parse_header(raw: bytes, *, where: str) -> tuple[int, tuple[str, ...], int]:
    """(tensor count, sorted dtypes, data length) of a header's JSON bytes; the tensors
    must tile [0, data length) without gap or overlap."""
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SafetensorsHeaderError(f"{where}: the header is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SafetensorsHeaderError(f"{where}: the header is not a JSON object")
    spans: list[tuple[int, int, str]] = []
    dtypes: set[str] = set()
    for name, entry in data.items():
        if name == METADATA:
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise SafetensorsHeaderError(f"{where}: {METADATA} is not a table of strings")
            continue
        begin, end, dtype = _tensor(entry, f"{where}: tensor {name!r}")
        spans.append((begin, end, name))
        dtypes.add(dtype)
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            what = "overlaps the one before" if begin < position else f"leaves a gap at {position}"
            raise SafetensorsHeaderError(
                f"{where}: tensor {name!r} at [{begin}, {end}) {what}: offsets inconsistent"
            )
        position = end
    return len(spans), tuple(sorted(dtypes)), position


def _tensor(entry: Any, where: str) -> tuple[int, int, str]:
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise SafetensorsHeaderError(f"{where}: not an object of dtype, shape, data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or not dtype:
        raise SafetensorsHeaderError(f"{where}: dtype is not a string")
    if not isinstance(shape, list) or not all(_natural(d) for d in shape):
        raise SafetensorsHeaderError(f"{where}: shape is not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_natural, offsets))):
        raise SafetensorsHeaderError(f"{where}: data_offsets is not [begin, end]")
    begin, end = offsets
    if end < begin:
        raise SafetensorsHeaderError(f"{where}: data_offsets [{begin}, {end}] end before begin")
    width = DTYPE_BYTES.get(dtype)
    if width is not None:
        size = _bytes_of(shape, width, end - begin)
        if size != end - begin:
            shown = str(shape) if len(shape) <= 8 else f"of {len(shape)} dimensions"
            raise SafetensorsHeaderError(
                f"{where}: [{begin}, {end}) is {end - begin} bytes, not those of shape "
                f"{shown} of {dtype}"
            )
    return begin, end, dtype


def _bytes_of(shape: list[int], width: int, limit: int) -> int | None:
    """The bytes of a tensor of `shape`, or None once past `limit` (a hostile shape of
    many huge dimensions is never multiplied out)."""
    if 0 in shape:
        return 0
    size = width
    for dimension in shape:
        size *= dimension
        if size > limit:
            return None
    return size


def _natural(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} twice")
        out[key] = value
    return out


def _read_exactly(fd: int, size: int, offset: int) -> bytes:
    chunks = []
    while size:
        chunk = os.pread(fd, min(size, 1 << 24), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        size -= len(chunk)
    return b"".join(chunks)
