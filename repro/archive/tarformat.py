"""The bytes of a tar archive: header encoding for the writer, decoding for the reader.

Written by hand rather than through `tarfile` so that the output does not depend on
the Python version (tarfile's header details have changed between releases) and so
that the reader can cap the size of extended headers before reading them (tarfile
reads a PAX header of any size into memory).

Only what a bundle needs: POSIX ustar headers, PAX extended headers ('x') for long or
non-ASCII names and sizes of 8 GiB and more, and on the reading side GNU long names
('L'/'K') and base-256 numbers so that archives made by GNU tar can be read too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from repro.errors import ArchiveError

BLOCK = 512
RECORD = 20 * BLOCK
ZERO_BLOCK = bytes(BLOCK)
MAX_OCTAL_11 = 8**11  # the largest size or mtime an 11-digit octal field holds, plus one

REGULAR_TYPES = (b"0", b"\0", b"7")
DIRECTORY_TYPE = b"5"
PAX_TYPE = b"x"
GLOBAL_PAX_TYPE = b"g"
GNU_LONGNAME_TYPE = b"L"
GNU_LONGLINK_TYPE = b"K"
SPECIAL_TYPES = {
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a character device",
    b"4": "a block device",
    b"6": "a FIFO",
}

MAX_PATH_BYTES = 4096
MAX_COMPONENT_BYTES = 255
_FORBIDDEN_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")


def name_problem(rel: str) -> str | None:
    """Why the `/`-separated relative path `rel` cannot name a bundle member, or None.

    The writer and the reader apply the same rule, so whatever one writes the other reads.
    """
    if not rel:
        return "the name is empty"
    if rel.startswith("/"):
        return "the name is absolute"
    if _FORBIDDEN_CHARS.search(rel):
        return "the name holds a NUL, a control character or a backslash"
    try:
        encoded = rel.encode("utf-8")
    except UnicodeEncodeError:
        return "the name is not valid UTF-8"
    if len(encoded) > MAX_PATH_BYTES:
        return f"the name is longer than {MAX_PATH_BYTES} bytes"
    for part in rel.split("/"):
        if not part:
            return "the name has an empty component"
        if part in (".", ".."):
            return f"the name has a {part!r} component"
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            return f"a component of the name is longer than {MAX_COMPONENT_BYTES} bytes"
    return None


def uncarried_name(rel: str) -> str | None:
    """Why a file cannot travel in a bundle for its name alone, or None: the bundle's
    writer and reader take only plain UTF-8 names (no control characters, no backslash),
    so a name that is not one (undecodable bytes arrive as surrogates) is left out."""
    problem = name_problem(rel)
    return None if problem is None else f"{problem}: a bundle cannot hold it"


# --- writing -------------------------------------------------------------------------


def _octal(value: int, width: int) -> bytes:
    return format(value, "o").rjust(width - 1, "0").encode("ascii") + b"\0"


def _ustar_header(name: bytes, mode: int, size: int, mtime: int, typeflag: bytes) -> bytes:
    header = bytearray(
        name.ljust(100, b"\0")
        + _octal(mode, 8)
        + _octal(0, 8)  # uid
        + _octal(0, 8)  # gid
        + _octal(size, 12)
        + _octal(mtime, 12)
        + b" " * 8  # checksum, computed below
        + typeflag
        + bytes(100)  # linkname
        + b"ustar\x0000"
        + bytes(32)  # uname: empty
        + bytes(32)  # gname: empty
        + bytes(8)  # devmajor: no device numbers
        + bytes(8)  # devminor
        + bytes(155)  # prefix: unused, long names go into a PAX header
        + bytes(12)
    )
    header[148:156] = format(sum(header), "06o").encode("ascii") + b"\0 "
    return bytes(header)


def _pax_record(key: str, value: str) -> bytes:
    payload = f" {key}={value}\n".encode()
    digits = len(str(len(payload)))
    while len(str(len(payload) + digits)) != digits:
        digits += 1
    return str(len(payload) + digits).encode("ascii") + payload


def padding(size: int) -> bytes:
    return bytes(-size % BLOCK)


def encode_entry(path: str, *, directory: bool, mode: int, size: int, mtime: int) -> bytes:
    """Header block(s) of one member; `path` is the full name inside the archive."""
    name = path + "/" if directory else path
    encoded = name.encode("utf-8")
    records: list[bytes] = []
    short = encoded
    if len(encoded) > 100 or not encoded.isascii():
        records.append(_pax_record("path", name))
        short = bytes(c if c < 0x80 else 0x5F for c in encoded)[:100]
    header_size = size
    if size >= MAX_OCTAL_11:
        records.append(_pax_record("size", str(size)))
        header_size = 0
    typeflag = DIRECTORY_TYPE if directory else b"0"
    entry = _ustar_header(short, mode, header_size, mtime, typeflag)
    if not records:
        return entry
    data = b"".join(records)
    pax = _ustar_header(b"././@PaxHeader", 0o644, len(data), mtime, PAX_TYPE)
    return pax + data + padding(len(data)) + entry


def end_of_archive(written: int) -> bytes:
    """Two zero blocks, then zeros up to a multiple of the 10240-byte record."""
    return bytes(2 * BLOCK + (-(written + 2 * BLOCK) % RECORD))


# --- reading -------------------------------------------------------------------------


@dataclass(frozen=True)
class RawHeader:
    """One header block, decoded but not yet combined with extended headers."""

    name: bytes
    mode: int
    size: int
    typeflag: bytes
    linkname: bytes


def _nts(field: bytes) -> bytes:
    return field.split(b"\0", 1)[0]


def _number(field: bytes, what: str, where: str) -> int:
    if field[:1] == b"\x80":  # GNU base-256, positive
        return int.from_bytes(field[1:], "big")
    if field[:1] == b"\xff":
        raise ArchiveError(f"{where}: negative {what} in a tar header")
    text = _nts(field).strip(b" ")
    if not text:
        return 0
    if not all(0x30 <= c <= 0x37 for c in text):
        raise ArchiveError(f"{where}: {what} field of a tar header is not a number")
    return int(text, 8)


def decode_header(block: bytes, where: str) -> RawHeader:
    """Decode one 512-byte header; a bad checksum or magic raises ArchiveError."""
    stored = _number(block[148:156], "checksum", where)
    with_spaces = block[:148] + b" " * 8 + block[156:]
    unsigned = sum(with_spaces)
    if stored != unsigned and stored != unsigned - 256 * sum(b > 127 for b in with_spaces):
        raise ArchiveError(f"{where}: corrupt tar header (bad checksum)")
    magic = block[257:263]
    if magic not in (b"ustar\x00", b"ustar "):
        raise ArchiveError(f"{where}: not a ustar/pax tar header")
    name = _nts(block[0:100])
    if magic == b"ustar\x00":
        prefix = _nts(block[345:500])
        if prefix:
            name = prefix + b"/" + name
    return RawHeader(
        name=name,
        mode=_number(block[100:108], "mode", where),
        size=_number(block[124:136], "size", where),
        typeflag=block[156:157],
        linkname=_nts(block[157:257]),
    )


def parse_pax(data: bytes, where: str) -> dict[str, bytes]:
    """Records of a PAX extended header: `<len> <key>=<value>\\n` each."""
    records: dict[str, bytes] = {}
    pos = 0
    while pos < len(data):
        if not data[pos:].strip(b"\0"):
            break
        space = data.find(b" ", pos)
        length_text = data[pos:space] if space > pos else b""
        if not length_text.isdigit():
            raise ArchiveError(f"{where}: malformed PAX extended header")
        end = pos + int(length_text)
        if end > len(data) or end <= space or data[end - 1 : end] != b"\n":
            raise ArchiveError(f"{where}: malformed PAX extended header")
        key, equals, value = data[space + 1 : end - 1].partition(b"=")
        if not equals:
            raise ArchiveError(f"{where}: malformed PAX extended header")
        try:
            records[key.decode("utf-8")] = value
        except UnicodeDecodeError as exc:
            raise ArchiveError(f"{where}: malformed PAX extended header") from exc
        pos = end
    return records
