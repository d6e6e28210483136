"""repro.archive writer, reader and extract: deterministic writing, safe reading and
extraction, against real tars."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

import pytest
import zstandard

from repro.archive.common import CHUNK, Compression, detect_compression
from repro.archive.extract import extract_archive
from repro.archive.reader import ArchiveLimits, iter_members, read_member
from repro.archive.writer import BACKGROUND_HASH_BYTES, DeterministicTarWriter, source_date_epoch
from repro.errors import ArchiveError, InputError, ReproError, UnsafeArchiveError, UsageError
from tests.conftest import REPO_ROOT
from tests.support.foreign import MTIME, canonical, pack_tree
from tests.support.hostile_archives import CASES, TOP, ArchiveMaker, Case, gz

COMPRESSIONS: tuple[Compression, ...] = ("none", "gz", "zst")

TREE: dict[str, tuple[bytes, bool]] = {
    "bundle.toml": (b'format_version = 1\nname = "demo"\n', False),
    "a.txt": (b"sorted after a/ by components\n", False),
    "a/b.txt": (b"inside a\n", False),
    "env/pip-freeze.txt": (b"torch==2.13.0+cpu\n", False),
    "env/wheels/demo-1.0-py3-none-any.whl": (bytes(range(256)) * 5000, False),
    "files/bench.sh": (b"#!/bin/sh\necho bench\n", True),
    "files/\u00fcn\u00efc\u00f6de.txt": (b"utf-8 name\n", False),
    "files/" + "long-name-" * 15 + ".txt": (b"needs a PAX path\n", False),
    "patches/full/sglang/srt/server.py": (b"# patched\n" * 100, False),
    "setup_env.sh": (b"#!/bin/sh\nexec repro unpack\n", True),
}


def make_tree(root: Path, *, mtime: int, private: bool, owner: int) -> None:
    for rel, (data, executable) in TREE.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        mode = 0o755 if executable else 0o644
        path.chmod(mode & 0o700 if private else mode)
        os.utime(path, (mtime, mtime))
        os.chown(path, owner, owner)


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    first, second = tmp_path / "first", tmp_path / "second"
    make_tree(first, mtime=1000, private=False, owner=0)
    make_tree(second, mtime=2_000_000_000, private=True, owner=4321)
    return first, second


# --- determinism ----------------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_same_tree_twice_gives_identical_bytes(
    trees: tuple[Path, Path], tmp_path: Path, compression: Compression
) -> None:
    first, second = trees
    pack_tree(first, tmp_path / "one")
    old_umask = os.umask(0o077)
    try:
        pack_tree(second, tmp_path / "two")
    finally:
        os.umask(old_umask)
    pack_tree(first, tmp_path / f"one.{compression}", compression)
    pack_tree(second, tmp_path / f"two.{compression}", compression)
    assert (tmp_path / "one").read_bytes() == (tmp_path / "two").read_bytes()
    one = (tmp_path / f"one.{compression}").read_bytes()
    assert one == (tmp_path / f"two.{compression}").read_bytes()
    assert detect_compression(one[:512]) == compression


def test_compressed_headers_are_deterministic(trees: tuple[Path, Path], tmp_path: Path) -> None:
    pack_tree(trees[0], tmp_path / "b.tar")
    pack_tree(trees[0], tmp_path / "b.tar.gz", "gz")
    pack_tree(trees[0], tmp_path / "b.tar.zst", "zst")
    tar = (tmp_path / "b.tar").read_bytes()
    assert len(tar) % 10240 == 0
    gz_bytes = (tmp_path / "b.tar.gz").read_bytes()
    assert gz_bytes[3] == 0  # FLG: no file name, no comment
    assert gz_bytes[4:8] == b"\0\0\0\0"  # MTIME 0
    assert gzip.decompress(gz_bytes) == tar
    zst_bytes = (tmp_path / "b.tar.zst").read_bytes()
    params = zstandard.get_frame_parameters(zst_bytes)
    assert params.content_size == len(tar)
    assert params.has_checksum
    assert zstandard.ZstdDecompressor().decompress(zst_bytes) == tar


def test_source_date_epoch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert source_date_epoch(42) == 42
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1234567890")
    assert source_date_epoch(42) == 1234567890
    out = tmp_path / "b.tar"
    with (
        out.open("wb") as stream,
        DeterministicTarWriter(stream, top=TOP, mtime=source_date_epoch(42)) as writer,
    ):
        writer.add_bytes("x", b"x")
    with tarfile.open(out) as tar:
        assert {m.mtime for m in tar.getmembers()} == {1234567890}
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH"):
        source_date_epoch(42)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_gnu_tar_lists_root_owned_members_with_normal_modes(
    trees: tuple[Path, Path], tmp_path: Path, compression: Compression
) -> None:
    bundle = tmp_path / f"b.tar.{compression}"
    pack_tree(trees[1], bundle, compression)
    listing = subprocess.run(
        ["tar", "--numeric-owner", "--quoting-style=literal", "-tvf", str(bundle)],
        capture_output=True,
        check=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], "TZ": "UTC", "LC_ALL": "C.UTF-8"},
        text=True,
    ).stdout.splitlines()
    rows = [line.split(None, 5) for line in listing]
    names = [row[5] for row in rows]
    dirs = {"", "a", "env", "env/wheels", "files", "patches", "patches/full"}
    dirs |= {"patches/full/sglang", "patches/full/sglang/srt"}
    expected = [*sorted([*TREE, *dirs], key=canonical), "MANIFEST.sha256"]
    assert names == [
        "/".join(filter(None, [TOP, rel])) + ("/" if rel in dirs else "") for rel in expected
    ]
    for row, rel in zip(rows, expected, strict=True):
        assert row[1] == "0/0"
        assert row[3:5] == ["2023-11-14", "22:13"]
        if rel in dirs:
            assert row[0] == "drwxr-xr-x"
        elif TREE.get(rel, (b"", False))[1]:
            assert row[0] == "-rwxr-xr-x"
        else:
            assert row[0] == "-rw-r--r--"


def test_gnu_tar_extracts_and_sha256sum_verifies(trees: tuple[Path, Path], tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar.zst"
    pack_tree(trees[0], bundle, "zst")
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-xf", str(bundle), "-C", str(out)], check=True, timeout=60)
    check = subprocess.run(
        ["sha256sum", "--strict", "-c", "MANIFEST.sha256"],
        cwd=out / TOP,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    pack_tree(trees[0], tmp_path / "b.tar")
    with tarfile.open(tmp_path / "b.tar") as tar:
        members = tar.getmembers()
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
    assert {m.devmajor for m in members} == {0}


def test_interpreters_agree_byte_for_byte(trees: tuple[Path, Path], tmp_path: Path) -> None:
    """The tar and gzip bytes do not depend on the Python version that wrote them."""
    pack_tree(trees[0], tmp_path / "ref.tar")
    pack_tree(trees[0], tmp_path / "ref.tar.gz", "gz")
    script = (
        "import sys; from pathlib import Path; import tests.support.foreign as p\n"
        "p.main(Path(sys.argv[1]), Path(sys.argv[2]))\n"
    )
    interpreters = other_interpreters()
    assert interpreters, "no other Python >= 3.10 on this machine"
    for python in interpreters:
        out = tmp_path / python.replace("/", "_")
        out.mkdir()
        run_foreign(python, script, str(trees[0]), str(out))
        assert (out / "b.tar").read_bytes() == (tmp_path / "ref.tar").read_bytes(), python
        assert (out / "b.tar.gz").read_bytes() == (tmp_path / "ref.tar.gz").read_bytes(), python


# --- writer refusals -----------------------------------------------------------------


def writer() -> DeterministicTarWriter:
    return DeterministicTarWriter(io.BytesIO(), top=TOP, mtime=MTIME)


@pytest.mark.parametrize(
    ("first", "then"),
    [
        ("b", "a"),
        ("a.txt", "a/b.txt"),  # components: a/ sorts before a.txt
        ("MANIFEST.sha256", "z"),
        ("MANIFEST.sha256.sig", "MANIFEST.sha256"),
        ("a/b/c", "a/b"),  # already emitted as a parent
        ("x", "x"),
    ],
)
def test_out_of_order_or_duplicate_add_is_refused(first: str, then: str) -> None:
    with pytest.raises(InputError, match=repr(then).replace(".", r"\.")):
        w = writer()
        w.add_bytes(first, b"1")
        w.add_bytes(then, b"2")


@pytest.mark.parametrize(
    ("names", "why"),
    [
        (["README", "readme"], "differ only in case"),
        (["Lib/x", "lib/y"], "differ only in case"),
        (["a", "a/b"], "is a file"),
        (["../x"], "'..' component"),
        (["/abs"], "absolute"),
        (["a//b"], "empty component"),
        (["a\\b"], "backslash"),
        (["new\nline"], "control character"),
        (["bad\udcff"], "not valid UTF-8"),
    ],
)
def test_unsafe_names_are_refused_by_the_writer(names: list[str], why: str) -> None:
    w = writer()
    with pytest.raises(InputError, match=why):
        for name in names:
            w.add_bytes(name, b"x")


def test_writer_output_passes_the_reader_in_canonical_order() -> None:
    out = io.BytesIO()
    with DeterministicTarWriter(out, top=TOP, mtime=MTIME) as w:
        w.add_bytes("a/b.txt", b"1")
        w.add_bytes("a.txt", b"2")
        w.add_directory("empty")
        w.add_bytes("z", b"3", executable=True)
        w.add_bytes("MANIFEST.sha256", b"m")
        w.add_bytes("MANIFEST.sha256.sig", b"s")
    out.seek(0)
    seen = [(m.name, m.kind, m.mode) for m, _ in iter_members(out, source="mem")]
    assert seen == [
        ("a", "dir", 0o755),
        ("a/b.txt", "file", 0o644),
        ("a.txt", "file", 0o644),
        ("empty", "dir", 0o755),
        ("z", "file", 0o755),
        ("MANIFEST.sha256", "file", 0o644),
        ("MANIFEST.sha256.sig", "file", 0o644),
    ]


def test_file_that_changes_size_while_read_is_an_error(tmp_path: Path) -> None:
    # /proc files claim size 0 and then yield data: the writer must notice, not pad.
    w = writer()
    with pytest.raises(InputError, match="changed size"):
        w.add_file("status", Path("/proc/self/status"))
    with pytest.raises(InputError, match="failed"):
        w.add_bytes("later", b"x")


def test_add_file_hashes_while_streaming_and_takes_x_bit(tmp_path: Path) -> None:
    data = os.urandom(3 * CHUNK + 17)
    source = tmp_path / "tool"
    source.write_bytes(data)
    source.chmod(0o700)
    out = io.BytesIO()
    with DeterministicTarWriter(out, top=TOP, mtime=MTIME) as w:
        digest = w.add_file("bin/tool", source)
        w.add_file("copy", source, executable=False)
    assert digest == hashlib.sha256(data).hexdigest() == w.digests["bin/tool"]
    out.seek(0)
    found = {
        m.name: (m.mode, stream.read()) for m, stream in iter_members(out, source="m") if stream
    }
    assert found == {"bin/tool": (0o755, data), "copy": (0o644, data)}


def test_add_stream_takes_planned_pieces_and_refuses_a_wrong_count() -> None:
    pieces = [b"head", b"x" * CHUNK, b"tail"]
    data = b"".join(pieces)
    out = io.BytesIO()
    with DeterministicTarWriter(out, top=TOP, mtime=MTIME) as w:
        hashed = w.add_stream("env/wheels/a.whl", len(data), iter(pieces))
        # a digest known ahead (hashed in parallel) is taken, the bytes not hashed again
        known = w.add_stream("env/wheels/b.whl", len(data), iter(pieces), digest="ab" * 32)
    assert hashed == hashlib.sha256(data).hexdigest()
    assert known == "ab" * 32 == w.digests["env/wheels/b.whl"]
    out.seek(0)
    found = {m.name: s.read() for m, s in iter_members(out, source="m") if s}
    assert found == {"env/wheels/a.whl": data, "env/wheels/b.whl": data}
    for short_or_long in (len(data) + 1, len(data) - 1):
        w = writer()
        with pytest.raises(InputError, match="planned"):
            w.add_stream("c.whl", short_or_long, iter(pieces))
        with pytest.raises(InputError, match="failed"):
            w.add_bytes("later", b"x")


def test_large_members_are_hashed_by_a_second_thread_while_written(tmp_path: Path) -> None:
    size = BACKGROUND_HASH_BYTES + 12345
    data = os.urandom(size)
    source = tmp_path / "big.bin"
    source.write_bytes(data)
    pieces = [data[i : i + 70000] for i in range(0, size, 70000)]
    out = io.BytesIO()
    with DeterministicTarWriter(out, top=TOP, mtime=MTIME) as w:
        from_file = w.add_file("a.bin", source)
        from_stream = w.add_stream("b.bin", size, iter(pieces))
    assert from_file == from_stream == hashlib.sha256(data).hexdigest()
    out.seek(0)
    found = {m.name: s.read() for m, s in iter_members(out, source="m") if s}
    assert found == {"a.bin": data, "b.bin": data}
    w = writer()
    with pytest.raises(InputError, match="planned"):
        w.add_stream("c.bin", size + 1, iter(pieces))
    assert not any(t.name == "repro-sha256" and t.is_alive() for t in threading.enumerate())


def test_member_stream_is_valid_until_the_next_member() -> None:
    out = io.BytesIO()
    with DeterministicTarWriter(out, top=TOP, mtime=MTIME) as w:
        w.add_bytes("a", b"A" * (3 * CHUNK))
        w.add_bytes("b", b"B" * 5000)
    out.seek(0)
    members = iter_members(out, source="m")
    _, first = next(members)
    assert first is not None
    assert first.read(10) == b"A" * 10
    _, second = next(members)
    assert second is not None
    assert second.read() == b"B" * 5000
    assert first.read(4 * CHUNK).strip(b"A") == b""  # never the next member's bytes


def test_writer_refuses_special_files(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        writer().add_file("fifo", fifo)


# --- reader --------------------------------------------------------------------------


def test_detect_compression_by_content() -> None:
    assert detect_compression(b"\x1f\x8b\x08rest") == "gz"
    assert detect_compression(b"\x28\xb5\x2f\xfd....") == "zst"
    with pytest.raises(ArchiveError, match=r"bundle\.zip"):
        detect_compression(b"PK\x03\x04" + bytes(600), source="bundle.zip")


def test_read_member_stops_at_the_member(trees: tuple[Path, Path], tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar.gz"
    pack_tree(trees[0], bundle, "gz")
    assert read_member(bundle, "bundle.toml") == TREE["bundle.toml"][0]
    with pytest.raises(ArchiveError, match="no file 'nope'"):
        read_member(bundle, "nope")


def test_gnu_tar_output_is_readable(tmp_path: Path) -> None:
    """An archive made by GNU tar (GNU long names, ustar prefix) passes the reader."""
    tree = tmp_path / TOP
    deep = tree / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    (deep / ("f" * 90)).write_text("deep")
    (tree / "x").write_text("x")
    for fmt in ("gnu", "posix", "ustar"):
        out = tmp_path / f"{fmt}.tar.gz"
        subprocess.run(
            ["tar", f"--format={fmt}", "-czf", str(out), "-C", str(tmp_path), TOP],
            check=True,
            timeout=60,
        )
        with out.open("rb") as stream:
            names = {m.name for m, _ in iter_members(stream, source=str(out))}
        assert f"{'d' * 60}/{'e' * 60}/{'f' * 90}" in names, fmt


# --- hostile archives ----------------------------------------------------------------


class Pipe(io.RawIOBase):
    """A non-seekable stream, as a pipe or socket gives."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        return self._data.readinto(buffer)


