"""Workspace files that travel under files/: bench harness, results, docs.

Patterns are globs relative to the workspace. Files that look like credentials
are never carried, whatever the patterns say; the pack report names them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.errors import ConfigError

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
            chosen[rel] = CarriedFile(bundle_path=f"files/{rel}", source=path)
    return FileSelection(
        files=tuple(chosen[key] for key in sorted(chosen)),
        refused_secrets=tuple(sorted(set(refused))),
    )
