"""Writing bundles past the page cache: real O_DIRECT files on the test machine's disk."""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro.archive.directio import ALIGN, DirectWriter, open_direct
from repro.errors import InputError
from repro.snapshot.write.bundle import partial_output

SMALL = 4 * ALIGN  # small buffers, so a few KB cross many buffer boundaries


@pytest.fixture
def new_file(tmp_path: Path) -> Iterator[tuple[Path, int, int]]:
    path = tmp_path / "bundle.tar"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    direct = open_direct(path)
    if direct is None:  # pragma: no cover - the test machines' disks take O_DIRECT
        os.close(fd)
        pytest.fail(f"{tmp_path} does not support O_DIRECT: these tests need a real disk")
    yield path, fd, direct
    os.close(fd)


def _pieces(seed: int, total: int) -> list[bytes]:
    rng = random.Random(seed)
    out: list[bytes] = []
    while total > 0:
        size = min(total, rng.choice([1, 7, 511, 512, ALIGN - 1, ALIGN, 3 * ALIGN + 5, SMALL * 2]))
        out.append(rng.randbytes(size))
        total -= size
    return out


@pytest.mark.parametrize("total", [0, 100, ALIGN, SMALL, SMALL * 5 + 123])
def test_bytes_land_as_written_across_buffers_and_unaligned_tail(
    new_file: tuple[Path, int, int], total: int
) -> None:
    path, fd, direct = new_file
    pieces = _pieces(total, total)
    with DirectWriter(fd, direct, buffer_size=SMALL) as writer:
        for piece in pieces:
            assert writer.write(piece) == len(piece)
        assert writer.tell() == total
        assert writer.direct
    assert path.read_bytes() == b"".join(pieces)


def test_trim_unmaps_idle_buffers_and_writing_goes_on(
    new_file: tuple[Path, int, int],
) -> None:
    """While holes are filled the stream is idle: `trim` waits for what was handed off
    and unmaps the spare buffers; later writes still land."""
    path, fd, direct = new_file
    first = _pieces(1, SMALL * 6 + 99)
    second = _pieces(2, SMALL * 3 + 7)
    with DirectWriter(fd, direct, buffer_size=SMALL) as writer:
        for piece in first:
            writer.write(piece)
        writer._full.join()  # the test looks inside: which buffers exist once written
        spares = list(writer._free.queue)
        assert spares
        writer.trim()
        assert all(buffer.closed for buffer in spares)
        assert writer._free.empty()
        for piece in second:
            writer.write(piece)
    assert path.read_bytes() == b"".join(first + second)


def test_a_write_error_surfaces_and_stops_the_writer(tmp_path: Path) -> None:
    """The writing thread's error (here a real EBADF: the 'direct' descriptor is read-only)
    is raised to the caller, at the next write or at close, not lost."""
    path = tmp_path / "out.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    readonly = os.open(path, os.O_RDONLY)
    writer = DirectWriter(fd, readonly, buffer_size=SMALL)
    with pytest.raises(OSError) as caught:
        for _ in range(100):
            writer.write(os.urandom(SMALL))
        writer.close()
    assert caught.value.errno == errno.EBADF
    writer.abort()
    os.close(fd)


def test_refused_at_the_first_write_falls_back_to_the_page_cache(
    new_file: tuple[Path, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some file systems take O_DIRECT at open and refuse the write (EINVAL). Test double:
    os.pwrite refuses every write to the direct descriptor, as such a file system would."""
    path, fd, direct = new_file
    real = os.pwrite
    refused: list[int] = []

    def pwrite(target: int, data: memoryview, offset: int) -> int:
        if target == direct:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(target, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    data = os.urandom(SMALL * 2 + 17)
    with DirectWriter(fd, direct, buffer_size=SMALL) as writer:
        writer.write(data)
        writer.flush()
    assert refused  # tried, refused, then written through the cache
    assert not writer.direct
    assert path.read_bytes() == data


def test_partial_output_writes_directly_and_renames_only_when_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPRO_DIRECT_IO", "1")
    target = tmp_path / "b.tar"
    data = os.urandom(3 * ALIGN + 11)
    with partial_output(target) as stream:
        assert isinstance(stream, DirectWriter)
        stream.write(data)
        assert not target.exists()
    assert target.read_bytes() == data
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir()] == ["b.tar"]


@pytest.mark.parametrize("direct", ["0", "1"])
def test_partial_output_failure_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: str
) -> None:
    monkeypatch.setenv("REPRO_DIRECT_IO", direct)
    target = tmp_path / "b.tar"
    with pytest.raises(InputError), partial_output(target) as stream:
        stream.write(os.urandom(20 << 20))
        raise InputError("stopped midway")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("value", "direct"), [(None, True), ("1", True), ("0", False)])
def test_a_bundle_is_written_directly_unless_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None, direct: bool
) -> None:
    """Past the page cache by default (faster on the VM, no slower on the GPU host);
    REPRO_DIRECT_IO=0 writes through it."""
    if value is None:
        monkeypatch.delenv("REPRO_DIRECT_IO", raising=False)
    else:
        monkeypatch.setenv("REPRO_DIRECT_IO", value)
    target = tmp_path / "b.tar"
    with partial_output(target) as stream:
        assert isinstance(stream, DirectWriter) is direct
        stream.write(b"bundle")
    assert target.read_bytes() == b"bundle"


def test_tmpfs_output_is_written_whichever_way_it_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tmpfs refuses O_DIRECT on older kernels and takes it on newer ones: either way the
    bundle lands whole (open_direct gives None or a descriptor, never an error)."""
    shm = Path("/dev/shm")
    if not shm.is_dir():  # pragma: no cover - Linux CI has /dev/shm
        pytest.fail("no /dev/shm (tmpfs) on this machine")
    monkeypatch.setenv("REPRO_DIRECT_IO", "1")
    target = shm / f"repro-directio-{os.getpid()}.tar"
    data = os.urandom(5 * ALIGN + 1)
    try:
        with partial_output(target) as stream:
            stream.write(data)
        assert target.read_bytes() == data
    finally:
        target.unlink(missing_ok=True)
