"""What an earlier pack read from each installed file, trusted while the file is
provably the same one, unchanged: git's index, for a venv.

A pack reads every installed file to check it against RECORD (and takes its CRC-32 for
the vault wheels). Packing the same environment again after a small change (a patch
tweaked, a unit edited) would read gigabytes that did not change. The scan cache keeps,
per file, its sha256 and CRC-32 with the identity the file had when it was read: device,
inode, size, modification time and change time, in nanoseconds. A file whose identity is
the same was not written since: every write moves the change time, which no user
process can set back (utime sets it to now). `repro pack --rehash` reads everything.

Racy entries are not kept: a file changed within the clock's granularity of its last
read could keep the same times, so a file whose change time is less than `RACY_NS`
before the read started is read again next time (git's "racily clean" rule).

Vault wheels do not rest on the cache alone: their writer checks the CRC-32 of every
byte it reads against the planned one (`repro.archive.memberfill`).

The cache is a text file per environment under `$XDG_CACHE_HOME/repro/scan` (one line
per file), replaced atomically; a cache that cannot be read is ignored, one that cannot
be written is skipped. The newest `KEEP` files are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from repro.hashing import IDENTITY, HashResult, file_identity

FORMAT = "repro-scan-cache 2"
RACY_NS = 2_000_000_000
KEEP = 16
STAGED_STALE_S = 24 * 3600
_CRC = struct.Struct(">I")  # as written: eight hex digits


class ScanCache:
    """The known files of one environment (`root`, its prefix), loaded from `directory`.

    Each file's entry is one bytes value: its identity (`file_identity`, 40 bytes), the
    raw sha256 (32) and, when known, the CRC-32 (4): a venv of 50k files costs a few MB.
    """

    def __init__(
        self, directory: Path, root: str, *, racy_ns: int = RACY_NS, load: bool = True
    ) -> None:
        """`load=False` starts empty (every file is read) but still saves what it reads."""
        self.racy_ns = racy_ns
        self.path = directory / f"{hashlib.sha256(root.encode()).hexdigest()[:24]}.tsv"
        self.root = root
        self.started_ns = time.time_ns()
        self.hits = 0
        self._known: dict[str, bytes] = {}
        self._staged: str | None = None
        if load:
            self._load()

    def __len__(self) -> int:
        return len(self._known)

    def lookup(self, path: str, crc: bool) -> HashResult | None:
        """The cached result for `path` when the file is still the one read (and the
        CRC-32 is known where `crc` asks for it); None to read it."""
        known = self._known.get(path)
        if known is None or (crc and len(known) < 76):
            return None
        try:
            info = os.stat(path)
        except OSError:
            return None
        ident = known[:40]
        if ident != file_identity(info):
            return None
        self.hits += 1
        checksum = _CRC.unpack_from(known, 72)[0] if len(known) >= 76 else None
        return HashResult(
            path,
            known[40:72].hex(),
            info.st_size,
            None,
            checksum,
            info.st_mtime_ns,
            info.st_mode,
            ident,
        )

    def release(self) -> None:
        """Drop the loaded entries (the scan is done; `stage` does not need them)."""
        self._known = {}

    def stage(self, results: Iterable[HashResult]) -> None:
        """Write what this scan read or found (not racy entries, not errors) to a temp
        file beside the cache, for `commit` to put in place once the bundle is written;
        the caller can then let the scan's results go (a pack holds one per installed
        file). A cache that cannot be written is no error: the next pack reads again."""
        self.discard()
        racy_after = self.started_ns - self.racy_ns
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, self._staged = tempfile.mkstemp(prefix=".scan-", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as stream:
                stream.write(FORMAT + "\t" + self.root + "\n")
                for result in results:
                    ident = result.identity
                    if result.digest is None or ident is None or "\t" in result.path:
                        continue
                    if _ctime_ns(ident) >= racy_after or "\n" in result.path:
                        continue
                    crc = "" if result.crc32 is None else f"{result.crc32:08x}"
                    stream.write(f"{result.path}\t{ident.hex()}\t{result.digest}\t{crc}\n")
        except OSError:
            self.discard()

    def commit(self) -> None:
        """Put the staged file in place of the cache (nothing staged: nothing done)."""
        if self._staged is None:
            return
        try:
            os.replace(self._staged, self.path)
        except OSError:
            self.discard()
            return
        self._staged = None
        _prune(self.path.parent)

    def discard(self) -> None:
        """Remove a staged file not committed (the pack failed or starts again)."""
        name, self._staged = self._staged, None
        if name is not None:
            with contextlib.suppress(OSError):
                os.unlink(name)

    def _load(self) -> None:
        try:
            stream = open(self.path, encoding="utf-8")  # noqa: SIM115
        except OSError:
            return
        known: dict[str, bytes] = {}
        try:
            with stream:
                if stream.readline() != FORMAT + "\t" + self.root + "\n":
                    return
                for line in stream:
                    fields = line.rstrip("\n").split("\t")
                    if (
                        len(fields) != 4
                        or len(fields[1]) != 2 * IDENTITY.size
                        or len(fields[2]) != 64
                        or len(fields[3]) not in (0, 8)
                    ):
                        continue
                    try:
                        known[fields[0]] = bytes.fromhex(fields[1] + fields[2] + fields[3])
                    except ValueError:
                        continue
        except (OSError, UnicodeDecodeError):
            return
        self._known = known


def _ctime_ns(identity: bytes) -> int:
    """The change time packed last in a `file_identity`."""
    return int(IDENTITY.unpack(identity)[4])


def _prune(directory: Path) -> None:
    """Keep the `KEEP` newest caches; remove files staged by packs that were killed
    (older than `STAGED_STALE_S`: a pack running beside this one may still commit)."""
    with contextlib.suppress(OSError):
        files = sorted(directory.glob("*.tsv"), key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in files[KEEP:]:
            stale.unlink()
        cutoff = time.time() - STAGED_STALE_S
        for staged in directory.glob(".scan-*"):
            with contextlib.suppress(OSError):
                if staged.stat().st_mtime < cutoff:
                    staged.unlink()
