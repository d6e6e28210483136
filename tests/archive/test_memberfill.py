"""Bundle members written in parallel into holes the tar writer leaves: real files on
the test machine's disk, through O_DIRECT and through the page cache."""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import random
import threading
from pathlib import Path

import pytest

from repro.archive.directio import ALIGN, DirectWriter, open_direct, preallocate, write_span
from repro.archive.memberfill import BUFFER_SIZE, FileRun, Hole, Piece, fill_holes
from repro.crc import crc32
from repro.errors import InputError, NotAsRecorded


def _files(root: Path, rng: random.Random, sizes: list[int]) -> list[Piece]:
    """Pieces alternating bytes (headers) and files (members), as a wheel's plan is."""
    pieces: list[Piece] = []
    for index, size in enumerate(sizes):
        pieces.append(rng.randbytes(rng.choice([0, 1, 30, 77, ALIGN + 3])))
        path = root / f"m{rng.getrandbits(64):x}-{index}.bin"
        path.write_bytes(rng.randbytes(size))
        pieces.append(FileRun(path, size, path.stat().st_mtime_ns))
    pieces.append(rng.randbytes(45))
    return pieces


def _bytes(pieces: list[Piece]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else Path(p.path).read_bytes() for p in pieces)


@pytest.mark.parametrize("direct_io", [True, False])
def test_holes_left_by_the_direct_writer_are_filled_in_parallel(
    tmp_path: Path, direct_io: bool
) -> None:
    """The main stream (small buffers) leaves holes at unaligned offsets, of sizes from
    one byte to more than a fill buffer; the holes are filled by the pool after. Every
    byte lands where it belongs: shared pages at the holes' edges go through the ordinary
    descriptor from both sides."""
    rng = random.Random(7)
    path = tmp_path / "bundle.tar"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    direct = open_direct(path) if direct_io else None
    assert (direct is not None) == direct_io  # the test machines' disks take O_DIRECT
    expected = bytearray()
    holes: list[Hole] = []
    sizes = [[1], [ALIGN - 1], [3 * ALIGN], [BUFFER_SIZE + 5, 100], [0, 9], [2 * BUFFER_SIZE]]
    try:
        writer = DirectWriter(fd, direct, buffer_size=4 * ALIGN) if direct is not None else None
        for index, files in enumerate(sizes):
            between = rng.randbytes(rng.choice([1, 512, ALIGN, 5 * ALIGN + 1]))
            if writer is not None:
                writer.write(between)
            else:
                os.pwrite(fd, between, len(expected))
            expected += between
            pieces = _files(tmp_path, rng, files)
            data = _bytes(pieces)
            holes.append(Hole(f"w{index}", len(expected), len(data), pieces))
            if writer is not None:
                writer.skip(len(data))
            expected += data
        end = rng.randbytes(ALIGN + 17)
        if writer is not None:
            writer.write(end)
            assert writer.tell() == len(expected) + len(end)
            target = writer.direct_fd
        else:
            os.pwrite(fd, end, len(expected))
            target = None
        expected += end
        preallocate(fd, len(expected))
        results = dict(fill_holes(fd, target, holes, jobs=3))
        if writer is not None:
            writer.close()
    finally:
        os.close(fd)
    written = path.read_bytes()
    assert written == bytes(expected)
    for hole in holes:
        part = written[hole.offset : hole.offset + hole.size]
        assert results[hole.name] == hashlib.sha256(part).hexdigest()


