"""The bundle writer: vault wheels written into holes of the tar and hashed by a pool
(or streamed through a pipe, hashed as they pass), the lock files that list their
digests made after them. Real files, real plans, a real tar on disk."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import sys
import tarfile
import threading
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from repro.archive import memberfill
from repro.archive.common import Compression
from repro.archive.writer import DeterministicTarWriter, member_order
from repro.bundle.manifest import format_manifest
from repro.crc import crc32
from repro.errors import InputError, UsageError
from repro.snapshot.write.bundle import (
    Generated,
    Members,
    Streamed,
    stream_members,
    write_bundle,
)
from repro.wheel.zipwriter import ZipMember, ZipPlan

DATE = (2020, 1, 1, 0, 0, 0)


def _plan(root: Path, name: str, sizes: list[int]) -> ZipPlan:
    members = []
    for index, size in enumerate(sizes):
        path = root / f"{name}-{index}.bin"
        data = os.urandom(size)
        path.write_bytes(data)
        info = path.stat()
        members.append(
            ZipMember(
                f"{name}/f{index}.bin",
                size,
                crc32(data),
                False,
                source=str(path),
                mtime_ns=info.st_mtime_ns,
            )
        )
    return ZipPlan(tuple(members), DATE)


def test_crc32_is_zlibs() -> None:
    data = os.urandom(3 << 20)
    assert crc32(data) == zlib.crc32(data)
    assert crc32(data[7:], crc32(data[:7])) == zlib.crc32(data)


def _lock_of(wheels: list[str]) -> Generated:
    """A lock member listing the digests of `wheels`, made once they are written."""

    def render(digests: Mapping[str, str], _made: Mapping[str, bytes]) -> bytes:
        return ("\n".join(digests[rel] for rel in wheels) + "\n").encode()

    return Generated(render)


@pytest.mark.parametrize("direct_io", ["1", "0"])
def test_wheels_are_written_and_hashed_by_the_pool_and_the_lock_lists_their_digests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct_io: str
) -> None:
    plans = {
        "env/wheels/a-1-py3-none-any.whl": _plan(tmp_path, "a", [5 << 20, 100]),
        "env/wheels/b-1-py3-none-any.whl": _plan(tmp_path, "b", [1, 2 << 20, 0]),
    }
    monkeypatch.setenv("REPRO_DIRECT_IO", direct_io)
    threads: list[str] = []
    real = memberfill._fill

    def spy(hole: memberfill.Hole, writes: Any) -> str:
        threads.append(threading.current_thread().name)
        return real(hole, writes)

    monkeypatch.setattr(memberfill, "_fill", spy)
    members = Members()
    for rel, plan in sorted(plans.items()):
        members.add(rel, Streamed(plan, plan.size))
    members.add("env/pylock.toml", _lock_of(sorted(plans)))

    out = tmp_path / "out" / "b.tar"
    write_bundle(members, out, top="b", mtime=0, compression="none", jobs=2)
    assert len(threads) == 2 and all(t.startswith("repro-fill") for t in threads)
    with tarfile.open(out) as tar:
        names = [m.name for m in tar.getmembers()]
        assert names.index("b/env/pylock.toml") > max(names.index(f"b/{r}") for r in plans)

        def read(rel: str) -> bytes:
            member = tar.extractfile(f"b/{rel}")
            assert member is not None
            return member.read()

        wheels = [hashlib.sha256(read(rel)).hexdigest() for rel in sorted(plans)]
        for rel, plan in plans.items():
            assert read(rel) == b"".join(plan.iter_bytes())
        assert read("env/pylock.toml").decode().split() == wheels
        manifest: dict[str, str] = {}
        for line in read("MANIFEST.sha256").decode().splitlines():
            digest, rel = line.split("  ", 1)
            manifest[rel] = digest
    assert [manifest[rel] for rel in sorted(plans)] == wheels
    lock = ("\n".join(wheels) + "\n").encode()
    assert manifest["env/pylock.toml"] == hashlib.sha256(lock).hexdigest()


def test_a_file_changed_between_scan_and_pack_stops_it_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    plan = _plan(tmp_path, "a", [3 << 20])
    source = plan.members[0].source
    assert source is not None
    Path(source).write_bytes(os.urandom(3 << 20))  # same size, new mtime
    members = Members()
    members.add("env/wheels/a.whl", Streamed(plan, plan.size))
    out = tmp_path / "out" / "b.tar"
    with pytest.raises(InputError, match="changed"):
        write_bundle(members, out, top="b", mtime=0, compression="none", jobs=2)
    assert list((tmp_path / "out").iterdir()) == []


def test_a_hole_never_settled_stops_the_archive(tmp_path: Path) -> None:
    with open(tmp_path / "b.tar", "wb") as out:
        writer = DeterministicTarWriter(out, top="b", mtime=0)
        assert writer.add_hole("w.whl", 3) == 1024  # after the headers of b/, b/w.whl
        with pytest.raises(InputError, match=r"never given its digest: w\.whl"):
            writer.close()
    with pytest.raises(UsageError, match="not a file"):
        DeterministicTarWriter(io.BytesIO(), top="b", mtime=0).add_hole("w.whl", 3)
    writer = DeterministicTarWriter(io.BytesIO(), top="b", mtime=0)
    with pytest.raises(InputError, match="not waiting"):
        writer.settle("w.whl", "0" * 64)


class _Pipe(io.BytesIO):
    """What the writer sees of a pipe: bytes in order, no seeking back."""

    def seekable(self) -> bool:
        return False


def _known(plans: Mapping[str, ZipPlan]) -> Members:
    members = Members()
    members.add("bundle.toml", b"name = 'b'\n")
    for rel, plan in sorted(plans.items()):
        members.add(
            rel, Streamed(plan, plan.size, hashlib.sha256(b"".join(plan.iter_bytes())).hexdigest())
        )
    members.add("files/z.txt", b"last\n")
    return members


def _as_before(plans: Mapping[str, ZipPlan], members: Members) -> bytes:
    """The archive as the stream was written before the wheels were read ahead: each
    wheel's bytes read by the tar writer's thread (`ZipPlan.iter_bytes`)."""
    out = _Pipe()
    with DeterministicTarWriter(out, top="b", mtime=0) as writer:
        for rel in sorted(members.items, key=member_order):
            content = members.items[rel]
            if isinstance(content, Streamed):
                assert content.plan is not None
                writer.add_stream(
                    rel, content.size, content.plan.iter_bytes(), digest=content.sha256
                )
            else:
                assert isinstance(content, bytes)
                writer.add_bytes(rel, content)
        writer.add_bytes("MANIFEST.sha256", format_manifest(writer.digests.items()))
    return out.getvalue()


@pytest.mark.parametrize("jobs", [1, 2, 8])
def test_a_stream_read_ahead_is_byte_for_byte_the_archive_written_before_and_to_a_file(
    tmp_path: Path, jobs: int
) -> None:
    """Determinism: the wheels read ahead by threads into a pipe give the bytes the
    single-threaded stream gave, and the bytes of the same bundle written to a file."""
    plans = {
        "env/wheels/a-1-py3-none-any.whl": _plan(tmp_path, "a", [5 << 20, 100, 0]),
        "env/wheels/b-1-py3-none-any.whl": _plan(tmp_path, "b", [1, 2 << 20, (1 << 20) - 7]),
        "env/wheels/c-1-py3-none-any.whl": _plan(tmp_path, "c", [3]),
    }
    members = _known(plans)
    pipe = _Pipe()
    stream_members(members, pipe, top="b", mtime=0, compression="none", sign=None, jobs=jobs)
    assert pipe.getvalue() == _as_before(plans, members)
    out = tmp_path / "out" / "b.tar"
    write_bundle(members, out, top="b", mtime=0, compression="none", jobs=jobs)
    assert out.read_bytes() == pipe.getvalue()


def test_a_failed_read_ahead_ends_the_stream_without_an_end_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = {
        "env/wheels/a-1-py3-none-any.whl": _plan(tmp_path, "a", [3 << 20]),
        "env/wheels/b-1-py3-none-any.whl": _plan(tmp_path, "b", [2 << 20]),
    }
    members = _known(plans)
    source = plans["env/wheels/b-1-py3-none-any.whl"].members[0].source
    assert source is not None
    os.truncate(source, 1 << 20)  # the second wheel's file shrank after it was hashed
    pipe = _Pipe()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(pipe))
    with pytest.raises(InputError, match=r"b-0\.bin changed while it was packed"):
        write_bundle(members, None, top="b", mtime=0, compression="none", jobs=2)
    data = pipe.getvalue()
    assert len(data) % 512 == 0 and data[-1024:] != bytes(1024)  # no end-of-archive marker
    with pytest.raises(tarfile.ReadError), tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            tar.extractfile(member)
    # through gzip, into a file: nothing at the output path
    out = tmp_path / "out" / "b.tar.gz"
    with pytest.raises(InputError, match="changed while it was packed"):
        write_bundle(members, out, top="b", mtime=0, compression="gz", jobs=2)
    assert list(out.parent.iterdir()) == []


class _Watched(_Pipe):
    """A pipe that calls `then` once the tar bytes written (`seen`: the plain tar, told
    by `saw` where it goes through gzip first) hold `first`: a wheel's bytes."""

    def __init__(self, first: bytes, then: Callable[[], object], *, compressed: bool) -> None:
        super().__init__()
        self.first = first
        self.then = then
        self.compressed = compressed
        self.seen = bytearray()
        self.reached = False

    def saw(self, data: bytes | bytearray | memoryview) -> None:
        self.seen += data
        if not self.reached and self.first in self.seen:
            self.reached = True
            self.then()

    def write(self, data: Any) -> int:
        if not self.compressed:
            self.saw(data)
        return super().write(data)


