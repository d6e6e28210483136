"""Reading a distribution's RECORD (the wheel spec's list of installed files and hashes)."""

from __future__ import annotations

import base64
import binascii
import csv
import os
import posixpath
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
    """Parse RECORD; a malformed row is an InputError naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    entries: list[RecordEntry] = []
    for number, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row:
            continue
        if len(row) != 3:
            raise InputError(f"{path}:{number}: expected 3 fields (path,hash,size), got {len(row)}")
        name, hash_value, size_text = row
        size: int | None
        try:
            size = int(size_text) if size_text else None
        except ValueError as exc:
            raise InputError(f"{path}:{number}: size {size_text!r} is not a number") from exc
        digest = record_hash_to_hex(hash_value) if hash_value else None
        entries.append(RecordEntry(normalize_record_path(name), digest, size))
    return tuple(entries)
