"""Tests of repro.archive.writer: deterministic tar writing for bundles."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import zstandard

from repro.archive.reader import iter_members
from repro.archive.writer import (
    DeterministicTarWriter,
    member_order,
    write_directory,
)
from repro.bundle.layout import trailing_members
from repro.errors import ArchiveError, InputError, UsageError

REPO_ROOT = Path(__file__).resolve().parents[2]
MTIME = 1_700_000_000


def _epoch(value: str) -> subprocess.CompletedProcess[str]:
    """source_date_epoch(7) in a child whose SOURCE_DATE_EPOCH is `value`."""
    script = (
        "from repro.archive.writer import source_date_epoch\n"
        "from repro.errors import UsageError\n"
        "try:\n    print(source_date_epoch(7))\n"
        "except UsageError as e:\n    print('error', e.message)\n"
    )
    env = {**os.environ, "SOURCE_DATE_EPOCH": value}
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        check=True,
    )


@pytest.mark.parametrize(
    ("value", "printed"),
    [
        ("", "7"),
        ("  ", "7"),
        ("0", "0"),
        ("1700000000", "1700000000"),
        ("-1", "error SOURCE_DATE_EPOCH='-1' is not a valid timestamp"),
        ("1.5", "error SOURCE_DATE_EPOCH='1.5' is not a valid timestamp"),
        (str(8**11), f"error SOURCE_DATE_EPOCH='{8**11}' is not a valid timestamp"),
    ],
)
def test_source_date_epoch(value: str, printed: str) -> None:
    assert _epoch(value).stdout.strip() == printed


NAMES = [
    "MANIFEST.sha256.sig",
    "env/sbom.cdx.json",
    "env/vault.toml",
    "z",
    "env/wheels/a.whl",
    "MANIFEST.sha256",
    "a.txt",
    "env/pylock.toml",
    "a/b",
    "env/x",
]


def test_member_order() -> None:
    """Format 5: the lock files that list the wheels' sha256 after every ordinary member
    (env/wheels/ and files after it included), in their order, then the SBOM."""
    assert sorted(NAMES, key=member_order) == [
        "a/b",
        "a.txt",
        "env/wheels/a.whl",
        "env/x",
        "z",
        "env/pylock.toml",
        "env/vault.toml",
        "env/sbom.cdx.json",
        "MANIFEST.sha256",
        "MANIFEST.sha256.sig",
    ]


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_member_order_of_an_older_format(version: int) -> None:
    """Formats 1 to 4: the lock files among the others, before env/wheels/."""
    trailing = trailing_members(version)
    assert sorted(NAMES, key=lambda rel: member_order(rel, trailing)) == [
        "a/b",
        "a.txt",
        "env/pylock.toml",
        "env/vault.toml",
        "env/wheels/a.whl",
        "env/x",
        "z",
        "env/sbom.cdx.json",
        "MANIFEST.sha256",
        "MANIFEST.sha256.sig",
    ]


@pytest.mark.parametrize("version", [3, 5])
def test_the_writer_holds_to_the_order_of_its_format(version: int) -> None:
    trailing = trailing_members(version)
    order = sorted(NAMES, key=lambda rel: member_order(rel, trailing))
    out = io.BytesIO()
    with DeterministicTarWriter(out, top="b-1", mtime=0, trailing=trailing) as writer:
        for rel in order:
            writer.add_bytes(rel, rel.encode())
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        assert [m.name for m in tar.getmembers() if m.isfile()] == [f"b-1/{r}" for r in order]
    wheel, lock = order.index("env/wheels/a.whl"), order.index("env/pylock.toml")
    writer = DeterministicTarWriter(io.BytesIO(), top="b-1", mtime=0, trailing=trailing)
    later, earlier = (order[wheel], order[lock]) if version == 3 else (order[lock], order[wheel])
    writer.add_bytes(later, b"")
    with pytest.raises(InputError, match="out of canonical order"):
        writer.add_bytes(earlier, b"")


def test_a_trailing_member_comes_last_even_as_its_folders_first() -> None:
    """The lock files' folder env/ may be new when they come (nothing else in it)."""
    out = io.BytesIO()
    with DeterministicTarWriter(out, top="b-1", mtime=0) as writer:
        writer.add_bytes("z", b"")
        writer.add_bytes("env/pylock.toml", b"")
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        assert tar.getnames() == ["b-1", "b-1/z", "b-1/env", "b-1/env/pylock.toml"]


@pytest.mark.parametrize(
    ("top", "mtime", "message"),
    [
        ("a/b", 0, "bad top-level directory name 'a/b' for an archive: it holds a '/'"),
        ("..", 0, "bad top-level directory name '..'"),
        ("", 0, "the name is empty"),
        ("b-1", -1, "archive mtime -1 is out of range"),
        ("b-1", 8**11, "archive mtime 8589934592 is out of range"),
    ],
)
def test_bad_top_or_mtime(top: str, mtime: int, message: str) -> None:
    with pytest.raises(InputError, match=message):
        DeterministicTarWriter(io.BytesIO(), top=top, mtime=mtime)