def test_write_span_sends_whole_pages_direct_and_edges_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spy (not a double: the writes happen): which descriptor wrote which range."""
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    direct = open_direct(path)
    assert direct is not None
    calls: list[tuple[str, int, int]] = []
    real = os.pwrite

    def pwrite(target: int, data: memoryview, offset: int) -> int:
        calls.append(("direct" if target == direct else "cache", offset, len(data)))
        return real(target, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    buffer = mmap.mmap(-1, 4 * ALIGN)
    buffer[:] = os.urandom(4 * ALIGN)
    try:
        assert write_span(fd, direct, memoryview(buffer), 8 * ALIGN, 10, 3 * ALIGN + 5) == direct
        base = 8 * ALIGN
        assert calls == [
            ("cache", base + 10, ALIGN - 10),
            ("direct", base + ALIGN, 2 * ALIGN),
            ("cache", base + 3 * ALIGN, 5),
        ]
        calls.clear()
        write_span(fd, direct, memoryview(buffer), 0, 5, 9)  # inside one page
        assert calls == [("cache", 5, 4)]
    finally:
        os.close(direct)
        os.close(fd)
    data = path.read_bytes()
    assert data[base + 10 : base + 3 * ALIGN + 5] == buffer[10 : 3 * ALIGN + 5]
    assert data[5:9] == buffer[5:9]


def test_a_file_that_changed_stops_every_hole_and_names_it(tmp_path: Path) -> None:
    rng = random.Random(3)
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    big = _files(tmp_path, rng, [3 * BUFFER_SIZE])
    changed = tmp_path / "changed.bin"
    changed.write_bytes(b"x" * 100)
    stale = FileRun(changed, 100, changed.stat().st_mtime_ns - 1)
    holes = [
        Hole("big", 0, len(_bytes(big)), big),
        Hole("stale", 4 * BUFFER_SIZE, 100, [stale]),
    ]
    started = threading.active_count()
    try:
        with pytest.raises(InputError, match=r"changed\.bin changed while it was packed"):
            dict(fill_holes(fd, None, holes, jobs=2))
    finally:
        os.close(fd)
    assert threading.active_count() == started  # fillers and writers all stopped


@pytest.mark.parametrize("error", ["short", "long"])
def test_pieces_that_do_not_add_up_to_the_hole_stop_it(tmp_path: Path, error: str) -> None:
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    size = 10 if error == "short" else 4
    try:
        with pytest.raises(InputError, match=r"w\.whl: .*planned"):
            dict(fill_holes(fd, None, [Hole("w.whl", 0, size, [b"12345678"])], jobs=1))
    finally:
        os.close(fd)


def test_bytes_that_differ_from_the_planned_crc_stop_the_hole(tmp_path: Path) -> None:
    """Size and mtime can stay the same when a file is rewritten (utime sets it back);
    the CRC-32 the plan put in the ZIP header is checked against the bytes read."""
    source = tmp_path / "m.bin"
    data = os.urandom(BUFFER_SIZE + 99)
    source.write_bytes(data)
    mtime = source.stat().st_mtime_ns
    good = FileRun(source, len(data), mtime, crc32(data))
    bad = FileRun(source, len(data), mtime, crc32(data) ^ 1)
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        done = dict(fill_holes(fd, None, [Hole("ok", 0, len(data), [good])], jobs=1))
        assert done["ok"] == hashlib.sha256(data).hexdigest()
        with pytest.raises(InputError, match=r"m\.bin changed while it was packed \(its CRC-32"):
            dict(fill_holes(fd, None, [Hole("bad", 0, len(data), [bad])], jobs=1))
    finally:
        os.close(fd)


def test_a_failed_write_is_raised_not_the_stopped_fillers(tmp_path: Path) -> None:
    """The writer threads fail (a read-only descriptor: EBADF, a real error); the fillers
    stop at their next buffer and the caller gets the write's error."""
    path = tmp_path / "out"
    path.write_bytes(b"")
    rng = random.Random(5)
    pieces = _files(tmp_path, rng, [3 * BUFFER_SIZE])
    fd = os.open(path, os.O_RDONLY)
    started = threading.active_count()
    try:
        with pytest.raises(OSError) as caught:
            dict(fill_holes(fd, None, [Hole("w", 0, len(_bytes(pieces)), pieces)], jobs=2))
    finally:
        os.close(fd)
    assert caught.value.errno == errno.EBADF
    assert threading.active_count() == started


def test_a_file_whose_recorded_sha256_is_wrong_raises_not_as_recorded(tmp_path: Path) -> None:
    source = tmp_path / "big.so"
    data = os.urandom(BUFFER_SIZE + 5)
    source.write_bytes(data)
    right = FileRun(source, len(data), None, crc32(data), hashlib.sha256(data).hexdigest())
    wrong = FileRun(source, len(data), None, crc32(data), "0" * 64)
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        assert dict(fill_holes(fd, None, [Hole("ok", 0, len(data), [right])], jobs=1))
        with pytest.raises(NotAsRecorded, match=r"big\.so differs from its RECORD hash"):
            dict(fill_holes(fd, None, [Hole("bad", 0, len(data), [wrong])], jobs=1))
    finally:
        os.close(fd)
