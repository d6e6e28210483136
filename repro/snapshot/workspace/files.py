"""Workspace files that travel under files/: bench harness, results, docs.

Patterns are globs relative to the workspace. Files that look like credentials
are never carried, whatever the patterns say; the pack report names them.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from repro.bundle import layout
from repro.errors import ConfigError
from repro.redaction import TOKEN_VALUE_BYTES, has_url_credentials

SECRET_FILE_PATTERNS = (
    ".netrc",
    "_netrc",
    ".git-credentials",
    ".pypirc",
    ".env",
    "*.pem",
    "*.key",
    "id_rsa*",
    "id_ed25519*",
    "id_ecdsa*",
    "*token*",
    "*TOKEN*",
    "*.secret",
    "credentials*",
)
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".venv", "venv", "env", ".mypy_cache"})


@dataclass(frozen=True)
class CarriedFile:
    bundle_path: str
    source: Path


@dataclass(frozen=True)
class FileSelection:
    files: tuple[CarriedFile, ...]
    refused_secrets: tuple[Path, ...]


def looks_secret(path: Path) -> bool:
    return any(fnmatch.fnmatchcase(path.name, pattern) for pattern in SECRET_FILE_PATTERNS)


def _expand(source: Path, pattern: str, *, config: str) -> list[Path]:
    if pattern.startswith("/") or ".." in Path(pattern).parts:
        raise ConfigError(
            f"{config}: [files] include: {pattern!r} escapes the workspace",
            hint="patterns are relative to the workspace and may not contain '..'",
        )
    matches = sorted(source.glob(pattern))
    if not matches:
        raise ConfigError(f"{config}: [files] include: {pattern!r} matches nothing in {source}")
    out: list[Path] = []
    for match in matches:
        if match.is_dir():
            out.extend(
                p
                for p in sorted(match.rglob("*"))
                if p.is_file() and not SKIPPED_DIRS.intersection(p.relative_to(source).parts)
            )
        elif match.is_file():
            out.append(match)
    return out


def select_files(
    source: Path,
    patterns: Sequence[str],
    *,
    exclude: Sequence[Path] = (),
    config: str = "repro.toml",
) -> FileSelection:
    """Expand patterns to regular files under SOURCE; never follow links out of it."""
    root = source.resolve()
    excluded = [p.resolve() for p in exclude]
    chosen: dict[str, CarriedFile] = {}
    refused: list[Path] = []
    for pattern in patterns:
        for path in _expand(source, pattern, config=config):
            if path.is_symlink() or not path.resolve().is_relative_to(root):
                continue
            resolved = path.resolve()
            if any(resolved.is_relative_to(ex) for ex in excluded):
                continue
            if looks_secret(path):
                refused.append(path)
                continue
            rel = path.relative_to(source).as_posix()
            chosen[rel] = CarriedFile(bundle_path=layout.carried_file(rel), source=path)
    return FileSelection(
        files=tuple(chosen[key] for key in sorted(chosen)),
        refused_secrets=tuple(sorted(set(refused))),
    )


# Content that is a credential whatever the file is called. Names are matched by whole
# '_'-separated words, so HF_TOKEN and API_KEY count and TOKENIZER_PATH does not.
_SECRET_WORDS = frozenset({"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "AUTH"})
_ASSIGNMENT = re.compile(
    rb"""^[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)[ \t]*[=:][ \t]*["']?([^\s"'#]{8,})""",
    re.MULTILINE,
)
_KNOWN_SECRETS = re.compile(
    TOKEN_VALUE_BYTES.pattern + rb"|-----BEGIN [A-Z ]*PRIVATE KEY-----|"
    rb"^[ \t]*(?:machine|default)\b[^\n]*\bpassword[ \t]+\S+|^[ \t]*password[ \t]+\S+",
    re.MULTILINE,
)
MAX_SCANNED_BYTES = 16 << 20


def secret_in_file(path: Path, known_values: Sequence[str] = ()) -> str | None:
    """Why the file's content looks like a credential, or None.

    Looks for assignments to secret-named variables (HF_TOKEN=...), well-known token
    shapes (hf_..., ghp_..., AKIA..., private keys, .netrc passwords) and the literal
    values of `known_values` (the packing environment's secret variables). Files over
    MAX_SCANNED_BYTES are searched for the known values only.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as stream:
            head = stream.read(MAX_SCANNED_BYTES)
            values = [v.encode() for v in known_values if len(v) >= 8]
            if size > MAX_SCANNED_BYTES and values:
                return _value_in_stream(stream, head, values)
    except OSError:
        return None  # unreadable files are reported by the pack when it reads them
    for value in values:
        if value in head:
            return "holds the value of a secret environment variable"
    for match in _ASSIGNMENT.finditer(head):
        words = set(match.group(1).decode().upper().split("_"))
        if words & _SECRET_WORDS:
            return f"assigns {match.group(1).decode()}"
    if _KNOWN_SECRETS.search(head):
        return "holds what looks like a token, password or private key"
    return None


_PRIVATE_KEY = re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----")


def token_in_code(data: bytes, known_values: Sequence[str] = ()) -> str | None:
    """Why a patched file's bytes hold what looks like a credential, or None: a token
    shape (hf_..., sk-..., ghp_...), a private key, a URL with user:password, or the
    value of one of `known_values`. Looser assignments (API_KEY = "...") are left out:
    in code they are mostly names, not values."""
    head = data[:MAX_SCANNED_BYTES]
    if any(len(value) >= 8 and value.encode() in data for value in known_values):
        return "the value of a secret environment variable"
    found = TOKEN_VALUE_BYTES.search(head)
    if found is not None:
        return f"a token ({found.group(0)[:3].decode()}...)"
    if _PRIVATE_KEY.search(head):
        return "a private key"
    if has_url_credentials(head.decode("utf-8", "replace")):
        return "a URL with credentials"
    return None


def _value_in_stream(stream: BinaryIO, head: bytes, values: list[bytes]) -> str | None:
    overlap = max(len(v) for v in values)
    window = head
    while window:
        if any(v in window for v in values):
            return "holds the value of a secret environment variable"
        chunk = stream.read(MAX_SCANNED_BYTES)
        if not chunk:
            return None
        window = window[-overlap:] + chunk
    return None