@pytest.mark.parametrize("compression", ["none", "gz"])
def test_the_first_wheel_is_written_before_the_last_is_read_or_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: Compression
) -> None:
    """No pass over the wheels ahead of the writing, into a pipe or through gzip: the
    last wheel's file is given its bytes only once the first wheel's bytes reached the
    output, and the archive holds those bytes, with the lock that follows the wheels
    listing their sha256 (a pass ahead would have read the zeros, and the writing
    would then stop: the file changed while it was packed)."""
    first = _plan(tmp_path, "a", [1 << 20])
    middle = _plan(tmp_path, "b", [2 << 20])
    last = tmp_path / "c-1-py3-none-any.whl"
    last.write_bytes(bytes(3 << 20))
    new = os.urandom(3 << 20)
    wheels = {
        "env/wheels/a-1-py3-none-any.whl": Streamed(first, first.size),
        "env/wheels/b-1-py3-none-any.whl": Streamed(middle, middle.size),
        "env/wheels/c-1-py3-none-any.whl": Streamed(None, len(new), path=last),
    }
    members = Members()
    members.add("bundle.toml", b"name = 'b'\n")
    for rel, content in wheels.items():
        members.add(rel, content)
    members.add("env/pylock.toml", _lock_of(sorted(wheels)))
    first_bytes = b"".join(first.iter_bytes())
    out = _Watched(first_bytes, lambda: last.write_bytes(new), compressed=compression == "gz")
    if compression == "gz":
        # the plain tar, tapped on its way into the compressor
        real_write = gzip.GzipFile.write

        def tap(self: gzip.GzipFile, data: Any) -> int:
            out.saw(data)
            return real_write(self, data)

        monkeypatch.setattr(gzip.GzipFile, "write", tap)
    stream_members(members, out, top="b", mtime=0, compression=compression, sign=None, jobs=2)
    assert out.reached
    data = out.getvalue()
    if compression == "gz":
        data = gzip.decompress(data)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        held = tar.extractfile("b/env/wheels/c-1-py3-none-any.whl")
        lock = tar.extractfile("b/env/pylock.toml")
        assert held is not None and lock is not None
        assert held.read() == new
        assert lock.read().decode().split()[-1] == hashlib.sha256(new).hexdigest()
