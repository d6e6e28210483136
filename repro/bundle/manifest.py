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
`CheckReport` so that all of them are reported at once. `ManifestError` is raised by
the writing side (`format_manifest`, `write_manifest`) when asked to write something
that could not be read back as the same manifest.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from repro.bundle import layout
from repro.errors import InputError, ManifestError
from repro.hashing import hash_files

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
_EMPTY: Mapping[str, str] = MappingProxyType({})
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


@dataclass(frozen=True)
class Mismatch:
    path: str
    expected: str
    actual: str


@dataclass(frozen=True)
class UnlistedPath:
    """A path present in the tree that the manifest does not list; kind is `file`,
    `symlink`, `fifo`, `socket`, `device` or `other`."""

    path: str
    kind: str = "file"


@dataclass(frozen=True)
class Unreadable:
    path: str
    reason: str


@dataclass(frozen=True)
class CheckReport:
    """Everything found while checking a tree or archive against its manifest."""

    source: str
    verified: tuple[str, ...]
    mismatched: tuple[Mismatch, ...]
    missing: tuple[str, ...]
    unlisted: tuple[UnlistedPath, ...]
    malformed: tuple[MalformedLine, ...]
    unreadable: tuple[Unreadable, ...]
    rejected: tuple[RejectedEntry, ...]

    def passed(self, *, ignore_missing: bool, strict: bool) -> bool:
        """True when the tree is exactly what the manifest describes.

        Like `sha256sum -c`: at least one file must verify, missing files fail unless
        `ignore_missing`, malformed lines fail only when `strict`. Beyond sha256sum:
        unlisted paths and rejected entries always fail.
        """
        if self.mismatched or self.unreadable or self.unlisted or self.rejected:
            return False
        if self.missing and not ignore_missing:
            return False
        if self.malformed and strict:
            return False
        return bool(self.verified)

    def to_json(self) -> dict[str, Any]:
        return {
            "manifest": self.source,
            "counts": {
                "verified": len(self.verified),
                "mismatched": len(self.mismatched),
                "missing": len(self.missing),
                "unlisted": len(self.unlisted),
                "malformed": len(self.malformed),
                "unreadable": len(self.unreadable),
                "rejected": len(self.rejected),
            },
            "verified": [printable_path(p) for p in self.verified],
            "mismatched": [
                {"path": printable_path(m.path), "expected": m.expected, "actual": m.actual}
                for m in self.mismatched
            ],
            "missing": [printable_path(p) for p in self.missing],
            "unlisted": [{"path": printable_path(u.path), "kind": u.kind} for u in self.unlisted],
            "malformed": [
                {"line": m.lineno, "text": m.text, "reason": m.reason} for m in self.malformed
            ],
            "unreadable": [
                {"path": printable_path(u.path), "reason": u.reason} for u in self.unreadable
            ],
            "rejected": [
                {"line": r.lineno, "path": printable_path(r.path), "reason": r.reason}
                for r in self.rejected
            ],
        }


class ProgressSink(Protocol):
    """Receives hashing progress: one `start`, then `advance` per finished file."""

    def start(self, total_bytes: int, total_files: int) -> None: ...

    def advance(self, nbytes: int) -> None: ...


def printable_path(path: str) -> str:
    """The path as valid Unicode: undecodable bytes shown as `\\xNN`."""
    return _path_bytes(path).decode("utf-8", "backslashreplace")