def snapshot(*roots: Path) -> dict[str, tuple[str, int, int, bytes]]:
    """Everything below `roots` (not following links): kind, mode, mtime, content.

    Not the mtime of the roots themselves: a staging directory comes and goes beside
    the destination, which updates its parent's mtime.
    """
    state: dict[str, tuple[str, int, int, bytes]] = {}
    for root in roots:
        state[str(root)] = ("root", root.lstat().st_mode, 0, b"")
        for path in root.rglob("*"):
            info = path.lstat()
            if path.is_symlink():
                entry = ("link", info.st_mode, info.st_mtime_ns, os.readlink(path).encode())
            elif path.is_dir():
                entry = ("dir", info.st_mode, info.st_mtime_ns, b"")
            else:
                entry = ("file", info.st_mode, info.st_mtime_ns, path.read_bytes())
            state[str(path)] = entry
    return state


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A destination's parent with a sibling file and a symlink to a victim directory."""
    parent = tmp_path / "out"
    victim = tmp_path / "victim"
    parent.mkdir()
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    keep = parent / "keep.txt"
    keep.write_text("sibling")
    keep.chmod(0o600)
    os.utime(keep, (1111, 1111))
    (parent / "link").symlink_to(victim)
    yield parent, victim
    for outside in ("/tmp/repro-evil", "/tmp/repro-target"):
        assert not Path(outside).exists()