def test_unknown_compression() -> None:
    with pytest.raises(UsageError, match="unknown compression 'bz2'; use none, gz or zst"):
        DeterministicTarWriter(io.BytesIO(), top="b-1", mtime=0, compression="bz2")  # type: ignore[arg-type]


def _members(data: bytes) -> list[tuple[str, str, int, float]]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [(m.name, "d" if m.isdir() else "f", m.mode, m.mtime) for m in tar.getmembers()]


def test_zstd_output_read_back_by_zstandard_and_tarfile() -> None:
    out = io.BytesIO()
    with DeterministicTarWriter(out, top="b-1", mtime=MTIME, compression="zst") as writer:
        writer.add_directory("empty")
        writer.add_bytes("env/x.txt", b"x", executable=True)
    tar = zstandard.ZstdDecompressor().decompress(out.getvalue())
    assert len(tar) % 10240 == 0
    assert _members(tar) == [
        ("b-1", "d", 0o755, MTIME),
        ("b-1/empty", "d", 0o755, MTIME),
        ("b-1/env", "d", 0o755, MTIME),
        ("b-1/env/x.txt", "f", 0o755, MTIME),
    ]


def test_a_hole_is_filled_by_another_writer_then_settled(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    with (
        open(path, "w+b") as out,
        DeterministicTarWriter(out, top="b-1", mtime=MTIME) as writer,
    ):
        target = writer.hole_target()
        assert target is not None and target[0] == out.fileno()
        offset = writer.add_hole("w.whl", 5)
        writer.add_bytes("z", b"after")
        os.pwrite(out.fileno(), b"wheel", offset)
        writer.settle("w.whl", "d" * 64)
        assert writer.digests["w.whl"] == "d" * 64
    with tarfile.open(path) as tar:
        member = tar.extractfile("b-1/w.whl")
        assert member is not None and member.read() == b"wheel"
    listed = subprocess.run(["tar", "-tvf", str(path)], capture_output=True, text=True, check=True)
    assert "b-1/w.whl" in listed.stdout and "b-1/z" in listed.stdout


def test_a_hole_never_settled_stops_the_archive(tmp_path: Path) -> None:
    with open(tmp_path / "b.tar", "w+b") as out:
        writer = DeterministicTarWriter(out, top="b-1", mtime=0)
        writer.add_hole("w.whl", 5)
        with pytest.raises(InputError, match=r"never given its digest: w\.whl"):
            writer.close()
        with pytest.raises(InputError, match="writer is failed, cannot add"):
            writer.add_bytes("z", b"")


def test_holes_need_a_file_and_settle_needs_a_hole() -> None:
    gz = DeterministicTarWriter(io.BytesIO(), top="b-1", mtime=0, compression="gz")
    assert gz.hole_target() is None
    with pytest.raises(UsageError, match="cannot leave a hole: output not a file"):
        gz.add_hole("w", 1)
    plain = DeterministicTarWriter(io.BytesIO(), top="b-1", mtime=0)
    assert plain.hole_target() is None  # memory: no descriptor
    with pytest.raises(InputError, match="b-1: x is not waiting for its digest"):
        plain.settle("x", "0" * 64)


def test_closed_writer_refuses_adds_and_close_is_idempotent() -> None:
    out = io.BytesIO()
    writer = DeterministicTarWriter(out, top="b-1", mtime=0)
    writer.close()
    size = len(out.getvalue())
    writer.close()
    assert len(out.getvalue()) == size
    with pytest.raises(InputError, match="archive b-1: writer is closed, cannot add"):
        writer.add_directory("d")


def test_an_error_inside_the_block_leaves_no_end_marker() -> None:
    out = io.BytesIO()
    with pytest.raises(RuntimeError), DeterministicTarWriter(out, top="b-1", mtime=0) as writer:
        writer.add_bytes("a", b"data")
        raise RuntimeError("stop")
    assert len(out.getvalue()) == 3 * 512  # top header, a's header, a's data: no end
    with pytest.raises(ArchiveError, match="archive is truncated"):
        list(iter_members(io.BytesIO(out.getvalue()), source="cut.tar"))


def test_write_directory_sorts_and_refuses_links(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "env").mkdir(parents=True)
    (root / "MANIFEST.sha256").write_text("m\n")
    (root / "env" / "sbom.cdx.json").write_text("{}\n")
    (root / "z.txt").write_text("z\n")
    (root / "env" / "a.txt").write_text("a\n")
    out = io.BytesIO()
    digests = write_directory(root, out, top="b-1", mtime=MTIME)
    assert list(digests) == ["env/a.txt", "z.txt", "env/sbom.cdx.json", "MANIFEST.sha256"]
    assert [m[0] for m in _members(out.getvalue())] == [
        "b-1",
        "b-1/env",
        "b-1/env/a.txt",
        "b-1/z.txt",
        "b-1/env/sbom.cdx.json",
        "b-1/MANIFEST.sha256",
    ]
    (root / "link").symlink_to("z.txt")
    with pytest.raises(InputError, match=f"{root / 'link'}: not a regular file"):
        write_directory(root, io.BytesIO(), top="b-1", mtime=MTIME)
