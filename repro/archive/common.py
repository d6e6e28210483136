"""What the archive writer, reader and extractor share: the compression kinds and
how to tell them apart, the member modes, the chunk size of every copy loop.

Imports only the standard library; `zstandard` is imported when a .zst is met.
"""

from __future__ import annotations

from typing import Any, BinaryIO, Literal

from repro.errors import ArchiveError, UsageError

Compression = Literal["none", "gz", "zst"]
Kind = Literal["file", "dir"]

FILE_MODE = 0o644
EXEC_MODE = 0o755
DIR_MODE = 0o755
CHUNK = 1 << 20


def detect_compression(head: bytes, *, source: str = "<stream>") -> Compression:
    """The compression of an archive, from its first bytes (at least 262 for plain tar)."""
    if head[:2] == b"\x1f\x8b":
        return "gz"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zst"
    if head[257:262] == b"ustar":
        return "none"
    raise ArchiveError(
        f"{source}: not a tar archive (neither gzip, zstd nor ustar/pax tar)",
        hint="a bundle is a .tar, .tar.gz or .tar.zst made by `repro pack`",
    )


def import_zstandard() -> Any:
    """The `zstandard` module, or a UsageError saying how to get it."""
    try:
        import zstandard
    except ImportError as exc:
        raise UsageError(
            "zstd compression needs the 'zstandard' package", hint="pip install zstandard"
        ) from exc
    return zstandard


def is_seekable(stream: BinaryIO) -> bool:
    """Whether `stream` can seek (a file), without raising for pipes and closed streams."""
    try:
        return stream.seekable()
    except (AttributeError, OSError, ValueError):
        return False
