"""MANIFEST.sha256: read, write and verify, in GNU `sha256sum` format.

Written lines are exactly what `sha256sum` prints: `<64 lowercase hex><space><space><name>`,
with sha256sum's escaping (line starts with a backslash; newline, carriage return and
backslash in the name become `\\n`, `\\r`, `\\\\`) for names that need it. The reader
accepts what `sha256sum -c` accepts and sorts every line into one of three kinds:

- an entry (`ManifestEntry`);
- a malformed line (`MalformedLine`): not a checksum line at all. Like sha256sum, these
  are warnings, and fatal only with `--strict`;
- a rejected entry (`RejectedEntry`): a well-formed line whose name repro refuses in a
  bundle: absolute, `..`, a leading `~`, no file name, listed twice, or (when a directory
  is verified) resolving through a symlink to outside the tree. Always fatal; this is
  where repro is deliberately stricter than sha256sum.

Nothing here raises for a bad manifest read from disk: every problem goes into the
`Manifest` (and from there into a `CheckReport`, see `repro.bundle.manifestcheck`) so
that all of them are reported at once. `ManifestError` is raised by the writing side
(`format_manifest`, `repro.bundle.manifesttree.write_manifest`) when asked to write
something that could not be read back as the same manifest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from repro.bundle import layout
from repro.errors import InputError, ManifestError, ManifestLineMalformed, ManifestNameRejected

MANIFEST_NAME = layout.MANIFEST
SIGNATURE_SUFFIX = ".sig"
DIGEST_HEX_LENGTH = 64
# sha256sum ignores lines shorter than digest + separator + one-character name.
_MIN_LINE_LENGTH = DIGEST_HEX_LENGTH + 2
_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")
_WHITESPACE = b" \t"
_WHITESPACE_RE = re.compile(rb"[ \t]")
_TAG = b"SHA256"
_NEEDS_ESCAPE = ("\n", "\r", "\\")
_MAX_SHOWN_LINE = 200
# Limits on one line: a name longer than PATH_MAX (4096 on Linux) or deeper than any
# bundle's tree cannot name a file, and resolving a 4 MB name took minutes.
MAX_PATH_BYTES = 4096
MAX_PATH_DEPTH = 256
MAX_LINE_BYTES = 2 * MAX_PATH_BYTES + 256  # an escaped name, a tag, a digest


@dataclass(frozen=True)
class ManifestEntry:
    """One listed file: a normalized `/`-separated relative path and its lowercase digest."""

    path: str
    digest: str
    binary: bool
    lineno: int = field(default=0, compare=False)


@dataclass(frozen=True)
class MalformedLine:
    """A line that is not a checksum line (sha256sum: "improperly formatted")."""

    lineno: int
    text: str
    reason: str


@dataclass(frozen=True)
class RejectedEntry:
    """A well-formed line whose name must not appear in a bundle (escape, duplicate)."""

    lineno: int
    path: str
    reason: str


@dataclass(frozen=True)
class Manifest:
    entries: tuple[ManifestEntry, ...]
    malformed: tuple[MalformedLine, ...]
    source: str
    rejected: tuple[RejectedEntry, ...] = ()


class ProgressSink(Protocol):
    """Receives hashing progress: one `start`, then `advance` per finished file."""

    def start(self, total_bytes: int, total_files: int) -> None: ...

    def advance(self, nbytes: int) -> None: ...


def printable_path(path: str) -> str:
    """The path as valid Unicode: undecodable bytes shown as `\\xNN`."""
    return _path_bytes(path).decode("utf-8", "backslashreplace")


def _path_bytes(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def path_order(path: str) -> bytes:
    """Where a path sorts in a manifest and in a report: by its bytes."""
    return _path_bytes(path)


# --- reading -------------------------------------------------------------------------


@dataclass
class _Layout:
    """sha256sum's one piece of state across lines: whether the file uses the
    BSD-reversed `DIGEST NAME` form (one space, no mode marker). None: not yet known."""

    reversed: bool | None = None


def _unescape(name: bytes) -> bytes:
    out = bytearray()
    i = 0
    while i < len(name):
        byte = name[i]
        if byte == 0x5C:
            if i == len(name) - 1:
                raise ManifestLineMalformed("escaped name ends with a lone backslash")
            following = name[i + 1]
            if following == ord("n"):
                out += b"\n"
            elif following == ord("r"):
                out += b"\r"
            elif following == 0x5C:
                out += b"\\"
            else:
                raise ManifestLineMalformed(
                    f"bad escape '\\{chr(following)}' (only \\n, \\r, \\\\ exist)"
                )
            i += 2
            continue
        out.append(byte)
        i += 1
    return bytes(out)


def _check_digest(digest: bytes) -> str:
    if len(digest) != DIGEST_HEX_LENGTH:
        raise ManifestLineMalformed(
            f"digest has {len(digest)} characters, expected {DIGEST_HEX_LENGTH}"
        )
    if not _HEX_DIGITS.issuperset(digest):
        raise ManifestLineMalformed("digest is not hexadecimal")
    return digest.decode("ascii").lower()


def _split_tagged(rest: bytes, escaped: bool) -> tuple[bytes, str]:
    """`SHA256 (NAME) = DIGEST`, after the opening parenthesis."""
    close = rest.rfind(b")")
    if close < 0:
        raise ManifestLineMalformed("tagged line has no ')' after the file name")
    name = _unescape(rest[:close]) if escaped else rest[:close]
    tail = rest[close + 1 :].lstrip(_WHITESPACE)
    if not tail.startswith(b"="):
        raise ManifestLineMalformed("tagged line has no '=' before the digest")
    return name, _check_digest(tail[1:].lstrip(_WHITESPACE))


def _split_line(line: bytes, layout: _Layout) -> tuple[bytes, str, bool]:
    """One checksum line -> (name bytes, lowercase digest, binary), following
    coreutils' split_3 step by step so the verdict on a line is the same."""
    if b"\0" in line:
        raise ManifestLineMalformed("line contains a NUL byte")
    i = len(line) - len(line.lstrip(_WHITESPACE))
    escaped = line[i : i + 1] == b"\\"
    if escaped:
        i += 1
    if line.startswith(_TAG, i):
        i += len(_TAG)
        if line[i : i + 1] == b" ":
            i += 1
        if line[i : i + 1] != b"(":
            raise ManifestLineMalformed(
                "line starts with SHA256 but is not 'SHA256 (NAME) = DIGEST'"
            )
        name, digest = _split_tagged(line[i + 1 :], escaped)
        return name, digest, False
    if len(line) - i < _MIN_LINE_LENGTH + (line[i : i + 1] == b"\\"):
        raise ManifestLineMalformed("line too short for a digest and a file name")
    start = i
    end = _WHITESPACE_RE.search(line, start)
    if end is None:
        raise ManifestLineMalformed("no space between digest and file name")
    i = end.start()
    digest = _check_digest(line[start:i])
    i += 1
    binary = False
    if len(line) - i == 1 or line[i] not in b" *":
        if layout.reversed is False:
            raise ManifestLineMalformed("'DIGEST NAME' (one space) mixed with 'DIGEST  NAME' lines")
        layout.reversed = True
    elif layout.reversed is not True:
        layout.reversed = False
        binary = line[i] == ord("*")
        i += 1
    name = line[i:]
    return (_unescape(name) if escaped else name), digest, binary