def _path_bytes(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def _sort_key(path: str) -> bytes:
    return _path_bytes(path)


# --- reading -------------------------------------------------------------------------


class _Malformed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Rejected(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
                raise _Malformed("escaped name ends with a lone backslash")
            following = name[i + 1]
            if following == ord("n"):
                out += b"\n"
            elif following == ord("r"):
                out += b"\r"
            elif following == 0x5C:
                out += b"\\"
            else:
                raise _Malformed(f"bad escape '\\{chr(following)}' (only \\n, \\r, \\\\ exist)")
            i += 2
            continue
        out.append(byte)
        i += 1
    return bytes(out)


def _check_digest(digest: bytes) -> str:
    if len(digest) != DIGEST_HEX_LENGTH:
        raise _Malformed(f"digest has {len(digest)} characters, expected {DIGEST_HEX_LENGTH}")
    if not _HEX_DIGITS.issuperset(digest):
        raise _Malformed("digest is not hexadecimal")
    return digest.decode("ascii").lower()


def _split_tagged(rest: bytes, escaped: bool) -> tuple[bytes, str]:
    """`SHA256 (NAME) = DIGEST`, after the opening parenthesis."""
    close = rest.rfind(b")")
    if close < 0:
        raise _Malformed("tagged line has no ')' after the file name")
    name = _unescape(rest[:close]) if escaped else rest[:close]
    tail = rest[close + 1 :].lstrip(_WHITESPACE)
    if not tail.startswith(b"="):
        raise _Malformed("tagged line has no '=' before the digest")
    return name, _check_digest(tail[1:].lstrip(_WHITESPACE))


def _split_line(line: bytes, layout: _Layout) -> tuple[bytes, str, bool]:
    """One checksum line -> (name bytes, lowercase digest, binary), following
    coreutils' split_3 step by step so the verdict on a line is the same."""
    if b"\0" in line:
        raise _Malformed("line contains a NUL byte")
    i = len(line) - len(line.lstrip(_WHITESPACE))
    escaped = line[i : i + 1] == b"\\"
    if escaped:
        i += 1
    if line.startswith(_TAG, i):
        i += len(_TAG)
        if line[i : i + 1] == b" ":
            i += 1
        if line[i : i + 1] != b"(":
            raise _Malformed("line starts with SHA256 but is not 'SHA256 (NAME) = DIGEST'")
        name, digest = _split_tagged(line[i + 1 :], escaped)
        return name, digest, False
    if len(line) - i < _MIN_LINE_LENGTH + (line[i : i + 1] == b"\\"):
        raise _Malformed("line too short for a digest and a file name")
    start = i
    end = _WHITESPACE_RE.search(line, start)
    if end is None:
        raise _Malformed("no space between digest and file name")
    i = end.start()
    digest = _check_digest(line[start:i])
    i += 1
    binary = False
    if len(line) - i == 1 or line[i] not in b" *":
        if layout.reversed is False:
            raise _Malformed("'DIGEST NAME' (one space) mixed with 'DIGEST  NAME' lines")
        layout.reversed = True
    elif layout.reversed is not True:
        layout.reversed = False
        binary = line[i] == ord("*")
        i += 1
    name = line[i:]
    return (_unescape(name) if escaped else name), digest, binary


def normalize_path(name: str) -> str:
    """The manifest name as a clean relative `/`-path, or _Rejected if it may not be
    in a bundle. `.` components and repeated slashes are dropped."""
    if not name:
        raise _Rejected("empty file name")
    if name.startswith("/"):
        raise _Rejected("absolute path")
    if len(name.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise _Rejected(f"name longer than {MAX_PATH_BYTES} bytes")
    parts = name.split("/")
    if len(parts) > MAX_PATH_DEPTH:
        raise _Rejected(f"{len(parts)} path components, over the limit of {MAX_PATH_DEPTH}")
    if ".." in parts:
        raise _Rejected("'..' component escapes the tree")
    kept = [part for part in parts if part not in ("", ".")]
    if not kept or parts[-1] in ("", "."):
        raise _Rejected("names a directory, not a file")
    if kept[0].startswith("~"):
        raise _Rejected("leading '~' component")
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
        except _Malformed as exc:
            malformed.append(MalformedLine(lineno, _shown_line(line), exc.reason))
            continue
        name = name_bytes.decode("utf-8", "surrogateescape")
        try:
            path = normalize_path(name)
        except _Rejected as exc:
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
        except _Rejected as exc:
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
        except (_Malformed, UnicodeEncodeError) as exc:
            raise ManifestError(f"bad digest for {path!r}: {digest!r}") from exc
    out = bytearray()
    for path in sorted(digests, key=_sort_key):
        if any(char in path for char in _NEEDS_ESCAPE):
            out += b"\\" + digests[path].encode() + b"  " + _path_bytes(_escape(path)) + b"\n"
        else:
            out += digests[path].encode() + b"  " + _path_bytes(path) + b"\n"
    return bytes(out)


def write_manifest(root: Path, *, jobs: int | None = None) -> Path:
    """Hash every regular file under root and write root/MANIFEST.sha256."""
    exempt = _exempt_names(MANIFEST_NAME)
    tree = scan_tree(root)
    for path, kind in sorted(tree.nonregular.items()):
        if path not in exempt:
            raise ManifestError(
                f"{root / path}: is a {kind}, not a regular file; a manifest lists files only",
                hint="replace it with the file it points to, or remove it",
            )
    if tree.unreadable:
        path, reason = min(tree.unreadable.items())
        raise InputError(f"{root / path}: cannot read: {reason}")
    files = sorted((p for p in tree.files if p not in exempt), key=_sort_key)
    results = hash_files([root / p for p in files], jobs=jobs)
    pairs: list[tuple[str, str]] = []
    for path, result in zip(files, results, strict=True):
        if result.digest is None:
            raise InputError(f"{result.path}: cannot read: {result.error}")
        pairs.append((path, result.digest))
    data = format_manifest(pairs)
    target = root / MANIFEST_NAME
    fd, tmp_name = tempfile.mkstemp(prefix=".MANIFEST.", dir=root)
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, target)
    except OSError as exc:
        Path(tmp_name).unlink(missing_ok=True)
        raise InputError(f"{target}: cannot write manifest: {exc.strerror or exc}") from exc
    return target


# --- comparing -----------------------------------------------------------------------


def _exempt_names(manifest_name: str) -> frozenset[str]:
    return frozenset({manifest_name, manifest_name + SIGNATURE_SUFFIX})


def compare_digests(
    manifest: Manifest,
    actual: Mapping[str, str],
    *,
    present: Iterable[str],
    unreadable: Mapping[str, str] = _EMPTY,
    nonregular: Mapping[str, str] = _EMPTY,
    exempt: Iterable[str] = _exempt_names(MANIFEST_NAME),
) -> CheckReport:
    """Compare computed digests with the manifest; pure.

    actual: path -> digest of each listed file that was hashed. present: every
    regular-file path in the tree (or archive). unreadable: path -> why it could not be
    read. nonregular: path -> kind of each non-regular member (symlink, fifo, ...).
    exempt: root-level names that are never "unlisted" (the manifest and its signature).
    """
    present_set = set(present)
    exempt_set = set(exempt)
    listed: set[str] = set()
    verified: list[str] = []
    mismatched: list[Mismatch] = []
    missing: list[str] = []
    failures: dict[str, str] = {}
    for entry in manifest.entries:
        listed.add(entry.path)
        if entry.path in actual:
            digest = actual[entry.path].lower()
            if digest == entry.digest:
                verified.append(entry.path)
            else:
                mismatched.append(Mismatch(entry.path, entry.digest, digest))
        elif entry.path in unreadable:
            failures[entry.path] = unreadable[entry.path]
        elif entry.path in nonregular:
            failures[entry.path] = f"not a regular file ({nonregular[entry.path]})"
        elif entry.path in present_set:
            failures[entry.path] = "present but not hashed"
        else:
            missing.append(entry.path)
    # A rejected entry is reported once, as rejected, not again as unlisted.
    listed.update(r.path for r in manifest.rejected)
    for path, reason in unreadable.items():
        if path not in listed:
            failures.setdefault(path, reason)
    unlisted = [UnlistedPath(p) for p in present_set - listed - exempt_set]
    unlisted += [
        UnlistedPath(p, kind)
        for p, kind in nonregular.items()
        if p not in listed and p not in exempt_set
    ]
    return CheckReport(
        source=manifest.source,
        verified=tuple(sorted(verified, key=_sort_key)),
        mismatched=tuple(sorted(mismatched, key=lambda m: _sort_key(m.path))),
        missing=tuple(sorted(missing, key=_sort_key)),
        unlisted=tuple(sorted(unlisted, key=lambda u: _sort_key(u.path))),
        malformed=manifest.malformed,
        unreadable=tuple(Unreadable(p, failures[p]) for p in sorted(failures, key=_sort_key)),
        rejected=tuple(sorted(manifest.rejected, key=lambda r: r.lineno)),
    )


# --- directories ---------------------------------------------------------------------


@dataclass(frozen=True)
class TreeListing:
    """What a walk of a tree found, by relative `/`-path, without following symlinks."""

    files: frozenset[str]
    sizes: Mapping[str, int]
    nonregular: Mapping[str, str]
    unreadable: Mapping[str, str]


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISBLK(mode) or stat.S_ISCHR(mode):
        return "device"
    if stat.S_ISDIR(mode):
        return "directory"
    return "other"


def scan_tree(root: Path) -> TreeListing:
    """Walk root; directories that cannot be listed are `unreadable` (they might hide
    unlisted files). Raises InputError when root itself cannot be listed."""
    sizes: dict[str, int] = {}
    nonregular: dict[str, str] = {}
    unreadable: dict[str, str] = {}
    stack: list[tuple[Path, str]] = [(root, "")]
    while stack:
        directory, prefix = stack.pop()
        try:
            with os.scandir(directory) as entries:
                children = list(entries)
        except OSError as exc:
            if not prefix:
                raise InputError(f"{root}: cannot list directory: {exc.strerror}") from exc
            unreadable[prefix.rstrip("/")] = f"cannot list directory: {exc.strerror}"
            continue
        for child in children:
            relative = prefix + child.name
            try:
                info = child.stat(follow_symlinks=False)
            except OSError as exc:
                unreadable[relative] = exc.strerror or str(exc)
                continue
            mode = info.st_mode
            if stat.S_ISDIR(mode):
                stack.append((Path(child.path), relative + "/"))
            elif stat.S_ISREG(mode):
                sizes[relative] = info.st_size
            else:
                nonregular[relative] = _kind(mode)
    return TreeListing(
        frozenset(sizes),
        MappingProxyType(sizes),
        MappingProxyType(nonregular),
        MappingProxyType(unreadable),
    )


@dataclass(frozen=True)
class _HashPlan:
    to_hash: tuple[tuple[str, Path, int], ...]
    failures: Mapping[str, str]
    escapes: tuple[RejectedEntry, ...]


def _plan_hashing(root: Path, manifest: Manifest, tree: TreeListing) -> _HashPlan:
    """Decide, for each listed path, whether to hash it, and what is wrong if not.
    Only regular files inside the tree (after resolving symlinks) are opened."""
    real_root = root.resolve()
    to_hash: list[tuple[str, Path, int]] = []
    failures: dict[str, str] = {}
    escapes: list[RejectedEntry] = []
    for entry in manifest.entries:
        size = tree.sizes.get(entry.path)
        if size is not None:
            # Found by the walk, which follows no symlink: a regular file inside the tree.
            to_hash.append((entry.path, root / entry.path, size))
            continue
        try:
            resolved = (root / entry.path).resolve()
        except (OSError, RuntimeError) as exc:  # RuntimeError: symlink loop before 3.13
            failures[entry.path] = f"cannot resolve: {exc}"
            continue
        if resolved != real_root and not resolved.is_relative_to(real_root):
            escapes.append(
                RejectedEntry(
                    entry.lineno,
                    entry.path,
                    f"resolves through a symlink to {resolved}, outside the tree",
                )
            )
            continue
        try:
            info = resolved.stat()
        except FileNotFoundError:
            continue  # missing: it is not in `actual` nor in `present`
        except OSError as exc:
            failures[entry.path] = exc.strerror or str(exc)
            continue
        if stat.S_ISREG(info.st_mode):
            to_hash.append((entry.path, resolved, info.st_size))
        elif stat.S_ISDIR(info.st_mode):
            failures[entry.path] = "is a directory"
        else:
            failures[entry.path] = f"not a regular file ({_kind(info.st_mode)})"
    return _HashPlan(tuple(to_hash), MappingProxyType(failures), tuple(escapes))


def verify_directory(
    root: Path,
    manifest_path: Path,
    *,
    jobs: int | None,
    on_progress: ProgressSink | None = None,
    known: Mapping[str, str] | None = None,
) -> CheckReport:
    """Check a tree against a manifest: hash the listed files in parallel and find
    unlisted ones. Raises InputError when the manifest or root cannot be read.

    `known`: digests of files this process itself wrote into `root` (an extraction into
    its private staging directory, hashed as written), by manifest path; they are taken
    instead of read back. Every other listed file is hashed."""
    manifest = read_manifest(manifest_path)
    tree = scan_tree(root)
    plan = _plan_hashing(root, manifest, tree)
    actual: dict[str, str] = {}
    if known:
        actual.update((path, known[path]) for path, _, _ in plan.to_hash if path in known)
        plan = replace(plan, to_hash=tuple(item for item in plan.to_hash if item[0] not in known))
    if plan.escapes:
        escaped = {r.path for r in plan.escapes}
        manifest = replace(
            manifest,
            entries=tuple(e for e in manifest.entries if e.path not in escaped),
            rejected=manifest.rejected + plan.escapes,
        )
    if on_progress is not None:
        on_progress.start(sum(size for _, _, size in plan.to_hash), len(plan.to_hash))
    results = hash_files(
        [resolved for _, resolved, _ in plan.to_hash],
        jobs=jobs,
        on_progress=on_progress.advance if on_progress is not None else None,
    )
    failures = dict(plan.failures)
    for (path, _, _), result in zip(plan.to_hash, results, strict=True):
        if result.digest is None:
            failures[path] = result.error or "cannot read"
        else:
            actual[path] = result.digest
    failures.update(tree.unreadable)
    return compare_digests(
        manifest,
        actual,
        present=tree.files,
        unreadable=failures,
        nonregular=tree.nonregular,
        exempt=_exempt_names(manifest_path.name),
    )
