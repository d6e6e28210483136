"""Members read ahead of a tar stream: the bytes in order whatever the threads do, the
memory held bounded by the window, every file checked, and a reading thread's error
raised in the writer's thread. Real files on disk."""

from __future__ import annotations

import hashlib
import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from repro.archive import readahead
from repro.archive.memberfill import FileRun, Piece
from repro.archive.readahead import SEGMENT, Ahead, ReadAhead
from repro.crc import crc32
from repro.errors import InputError, NotAsRecorded


def _file(root: Path, name: str, size: int) -> tuple[FileRun, bytes]:
    data = os.urandom(size)
    path = root / name
    path.write_bytes(data)
    info = path.stat()
    return FileRun(path, size, info.st_mtime_ns, crc32(data)), data


def _member(root: Path, name: str, layout: list[int | bytes]) -> tuple[Ahead, bytes]:
    """A member of bytes pieces and files of the given sizes; its expected bytes."""
    pieces: list[Piece] = []
    expected: list[bytes] = []
    for index, item in enumerate(layout):
        if isinstance(item, bytes):
            pieces.append(item)
            expected.append(item)
        else:
            run, data = _file(root, f"{name}-{index}.bin", item)
            pieces.append(run)
            expected.append(data)
    data = b"".join(expected)
    return Ahead(name, len(data), pieces), data


def _read_all(ahead: ReadAhead, members: list[Ahead]) -> list[bytes]:
    return [b"".join(ahead.chunks(m.name)) for m in members]


@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_members_come_back_in_order_byte_for_byte(tmp_path: Path, jobs: int) -> None:
    layouts: list[list[int | bytes]] = [
        [b"head", 3 * SEGMENT + 17, b"tail"],  # one file over several segments
        [b"x" * 30, 0, 5, b"", 1],  # small and empty files, an empty piece
        [],  # nothing at all
        [b"y" * (2 * SEGMENT + 1)],  # bytes larger than a segment
        [SEGMENT - 1, 2, SEGMENT, SEGMENT + 1],  # files across segment edges
    ]
    built = [_member(tmp_path, f"m{i}", layout) for i, layout in enumerate(layouts)]
    members = [member for member, _ in built]
    with ReadAhead(members, jobs=jobs) as ahead:
        assert _read_all(ahead, members) == [data for _, data in built]


def test_reading_happens_on_the_pool_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    member, data = _member(tmp_path, "m", [4 * SEGMENT])
    names: set[str] = set()
    real = readahead._read

    def spy(segment: readahead._Segment) -> bytearray:
        names.add(threading.current_thread().name)
        return real(segment)

    monkeypatch.setattr(readahead, "_read", spy)
    with ReadAhead([member], jobs=2) as ahead:
        assert b"".join(ahead.chunks("m")) == data
    assert names and all(name.startswith("repro-readahead") for name in names)


def test_memory_is_bounded_by_the_window_not_by_the_member(tmp_path: Path) -> None:
    """64 MiB through a window of 8 segments: the buffers alive at any time stay within
    the window, however slowly the writer takes them."""
    member = Ahead("big", 64 * SEGMENT, [_file(tmp_path, "big.bin", 64 * SEGMENT)[0]])
    digest = hashlib.sha256()
    tracemalloc.start()
    try:
        with ReadAhead([member], jobs=2) as ahead:
            assert ahead.window == 8
            tracemalloc.reset_peak()
            for chunk in ahead.chunks("big"):
                assert ahead.in_flight <= ahead.window
                digest.update(chunk)
                del chunk
            _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the window, the one segment the writer holds and the one just read to top it up
    assert peak <= (ahead.window + 2) * SEGMENT + (1 << 20)
    assert digest.hexdigest() == hashlib.sha256(Path(tmp_path / "big.bin").read_bytes()).hexdigest()


def test_a_file_that_changed_size_stops_the_member(tmp_path: Path) -> None:
    member, _ = _member(tmp_path, "m", [b"h", 2 * SEGMENT])
    (tmp_path / "m-1.bin").write_bytes(os.urandom(SEGMENT))
    with ReadAhead([member], jobs=2) as ahead, pytest.raises(InputError, match="changed"):
        b"".join(ahead.chunks("m"))


def test_bytes_not_the_planned_ones_are_refused_by_their_crc(tmp_path: Path) -> None:
    run, data = _file(tmp_path, "f.bin", 3 * SEGMENT)
    stale = FileRun(run.path, run.size, run.mtime_ns, crc32(b"other" + data[5:]))
    with (
        ReadAhead([Ahead("m", run.size, [stale])], jobs=2) as ahead,
        pytest.raises(InputError, match="CRC-32"),
    ):
        b"".join(ahead.chunks("m"))


def test_a_digest_taken_from_record_unread_is_checked(tmp_path: Path) -> None:
    run, data = _file(tmp_path, "f.bin", SEGMENT + 3)
    good = FileRun(run.path, run.size, run.mtime_ns, run.crc32, hashlib.sha256(data).hexdigest())
    bad = FileRun(run.path, run.size, run.mtime_ns, run.crc32, "0" * 64)
    with ReadAhead([Ahead("a", run.size, [good]), Ahead("b", run.size, [bad])], jobs=2) as ahead:
        assert b"".join(ahead.chunks("a")) == data
        with pytest.raises(NotAsRecorded):
            b"".join(ahead.chunks("b"))


def test_an_error_of_a_reading_thread_reaches_the_writer_and_the_threads_stop(
    tmp_path: Path,
) -> None:
    first, data = _member(tmp_path, "first", [SEGMENT])
    second = Ahead("second", 10, [FileRun(tmp_path / "missing.bin", 10)])
    ahead = ReadAhead([first, second], jobs=2)
    with ahead:
        assert b"".join(ahead.chunks("first")) == data
        with pytest.raises(InputError, match=r"cannot read .*missing\.bin"):
            b"".join(ahead.chunks("second"))
    assert ahead.in_flight == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("repro-readahead")]


def test_members_must_be_asked_for_in_order(tmp_path: Path) -> None:
    first, _ = _member(tmp_path, "first", [b"a"])
    second, _ = _member(tmp_path, "second", [b"b"])
    with (
        ReadAhead([first, second], jobs=1) as ahead,
        pytest.raises(InputError, match="not the next member"),
    ):
        next(ahead.chunks("second"))
