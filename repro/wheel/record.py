"""A distribution's RECORD (the wheel spec's list of files and hashes), read and written
as csv reads and writes it.

RECORD is a csv file (PEP 376, the binary distribution format spec): a row ends where csv
says, not where `str.splitlines()` breaks. A file name may hold a form feed, U+0085 or
U+2028 (pip installs such a wheel), a comma or a double quote; read line by line, the
first three become two rows and the last a name csv reads otherwise. So every RECORD
repro reads goes through `csv.reader` over the whole text, and every RECORD it writes
through `csv.writer` (lineterminator "\n", as pip and pypa/installer write theirs).
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import os
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from repro.errors import InputError


@dataclass(frozen=True, slots=True)
class RecordEntry:
    """One RECORD row. `path` is normalised, relative to site-packages, '/'-separated; it may
    start with '../' (scripts, headers, data installed outside site-packages)."""

    path: str
    sha256: str | None  # hex digest; None when RECORD gives no hash (RECORD itself, .pyc, ...)
    size: int | None


def record_hash_to_hex(value: str) -> str | None:
    """`sha256=<urlsafe base64, no padding>` to a hex digest; None for other algorithms."""
    algorithm, _, encoded = value.partition("=")
    if algorithm != "sha256" or not encoded:
        return None
    padded = encoded + "=" * (-len(encoded) % 4)
    try:
        return base64.urlsafe_b64decode(padded).hex()
    except (binascii.Error, ValueError):
        return None


def hex_to_record_hash(digest: str) -> str:
    raw = bytes.fromhex(digest)
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def normalize_record_path(path: str) -> str:
    return posixpath.normpath(path.replace("\\", "/"))


def join_record_path(prefix: str, path: str) -> str:
    """A RECORD path (normalised by `read_record`) under `prefix`, a normalised directory
    ending in the separator: a plain concatenation, except for ../ and absolute paths.
    The scan and the wheel plans name each file by this same string."""
    if path.startswith(("../", "/")) or path == "..":
        return os.path.normpath(os.path.join(prefix, path))
    return prefix + path


def read_record(path: Path) -> tuple[RecordEntry, ...]:
    """Parse the RECORD file `path`; a malformed row is an InputError naming it and the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    return parse_record(text, str(path))


def parse_record(text: str, origin: str) -> tuple[RecordEntry, ...]:
    """The rows of a RECORD's text, as csv reads them: over the whole text, so a row ends
    only at a line end outside quotes (`newline=""` keeps a quoted \r or \n in its
    field). `origin` names the file in errors, with the line a row ends on."""
    entries: list[RecordEntry] = []
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for row in reader:
            if not row:
                continue
            entries.append(_entry(row, f"{origin}:{reader.line_num}"))
    except csv.Error as exc:
        raise InputError(f"{origin}:{reader.line_num}: not a csv row: {exc}") from exc
    return tuple(entries)


def _entry(row: list[str], where: str) -> RecordEntry:
    if len(row) != 3:
        raise InputError(f"{where}: expected 3 fields (path,hash,size), got {len(row)}")
    name, hash_value, size_text = row
    size: int | None
    try:
        size = int(size_text) if size_text else None
    except ValueError as exc:
        raise InputError(f"{where}: size {size_text!r} is not a number") from exc
    if size is not None and size < 0:
        raise InputError(f"{where}: size {size_text!r} is negative")
    digest = record_hash_to_hex(hash_value) if hash_value else None
    return RecordEntry(normalize_record_path(name), digest, size)


RecordRow = tuple[str, str | None, int | None]
"""A row to write: (path as the wheel names it, hex sha256 or None, size or None)."""


def render_record(rows: Iterable[RecordRow]) -> bytes:
    """A RECORD's bytes, written by csv: a field holding a comma, a quote or a line end is
    quoted with its quotes doubled, as every csv reader (pip's, installer's) expects."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\n")
    # csv.writer before Python 3.13 quotes a field for the characters of its own line
    # terminator only: a name holding \r would go out bare and end its row there
    quoted = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
    for path, digest, size in rows:
        hash_field = hex_to_record_hash(digest) if digest is not None else ""
        row = [path, hash_field, str(size) if size is not None else ""]
        (quoted if "\r" in path else writer).writerow(row)
    return buffer.getvalue().encode("utf-8")
