"""`repro check`: verify a bundle directory, a MANIFEST.sha256 or (later) an archive.

`check_target` decides what kind of target it was given and hands it to the one
function that checks that kind; the CLI renders the resulting CheckReport.
"""

from __future__ import annotations

import enum
import stat
from dataclasses import dataclass
from pathlib import Path

from repro.errors import InputError, UsageError
from repro.manifest import (
    MANIFEST_NAME,
    CheckReport,
    ProgressSink,
    parse_manifest,
    verify_directory,
)

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst")
_SNIFF_BYTES = 64 << 10
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_TAR_MAGIC_OFFSET = 257


class TargetKind(enum.Enum):
    DIRECTORY = "directory"
    MANIFEST = "manifest"
    ARCHIVE = "archive"


@dataclass(frozen=True)
class CheckOptions:
    jobs: int | None = None
    progress: ProgressSink | None = None


def check_target(target: str, options: CheckOptions) -> CheckReport:
    """Check TARGET (a bundle directory, a manifest file, an archive or `-`)."""
    kind = classify_target(target)
    if kind is TargetKind.ARCHIVE:
        return check_archive(target, options)
    if kind is TargetKind.DIRECTORY:
        manifest_path = Path(target) / MANIFEST_NAME
        if not manifest_path.exists():
            raise InputError(
                f"{target}: no {MANIFEST_NAME} in this directory",
                hint="pass a bundle directory (made by `repro pack`) or a manifest file",
            )
    else:
        manifest_path = Path(target)
    return verify_directory(
        manifest_path.parent, manifest_path, jobs=options.jobs, on_progress=options.progress
    )


def check_archive(target: str, options: CheckOptions) -> CheckReport:
    raise UsageError(
        f"{target}: archive targets (.tar, .tar.gz, .tar.zst, - for stdin) "
        "are not supported by this version of `repro check`",
        hint="unpack the archive and check the bundle directory, or pass its MANIFEST.sha256",
    )


def classify_target(target: str) -> TargetKind:
    """What TARGET is. A regular file is a manifest when its name ends in .sha256 or its
    content reads as checksum lines; a file that is neither is taken for an archive."""
    if target == "-":
        return TargetKind.ARCHIVE
    path = Path(target)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError as exc:
        raise InputError(f"{target}: no such file or directory") from exc
    except OSError as exc:
        raise InputError(f"{target}: cannot read: {exc.strerror or exc}") from exc
    if stat.S_ISDIR(mode):
        return TargetKind.DIRECTORY
    if not stat.S_ISREG(mode):
        return TargetKind.ARCHIVE  # a pipe or device: only a stream makes sense
    if path.name.endswith(ARCHIVE_SUFFIXES):
        return TargetKind.ARCHIVE
    try:
        with path.open("rb") as stream:
            head = stream.read(_SNIFF_BYTES)
    except OSError as exc:
        raise InputError(f"{target}: cannot read: {exc.strerror or exc}") from exc
    if _is_archive_head(head):
        return TargetKind.ARCHIVE
    if path.name.endswith(".sha256") or _looks_like_manifest(head):
        return TargetKind.MANIFEST
    return TargetKind.ARCHIVE


def _is_archive_head(head: bytes) -> bool:
    if head.startswith((_GZIP_MAGIC, _ZSTD_MAGIC)):
        return True
    return head[_TAR_MAGIC_OFFSET : _TAR_MAGIC_OFFSET + 5] == b"ustar"


def _looks_like_manifest(head: bytes) -> bool:
    if b"\0" in head:
        return False
    if len(head) == _SNIFF_BYTES:  # the last line may be cut short
        head = head[: head.rfind(b"\n") + 1]
    manifest = parse_manifest(head, source="")
    return bool(manifest.entries or manifest.rejected)