def compressed(data: bytes, compression: str) -> bytes:
    if compression == "gz":
        return gz(data)
    if compression == "zst":
        return zstandard.ZstdCompressor(write_checksum=True).compress(data)
    return data


EXPECTED = {"UnsafeArchiveError": UnsafeArchiveError, "ArchiveError": ArchiveError}


def check_refused(case: Case, error: ReproError, compression: str, source: str) -> None:
    assert type(error) is EXPECTED[case.error]
    assert error.exit_code == (1 if case.error == "UnsafeArchiveError" else 2)
    assert source in str(error)
    if case.error == "UnsafeArchiveError" or compression == "none":
        assert case.member in str(error)


@pytest.mark.parametrize("how", ["path", "pipe"])
@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_archive_is_refused_and_nothing_changes(
    case: Case, compression: str, how: str, world: tuple[Path, Path], tmp_path: Path
) -> None:
    parent, victim = world
    data = compressed(case.build(), compression)
    bundle = tmp_path / "hostile.bin"
    bundle.write_bytes(data)
    before = snapshot(parent, victim)
    dest = parent / "bundle"
    source: Path | BinaryIO = bundle if how == "path" else cast(BinaryIO, Pipe(data))
    verified: list[Path] = []
    with pytest.raises(ReproError) as caught:
        extract_archive(
            source,
            dest,
            source_name="hostile.bin",
            limits=ArchiveLimits(**case.limits),
            verify=verified.append,
        )
    check_refused(case, caught.value, compression, "hostile.bin")
    assert not verified
    assert snapshot(parent, victim) == before  # no dest, no staging dir, nothing touched
    with pytest.raises(ReproError) as scanned, bundle.open("rb") as stream:
        for _member, member_data in iter_members(
            stream, source="hostile.bin", limits=ArchiveLimits(**case.limits)
        ):
            if member_data is not None:
                member_data.read()
    check_refused(case, scanned.value, compression, "hostile.bin")


