"""CRC-32, as a stored ZIP member records it.

zlib-ng's crc32 (folded with carry-less multiplication) runs an order of magnitude faster
than the system zlib's on the machines measured (bench/README.md), and a pack computes it
over every byte of the wheels it rebuilds. Where zlib-ng has no wheel, the standard
library's.
"""

from __future__ import annotations

try:
    from zlib_ng.zlib_ng import crc32
except ImportError:  # pragma: no cover - zlib-ng is a dependency; a platform without it
    from zlib import crc32

__all__ = ["crc32"]
