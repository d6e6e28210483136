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