@pytest.mark.parametrize("compression", ["gz", "zst"])
@pytest.mark.parametrize("cut", [1, 4, 9, 200])
def test_truncated_compressed_stream_is_an_archive_error(
    trees: tuple[Path, Path], tmp_path: Path, compression: Compression, cut: int
) -> None:
    bundle = tmp_path / "b"
    pack_tree(trees[0], bundle, compression)
    data = bundle.read_bytes()[:-cut]
    with pytest.raises(ArchiveError, match=r"b\.trunc"):
        for _member, stream in iter_members(io.BytesIO(data), source="b.trunc"):
            if stream is not None:
                stream.read()


@pytest.mark.parametrize("compression", ["gz", "zst"])
def test_corrupt_compressed_data_is_an_archive_error(
    trees: tuple[Path, Path], tmp_path: Path, compression: Compression
) -> None:
    bundle = tmp_path / "b"
    pack_tree(trees[0], bundle, compression)
    data = bytearray(bundle.read_bytes())
    data[len(data) // 2] ^= 0xFF
    data[-3] ^= 0xFF  # the gzip CRC/size or the zstd checksum
    with pytest.raises(ArchiveError, match=r"b\.bad"):
        for _member, stream in iter_members(io.BytesIO(bytes(data)), source="b.bad"):
            if stream is not None:
                stream.read()


def test_oversized_extended_header_is_refused_before_reading_it() -> None:
    header = tarfile.TarInfo("././@PaxHeader")
    header.type = tarfile.XHDTYPE
    header.size = 7 << 30  # 7 GiB of "PAX records" that are never there
    data = header.tobuf(tarfile.USTAR_FORMAT)
    with pytest.raises(UnsafeArchiveError, match=r"bomb\.tar: header at byte 0: extended"):
        list(iter_members(io.BytesIO(data + bytes(1024)), source="bomb.tar"))


def test_many_extended_headers_for_one_member_are_refused() -> None:
    chained = b""
    for index in range(40):
        info = tarfile.TarInfo("././@PaxHeader")
        info.type = tarfile.XHDTYPE
        record = f"comment={index:040d}{'x' * 30000}\n"
        payload = f"{len(record) + 6} {record}".encode()
        info.size = len(payload)
        chained += info.tobuf(tarfile.USTAR_FORMAT) + payload + bytes(-len(payload) % 512)
    with pytest.raises(UnsafeArchiveError, match="for one member"):
        list(iter_members(io.BytesIO(chained + bytes(1024)), source="chain.tar"))


# --- extraction ----------------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_extract_from_a_pipe_then_verify_then_rename(
    trees: tuple[Path, Path], tmp_path: Path, compression: Compression
) -> None:
    bundle = tmp_path / "b"
    pack_tree(trees[1], bundle, compression)
    dest = tmp_path / "dest"
    seen: list[Path] = []

    def verify(top: Path) -> None:
        seen.append(top)
        assert top.name == TOP
        assert top.parent.name.startswith(".dest.staging-")
        assert (top / "MANIFEST.sha256").is_file()

    with subprocess.Popen(["cat", str(bundle)], stdout=subprocess.PIPE) as cat:
        assert cat.stdout is not None
        result = extract_archive(
            cast(BinaryIO, cat.stdout), dest, source_name="pipe", verify=verify
        )
    assert result == dest
    assert len(seen) == 1
    for rel, (data, executable) in TREE.items():
        assert (dest / rel).read_bytes() == data
        assert (dest / rel).stat().st_mode & 0o777 == (0o755 if executable else 0o644)
    assert (dest / "env").stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "dest", "first", "second"]


