"""Entry points run by other interpreters (see tests/archive/test_archive.py). Stdlib only."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path
from typing import BinaryIO, cast

from repro.archive.common import Compression
from repro.archive.extract import extract_archive
from repro.archive.reader import ArchiveLimits
from repro.archive.writer import DeterministicTarWriter
from repro.errors import ReproError
from tests.support.hostile_archives import CASES, TOP, gz

MTIME = 1_700_000_000
MANIFEST_NAMES = ("MANIFEST.sha256", "MANIFEST.sha256.sig")


def canonical(rel: str) -> tuple[bool, tuple[bytes, ...]]:
    return rel in MANIFEST_NAMES, tuple(part.encode() for part in rel.split("/"))


def pack_tree(tree: Path, out: Path, compression: Compression = "none", mtime: int = MTIME) -> None:
    """What a packer does: files in canonical order, the manifest last, one pass."""
    rels = sorted(
        (p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()), key=canonical
    )
    with (
        out.open("wb") as stream,
        DeterministicTarWriter(stream, top=TOP, mtime=mtime, compression=compression) as writer,
    ):
        for rel in rels:
            writer.add_file(rel, tree / rel)
        manifest = "".join(f"{digest}  {rel}\n" for rel, digest in writer.digests.items())
        writer.add_bytes("MANIFEST.sha256", manifest.encode())


def main(tree: Path, out: Path) -> None:
    pack_tree(tree, out / "b.tar")
    pack_tree(tree, out / "b.tar.gz", "gz")


def hostile() -> None:
    """Extract every hostile case (plain and gzip, from a stream); print what was raised."""
    results: dict[str, str] = {}
    for case in CASES:
        for compression in ("none", "gz"):
            data = case.build()
            if compression == "gz":
                data = gz(data)
            with tempfile.TemporaryDirectory() as tmp:
                dest = Path(tmp) / "dest"
                try:
                    extract_archive(
                        cast(BinaryIO, io.BufferedReader(_Pipe(data))),
                        dest,
                        source_name="hostile",
                        limits=ArchiveLimits(**case.limits),
                    )
                    outcome = "extracted"
                except ReproError as exc:
                    outcome = type(exc).__name__
                if list(Path(tmp).iterdir()):
                    outcome += " (left files behind)"
            results[f"{case.id}/{compression}"] = outcome
    print(json.dumps(results))


class _Pipe(io.RawIOBase):
    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        return self._data.readinto(buffer)
