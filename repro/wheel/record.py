"""A distribution's RECORD (the wheel spec's list of files and hashes), read and written
as csv reads and writes it.

RECORD is a csv file (PEP 376, the binary distribution format spec): a row ends where csv
says, not where `str.splitlines()` breaks. A file name may hold a form feed, U+0085 or
U+2028 (pip installs such a wheel), a comma or a double quote; read line by line, the
first three become two rows and the last a name csv reads otherwise. So every RECORD
repro reads goes through `csv.reader` over the whole text, and every RECORD it writes
through `csv.writer` (lineterminator "\n", as pip and pypa/installer write theirs).

Both sides read and write RECORD here: the pack (the scan, the rebuild) reads entries
through `parse_record`; repro's installer checks a wheel's rows through `record_rows` (the
fields as written: it compares the hash with its algorithm and the size as text) and
writes the installed RECORD with `render_record`; `record_hash` is the one encoding of a
digest as a RECORD field.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import os
import posixpath
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from repro.errors import InputError, VaultError


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


def record_hash(digest: bytes, algorithm: str = "sha256") -> str:
    """A RECORD hash field: `<algorithm>=<the digest in urlsafe base64, no padding>`, as
    the binary distribution format spec writes it (the one encoder, both sides)."""
    return f"{algorithm}={base64.urlsafe_b64encode(digest).rstrip(b'=').decode('ascii')}"


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


def read_dist_record(dist_info: Path) -> list[RecordEntry]:
    """The RECORD rows of an installed distribution (paths relative to site-packages)."""
    record = dist_info / "RECORD"
    if not record.is_file():
        raise InputError(
            f"{record}: cannot read: no such file",
            hint="the distribution was not installed from a wheel; reinstall it with pip",
        )
    return list(read_record(record))


def iter_wheel_record(path: Path) -> Iterator[RecordEntry]:
    """The RECORD of a wheel file, without extracting it; VaultError when it cannot be
    read (the pack side's judgement of a wheel it found)."""
    try:
        with zipfile.ZipFile(path) as archive:
            record_name = next(
                (
                    n
                    for n in archive.namelist()
                    if n.endswith(".dist-info/RECORD") and n.count("/") == 1
                ),
                None,
            )
            if record_name is None:
                raise VaultError(f"{path}: no .dist-info/RECORD in the wheel")
            text = archive.read(record_name).decode("utf-8")
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise VaultError(f"{path}: not a readable wheel: {exc}") from exc
    try:
        yield from parse_record(text, f"{path}!{record_name}")
    except InputError as exc:
        raise VaultError(exc.message) from exc


def parse_record(text: str, origin: str) -> tuple[RecordEntry, ...]:
    """The entries of a RECORD's text (`record_rows`), paths normalised, hashes as hex,
    sizes as numbers; a size that is not a number is an InputError naming the line."""
    return tuple(_entry(row, origin) for row in record_rows(text, origin))


def record_rows(text: str, origin: str) -> Iterator[tuple[int, str, str, str]]:
    """(line, path, hash, size) of each row of a RECORD's text, the fields as written, read
    as csv reads them: over the whole text, so a row ends only at a line end outside
    quotes (`newline=""` keeps a quoted \r or \n in its field). The one reader of RECORD
    rows: `origin` names the file in its InputErrors, with the line a row ends on."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for row in reader:
            if not row:
                continue
            if len(row) != 3:
                where = f"{origin}:{reader.line_num}"
                raise InputError(f"{where}: expected 3 fields (path,hash,size), got {len(row)}")
            yield reader.line_num, row[0], row[1], row[2]
    except csv.Error as exc:
        raise InputError(f"{origin}:{reader.line_num}: not a csv row: {exc}") from exc


def _entry(row: tuple[int, str, str, str], origin: str) -> RecordEntry:
    line, name, hash_value, size_text = row
    size: int | None
    try:
        size = int(size_text) if size_text else None
    except ValueError as exc:
        raise InputError(f"{origin}:{line}: size {size_text!r} is not a number") from exc
    if size is not None and size < 0:
        raise InputError(f"{origin}:{line}: size {size_text!r} is negative")
    digest = record_hash_to_hex(hash_value) if hash_value else None
    return RecordEntry(normalize_record_path(name), digest, size)


RecordRow = tuple[str, bytes | None, int | None]
"""A row to write: (path as the wheel names it, sha256 digest or None, size or None)."""


def render_record(rows: Iterable[RecordRow]) -> bytes:
    """A RECORD's bytes, written by csv: a field holding a comma, a quote or a line end is
    quoted with its quotes doubled, as every csv reader (pip's, installer's) expects."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\n")
    # csv.writer before Python 3.13 quotes a field for the characters of its own line
    # terminator only: a name holding \r would go out bare and end its row there
    quoted = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
    for path, digest, size in rows:
        hash_field = record_hash(digest) if digest is not None else ""
        row = [path, hash_field, str(size) if size is not None else ""]
        (quoted if "\r" in path else writer).writerow(row)
    return buffer.getvalue().encode("utf-8")
