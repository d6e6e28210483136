from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from repro import hashing


@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_hash_files_matches_hashlib_in_order(tmp_path: Path, jobs: int) -> None:
    paths = []
    for index, size in enumerate([0, 1, 2047, 2048, 5 << 20, 3, 1 << 20]):
        path = tmp_path / f"f{index}"
        path.write_bytes(bytes([index % 256]) * size)
        paths.append(path)
    missing = tmp_path / "missing"
    paths.append(missing)
    seen: list[int] = []
    results = hashing.hash_files(paths, jobs=jobs, on_progress=seen.append)
    assert [r.path for r in results] == paths
    for result in results[:-1]:
        assert result.digest == hashlib.sha256(result.path.read_bytes()).hexdigest()
        assert result.size == result.path.stat().st_size
    assert results[-1].digest is None
    assert results[-1].error is not None
    assert sum(seen) == sum(p.stat().st_size for p in paths[:-1])


def test_sha256_stream_reports_size() -> None:
    data = b"x" * (hashing.CHUNK_SIZE * 2 + 5)
    digest, size = hashing.sha256_stream(io.BytesIO(data))
    assert size == len(data)
    assert digest == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("jobs", [1, 2])
def test_hash_files_crc32_for_the_paths_asked(tmp_path: Path, jobs: int) -> None:
    import zlib

    small, large = tmp_path / "small", tmp_path / "large"
    small.write_bytes(b"abc" * 1000)
    large.write_bytes(bytes(range(256)) * ((3 << 20) // 256 + 7))  # several chunks
    large.chmod(0o755)
    both = hashing.hash_files([small, large], jobs=jobs, crc32=True)
    assert [r.crc32 for r in both] == [
        zlib.crc32(small.read_bytes()),
        zlib.crc32(large.read_bytes()),
    ]
    assert [r.digest for r in both] == [
        hashlib.sha256(p.read_bytes()).hexdigest() for p in (small, large)
    ]
    assert both[1].mode & 0o777 == 0o755
    assert both[1].mtime_ns == large.stat().st_mtime_ns
    only_large = hashing.hash_files([small, large], jobs=jobs, crc32={large})
    assert only_large[0].crc32 is None
    assert only_large[1].crc32 == both[1].crc32
    assert hashing.hash_files([small], jobs=jobs)[0].crc32 is None
    assert hashing.file_digest(large).crc32 == both[1].crc32
