"""Tests of repro.archive.extract: extraction into staging, then into place."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import subprocess
import tarfile
from pathlib import Path
from typing import BinaryIO, cast

import pytest

from repro.archive.extract import DIR_FLAGS, DirWalker, extract_archive
from repro.errors import ArchiveError, UsageError
from tests.support.progress import Recorder

FILES = {
    "bundle.toml": b"format_version = 1\n",
    "env/a.txt": b"a" * 5000,
    "bin/run": b"#!/bin/sh\n",
}


def _tar(files: dict[str, bytes], top: str = "b-1", dirs: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        top_info = tarfile.TarInfo(top)
        top_info.type, top_info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(top_info)
        for rel in dirs:
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for rel, data in files.items():
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mode = len(data), 0o755 if rel.startswith("bin/") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("compressed", [False, True])
def test_extracts_a_file_with_digests_and_modes(tmp_path: Path, compressed: bool) -> None:
    data = _tar(FILES, dirs=("empty",))
    archive = tmp_path / "b.tar"
    archive.write_bytes(gzip.compress(data) if compressed else data)
    digests: dict[str, str] = {}
    progress = Recorder()
    dest = extract_archive(
        archive, tmp_path / "out", source_name="b.tar", digests=digests, progress=progress
    )
    assert dest == tmp_path / "out"
    assert {rel: (dest / rel).read_bytes() for rel in FILES} == FILES
    assert digests == {rel: _sha(data) for rel, data in FILES.items()}
    assert stat.S_IMODE((dest / "bin/run").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "env/a.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((dest / "empty").stat().st_mode) == 0o755 and (dest / "empty").is_dir()
    assert progress.started == [(sum(map(len, FILES.values())), 3)]
    assert sorted(progress.advanced) == sorted(map(len, FILES.values()))
    assert sorted(os.listdir(tmp_path)) == ["b.tar", "out"]  # no staging left


def test_a_stream_is_told_file_by_file(tmp_path: Path) -> None:
    archive = tmp_path / "b.tar.gz"
    archive.write_bytes(gzip.compress(_tar(FILES)))
    heard: list[tuple[Path, str, str]] = []
    progress = Recorder()
    with subprocess.Popen(["cat", str(archive)], stdout=subprocess.PIPE) as cat:
        assert cat.stdout is not None
        extract_archive(
            cast(BinaryIO, cat.stdout),
            tmp_path / "out",
            source_name="<stdin>",
            progress=progress,
            on_written=lambda top, rel, digest: heard.append((top.parent, rel, digest)),
        )
    assert [(rel, digest) for _, rel, digest in heard] == [
        (rel, _sha(d)) for rel, d in FILES.items()
    ]
    assert {parent.name.startswith(".out.staging-") for parent, _, _ in heard} == {True}
    assert progress.started == [(0, 0)]  # a pipe's size is not known ahead
    assert sorted(progress.advanced) == sorted(map(len, FILES.values()))


def test_a_failed_verify_leaves_nothing(tmp_path: Path) -> None:
    archive = tmp_path / "b.tar"
    archive.write_bytes(_tar(FILES))
    seen: list[Path] = []

    def verify(top: Path) -> None:
        seen.append(top)
        assert (top / "bundle.toml").read_bytes() == FILES["bundle.toml"]
        raise ArchiveError("manifest mismatch")

    with pytest.raises(ArchiveError, match="manifest mismatch"):
        extract_archive(archive, tmp_path / "out", source_name="b.tar", verify=verify)
    assert seen and not seen[0].exists()
    assert sorted(os.listdir(tmp_path)) == ["b.tar"]


@pytest.mark.parametrize("kind", ["file", "full-dir"])
def test_a_destination_in_use_is_refused(tmp_path: Path, kind: str) -> None:
    archive = tmp_path / "b.tar"
    archive.write_bytes(_tar(FILES))
    dest = tmp_path / "out"
    if kind == "file":
        dest.write_text("x")
    else:
        dest.mkdir()
        (dest / "keep").write_text("x")
    with pytest.raises(
        UsageError, match=f"destination {dest} already exists and is not an empty directory"
    ):
        extract_archive(archive, dest, source_name="b.tar")
    assert sorted(os.listdir(tmp_path)) == ["b.tar", "out"]


def test_an_archive_of_only_the_top_directory(tmp_path: Path) -> None:
    archive = tmp_path / "b.tar"
    archive.write_bytes(_tar({}))
    with pytest.raises(ArchiveError, match=r"b\.tar: the archive holds no files"):
        extract_archive(archive, tmp_path / "out", source_name="b.tar")
    assert sorted(os.listdir(tmp_path)) == ["b.tar"]


def test_a_missing_archive(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match=f"cannot open {tmp_path / 'gone.tar'}"):
        extract_archive(tmp_path / "gone.tar", tmp_path / "out", source_name="gone.tar")


def test_dir_walker_creates_and_refuses_a_planted_link(tmp_path: Path) -> None:
    root = tmp_path / "staging"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "planted").symlink_to(tmp_path / "elsewhere")
    fd = os.open(root, DIR_FLAGS)
    walker = DirWalker(fd, root)
    try:
        made = walker.open(("a", "b"))
        assert walker.open(("a", "b")) == made  # the last one is kept
        assert stat.S_IMODE((root / "a" / "b").stat().st_mode) == 0o755
        with pytest.raises(UsageError, match=f"{root / 'planted'}: a link or a file stands where"):
            walker.open(("planted", "x"))
        assert os.listdir(tmp_path / "elsewhere") == []
    finally:
        walker.close()
        os.close(fd)
