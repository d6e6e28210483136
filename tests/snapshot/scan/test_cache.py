"""The scan cache: files an earlier pack read, trusted while their identity (device,
inode, size, mtime, ctime) is unchanged. Real files, real hashing threads."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

import pytest

from repro.hashing import HashPipeline, HashResult
from repro.snapshot.scan.cache import FORMAT, ScanCache


def _scan(paths: list[Path], known: ScanCache | None, crc: bool = True) -> dict[str, HashResult]:
    with HashPipeline(2, known) as pipeline:
        for path in paths:
            pipeline.submit(str(path), path.stat().st_size, crc)
        return pipeline.finish()


def _save(cache: ScanCache, results: Iterable[HashResult]) -> None:
    """What a pack does: stage before the bundle is written, commit after."""
    cache.stage(results)
    cache.commit()


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    root = tmp_path / "site"
    root.mkdir()
    paths = []
    for index, size in enumerate([0, 10, 4096, 3 << 20]):
        path = root / f"f{index}.py"
        path.write_bytes(os.urandom(size))
        paths.append(path)
    return paths


def test_unchanged_files_are_not_read_again(tmp_path: Path, files: list[Path]) -> None:
    cache_dir = tmp_path / "cache"
    first = ScanCache(cache_dir, str(tmp_path), racy_ns=0)
    assert len(first) == 0
    results = _scan(files, first)
    assert first.hits == 0
    _save(first, results.values())
    again = ScanCache(cache_dir, str(tmp_path), racy_ns=0)
    assert len(again) == len(files)
    cached = _scan(files, again)
    assert again.hits == len(files)
    for path in files:
        assert cached[str(path)].digest == hashlib.sha256(path.read_bytes()).hexdigest()
        assert cached[str(path)].crc32 == results[str(path)].crc32
        assert cached[str(path)].size == path.stat().st_size


def test_a_change_that_keeps_size_and_mtime_is_still_read(
    tmp_path: Path, files: list[Path]
) -> None:
    """The hard case: same size, mtime set back with utime. The ctime moved (no user
    process can set it), so the file is read again and its new digest found."""
    cache = ScanCache(tmp_path / "cache", str(tmp_path), racy_ns=0)
    _save(cache, _scan(files, cache).values())
    target = files[2]
    before = target.stat()
    changed = os.urandom(before.st_size)
    target.write_bytes(changed)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert target.stat().st_mtime_ns == before.st_mtime_ns
    again = ScanCache(tmp_path / "cache", str(tmp_path), racy_ns=0)
    results = _scan(files, again)
    assert again.hits == len(files) - 1
    assert results[str(target)].digest == hashlib.sha256(changed).hexdigest()


def test_a_replaced_file_and_a_missing_crc_are_read(tmp_path: Path, files: list[Path]) -> None:
    cache = ScanCache(tmp_path / "cache", str(tmp_path), racy_ns=0)
    _save(cache, _scan(files, cache, crc=False).values())
    data = files[1].read_bytes()
    files[1].unlink()
    files[1].write_bytes(data)  # same bytes, a new inode
    again = ScanCache(tmp_path / "cache", str(tmp_path), racy_ns=0)
    _scan(files, again, crc=False)
    assert again.hits == len(files) - 1
    # the pack asks for CRC-32s (vault wheels) the cache does not hold: read them
    third = ScanCache(tmp_path / "cache", str(tmp_path), racy_ns=0)
    results = _scan(files, third, crc=True)
    assert third.hits == 0
    assert all(r.crc32 is not None for r in results.values())


def test_files_changed_just_before_the_scan_are_not_kept(tmp_path: Path, files: list[Path]) -> None:
    """Racy entries: a file whose ctime is within the clock's reach of the scan could
    change again without its times moving; such files are read next time."""
    cache = ScanCache(tmp_path / "cache", str(tmp_path))  # the default window, 2 s
    _save(cache, _scan(files, cache).values())
    assert len(ScanCache(tmp_path / "cache", str(tmp_path))) == 0


def test_a_damaged_or_foreign_cache_is_ignored(tmp_path: Path, files: list[Path]) -> None:
    cache = ScanCache(tmp_path / "cache", str(tmp_path), racy_ns=0)
    _save(cache, _scan(files, cache).values())
    text = cache.path.read_text()
    lines = text.splitlines()
    assert lines[0] == f"{FORMAT}\t{tmp_path}"
    # a broken line is skipped, the others still count
    cache.path.write_text("\n".join([lines[0], "garbage\tline", *lines[1:]]) + "\n")
    assert len(ScanCache(tmp_path / "cache", str(tmp_path), racy_ns=0)) == len(files)
    # another environment's file at the same name (or an older format) is not used
    cache.path.write_text(text.replace(str(tmp_path), "/elsewhere", 1))
    assert len(ScanCache(tmp_path / "cache", str(tmp_path), racy_ns=0)) == 0
    cache.path.write_bytes(b"\xff\xfe not text")
    assert len(ScanCache(tmp_path / "cache", str(tmp_path), racy_ns=0)) == 0


def test_an_unwritable_cache_is_skipped(tmp_path: Path, files: list[Path]) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache directory would be")
    cache = ScanCache(blocker, str(tmp_path), racy_ns=0)
    _save(cache, _scan(files, cache).values())  # no error
    assert blocker.read_text().startswith("a file")


def test_a_staged_cache_is_used_only_once_committed(tmp_path: Path, files: list[Path]) -> None:
    """A pack stages the cache before it writes the bundle (its scan results can then go)
    and commits it after: a pack that fails leaves the old cache, and no temp file."""
    cache_dir = tmp_path / "cache"
    first = ScanCache(cache_dir, str(tmp_path), racy_ns=0)
    first.stage(_scan(files[:1], first).values())
    assert len(ScanCache(cache_dir, str(tmp_path))) == 0  # not in place yet
    first.discard()
    assert list(cache_dir.iterdir()) == []
    second = ScanCache(cache_dir, str(tmp_path), racy_ns=0)
    second.stage(_scan(files, second).values())
    second.commit()
    assert len(ScanCache(cache_dir, str(tmp_path))) == len(files)
    assert [p.name for p in cache_dir.iterdir() if p.name.startswith(".")] == []
    second.discard()  # after a commit: nothing to remove, the cache stays
    assert len(ScanCache(cache_dir, str(tmp_path))) == len(files)


def test_without_loading_every_file_is_read_and_still_saved(
    tmp_path: Path, files: list[Path]
) -> None:
    """`pack --rehash`: the cache on disk is not trusted, what is read replaces it."""
    cache_dir = tmp_path / "cache"
    first = ScanCache(cache_dir, str(tmp_path), racy_ns=0)
    _save(first, _scan(files, first).values())
    rehash = ScanCache(cache_dir, str(tmp_path), racy_ns=0, load=False)
    assert len(rehash) == 0
    _scan(files, rehash)
    assert rehash.hits == 0
    files[1].write_bytes(b"changed after the rehash")
    _save(rehash, _scan(files, rehash).values())
    again = ScanCache(cache_dir, str(tmp_path), racy_ns=0)
    result = _scan(files, again)
    assert again.hits == len(files) - 1  # the rewritten file (ctime moved) read again
    assert result[str(files[1])].digest == hashlib.sha256(b"changed after the rehash").hexdigest()


def test_files_staged_by_killed_packs_are_pruned(tmp_path: Path, files: list[Path]) -> None:
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    old = cache_dir / ".scan-killed"
    old.write_text("partial")
    os.utime(old, (1, 1))
    recent = cache_dir / ".scan-running"  # another pack's, still being written
    recent.write_text("partial")
    cache = ScanCache(cache_dir, str(tmp_path), racy_ns=0)
    _save(cache, _scan(files, cache).values())
    assert not old.exists()
    assert recent.exists()