def test_an_archive_file_is_extracted_at_member_offsets_and_equals_the_piped_one(
    trees: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An uncompressed archive file: each member is read once at its offset (preadv,
    spied on: the real call runs), hashed, and written; with REPRO_DIRECT_IO=1 a large one
    past the page cache (O_DIRECT switched on for its descriptor), by default not. The
    tree and the digests handed out are those a pipe gives; a file cut inside a member
    leaves nothing."""
    import fcntl

    from repro.archive import membercopy

    big = tmp_path / "big"
    shutil.copytree(trees[1], big)
    (big / "env" / "large.bin").write_bytes(os.urandom(membercopy.COPY_BUFFER + 3 * 4096 + 5))
    bundle = tmp_path / "b.tar"
    pack_tree(big, bundle)
    read: list[int] = []
    direct_on: list[int] = []
    real_preadv, real_fcntl = os.preadv, fcntl.fcntl

    def preadv(fd: int, buffers: list[memoryview], offset: int) -> int:
        done = real_preadv(fd, buffers, offset)
        read.append(done)
        return done

    def spy_fcntl(fd: int, cmd: int, arg: int = 0) -> int:
        if cmd == fcntl.F_SETFL and arg & os.O_DIRECT:
            direct_on.append(fd)
        return real_fcntl(fd, cmd, arg)

    monkeypatch.setattr(os, "preadv", preadv)
    monkeypatch.setattr(fcntl, "fcntl", spy_fcntl)
    monkeypatch.setenv("REPRO_DIRECT_IO", "1")
    from_file_digests: dict[str, str] = {}
    from_file = extract_archive(
        bundle, tmp_path / "from-file", source_name="b.tar", digests=from_file_digests
    )
    monkeypatch.undo()
    piped_digests: dict[str, str] = {}
    with bundle.open("rb") as raw:
        piped = extract_archive(
            cast(BinaryIO, Pipe(raw.read())),
            tmp_path / "from-pipe",
            source_name="pipe",
            digests=piped_digests,
        )
    files = sorted(p.relative_to(from_file) for p in from_file.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(piped) for p in piped.rglob("*") if p.is_file())
    for rel in files:
        assert (from_file / rel).read_bytes() == (piped / rel).read_bytes()
        assert (from_file / rel).stat().st_mode == (piped / rel).stat().st_mode
    expected = {rel.as_posix(): hashlib.sha256((from_file / rel).read_bytes()).hexdigest()
                for rel in files}  # fmt: skip
    assert from_file_digests == expected == piped_digests
    assert sum(read) == sum((from_file / rel).stat().st_size for rel in files)
    large = [rel for rel in files if (from_file / rel).stat().st_size >= membercopy.DIRECT_MIN]
    assert len(direct_on) == len(large) >= 1
    monkeypatch.setattr(fcntl, "fcntl", spy_fcntl)  # by default, through the page cache
    monkeypatch.delenv("REPRO_DIRECT_IO", raising=False)
    direct_on.clear()
    again = extract_archive(bundle, tmp_path / "again", source_name="b.tar")
    monkeypatch.undo()
    assert direct_on == []
    assert all((again / rel).read_bytes() == (piped / rel).read_bytes() for rel in files)
    data = bundle.read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: data.find(b"\0" * 16, data.find(b"large.bin")) + 3 * CHUNK])
    with pytest.raises(ArchiveError, match="truncated"):
        extract_archive(cut, tmp_path / "from-cut", source_name="cut.tar")
    assert not (tmp_path / "from-cut").exists()
    assert not [p for p in tmp_path.iterdir() if "staging" in p.name]


@pytest.mark.parametrize("how", ["path", "pipe"])
def test_verify_failure_leaves_nothing(
    trees: tuple[Path, Path], tmp_path: Path, world: tuple[Path, Path], how: str
) -> None:
    parent, victim = world
    bundle = tmp_path / "b.tar.gz"
    pack_tree(trees[0], bundle, "gz")
    dest = parent / "dest"
    dest.mkdir()
    os.utime(dest, (5, 5))
    before = snapshot(parent, victim)

    def verify(top: Path) -> None:
        raise UnsafeArchiveError(f"{top}: manifest mismatch")

    source: Path | BinaryIO = bundle
    if how == "pipe":
        source = cast(BinaryIO, Pipe(bundle.read_bytes()))
    with pytest.raises(UnsafeArchiveError, match="manifest mismatch"):
        extract_archive(source, dest, source_name="b", verify=verify)
    assert snapshot(parent, victim) == before


def test_extract_into_an_empty_directory_and_refuse_a_full_one(
    trees: tuple[Path, Path], tmp_path: Path
) -> None:
    bundle = tmp_path / "b.tar"
    pack_tree(trees[0], bundle, "none")
    dest = tmp_path / "empty"
    dest.mkdir()
    extract_archive(bundle, dest, source_name="b.tar")
    assert (dest / "bundle.toml").read_bytes() == TREE["bundle.toml"][0]
    with pytest.raises(UsageError, match="not an empty directory"):
        extract_archive(bundle, dest, source_name="b.tar")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UsageError, match="not an empty directory"):
        extract_archive(bundle, link, source_name="b.tar")


# --- interpreters without repro's dependencies ---------------------------------------


def other_interpreters() -> list[str]:
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = ["/usr/bin/python3", *(str(p) for p in sorted(pyenv.glob("3.1[0-9]*/bin/python")))]
    found = []
    for python in candidates:
        if not Path(python).exists() or Path(python).resolve() == Path(sys.executable).resolve():
            continue
        probe = subprocess.run(
            [python, "-c", "import sys; print(sys.version_info >= (3, 10))"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if probe.stdout.strip() == "True":
            found.append(python)
    return found


def run_foreign(python: str, script: str, *args: str) -> str:
    result = subprocess.run(
        [
            python,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r})\n{script}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8"},
    )
    assert result.returncode == 0, f"{python}: {result.stderr}"
    return result.stdout


def test_hostile_cases_refused_by_debian_python_without_tarfile_filters() -> None:
    """/usr/bin/python3 is Debian's 3.11.2: no tarfile.data_filter, no zstandard, no click.
    repro.archive's writer, reader and extractor must import there and refuse every case
    on its own checks."""
    python = "/usr/bin/python3"
    facts = json.loads(
        run_foreign(
            python,
            "import json, sys, tarfile, importlib.util as u\n"
            "import repro.archive.extract, repro.archive.writer\n"
            "print(json.dumps([hasattr(tarfile, 'data_filter'), u.find_spec('zstandard') is None,"
            " 'zstandard' in sys.modules]))",
        )
    )
    assert facts == [False, True, False]
    results = json.loads(run_foreign(python, "import tests.support.foreign as p; p.hostile()"))
    expected = {f"{c.id}/{comp}": c.error for c in CASES for comp in ("none", "gz")}
    assert results == expected


def test_default_limits_admit_a_normal_archive() -> None:
    limits = ArchiveLimits()
    assert limits.max_members == 200_000
    assert limits.max_member_bytes <= limits.max_total_bytes
    maker = ArchiveMaker().top()
    for index in range(5):
        maker.add(f"{TOP}/f{index}", data=b"x")
    members = list(iter_members(io.BytesIO(maker.bytes()), source="ok"))
    assert [m.name for m, _ in members] == [f"f{i}" for i in range(5)]