def normalize_path(name: str) -> str:
    """The manifest name as a clean relative `/`-path, or ManifestNameRejected if it may not be
    in a bundle. `.` components and repeated slashes are dropped."""
    if not name:
        raise ManifestNameRejected("empty file name")
    if name.startswith("/"):
        raise ManifestNameRejected("absolute path")
    if len(name.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise ManifestNameRejected(f"name longer than {MAX_PATH_BYTES} bytes")
    parts = name.split("/")
    if len(parts) > MAX_PATH_DEPTH:
        raise ManifestNameRejected(
            f"{len(parts)} path components, over the limit of {MAX_PATH_DEPTH}"
        )
    if ".." in parts:
        raise ManifestNameRejected("'..' component escapes the tree")
    kept = [part for part in parts if part not in ("", ".")]
    if not kept or parts[-1] in ("", "."):
        raise ManifestNameRejected("names a directory, not a file")
    if kept[0].startswith("~"):
        raise ManifestNameRejected("leading '~' component")
    return "/".join(kept)


def _shown_line(line: bytes) -> str:
    text = line.decode("utf-8", "backslashreplace")
    if len(text) > _MAX_SHOWN_LINE:
        return text[:_MAX_SHOWN_LINE] + "..."
    return text


def parse_manifest(data: bytes, *, source: str) -> Manifest:
    """Parse manifest bytes. Never raises for bad content: see the module docstring."""
    entries: list[ManifestEntry] = []
    malformed: list[MalformedLine] = []
    rejected: list[RejectedEntry] = []
    first_line: dict[str, int] = {}
    layout = _Layout()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for lineno, raw in enumerate(lines, start=1):
        if raw.startswith(b"#"):
            continue
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if not line:
            continue
        if len(line) > MAX_LINE_BYTES:
            # what sha256sum would try to open and fail on: a listed file, not a comment
            reason = f"line is {len(line):,} bytes long, over the limit of {MAX_LINE_BYTES:,}"
            shown = _shown_line(line[: _MAX_SHOWN_LINE + 1])
            rejected.append(RejectedEntry(lineno, shown, reason))
            continue
        try:
            name_bytes, digest, binary = _split_line(line, layout)
        except ManifestLineMalformed as exc:
            malformed.append(MalformedLine(lineno, _shown_line(line), exc.reason))
            continue
        name = name_bytes.decode("utf-8", "surrogateescape")
        try:
            path = normalize_path(name)
        except ManifestNameRejected as exc:
            rejected.append(RejectedEntry(lineno, name, exc.reason))
            continue
        if path in first_line:
            reason = f"listed twice (first on line {first_line[path]})"
            rejected.append(RejectedEntry(lineno, path, reason))
            continue
        first_line[path] = lineno
        entries.append(ManifestEntry(path, digest, binary, lineno))
    return Manifest(tuple(entries), tuple(malformed), source, tuple(rejected))


def read_manifest(manifest_path: Path) -> Manifest:
    try:
        data = manifest_path.read_bytes()
    except OSError as exc:
        raise InputError(
            f"{manifest_path}: cannot read manifest: {exc.strerror or exc}",
            hint="pass a bundle directory or its MANIFEST.sha256",
        ) from exc
    return parse_manifest(data, source=str(manifest_path))


# --- writing -------------------------------------------------------------------------


def _escape(name: str) -> str:
    return name.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def format_manifest(entries: Iterable[tuple[str, str]]) -> bytes:
    """(relative path, hex digest) pairs -> manifest bytes, sorted by path bytes,
    exactly as `sha256sum` would print them for the same files in that order."""
    digests: dict[str, str] = {}
    for path, digest in entries:
        try:
            clean = normalize_path(path)
        except ManifestNameRejected as exc:
            raise ManifestError(f"cannot list {path!r} in a manifest: {exc.reason}") from None
        if clean != path or "\0" in path:
            raise ManifestError(
                f"cannot list {path!r} in a manifest: not a normalized relative path",
                hint=f"use {clean!r}",
            )
        if path in digests:
            raise ManifestError(f"cannot list {path!r} in a manifest twice")
        try:
            digests[path] = _check_digest(digest.encode("ascii"))
        except (ManifestLineMalformed, UnicodeEncodeError) as exc:
            raise ManifestError(f"bad digest for {path!r}: {digest!r}") from exc
    out = bytearray()
    for path in sorted(digests, key=path_order):
        if any(char in path for char in _NEEDS_ESCAPE):
            out += b"\\" + digests[path].encode() + b"  " + _path_bytes(_escape(path)) + b"\n"
        else:
            out += digests[path].encode() + b"  " + _path_bytes(path) + b"\n"
    return bytes(out)
