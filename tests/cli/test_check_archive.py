"""`repro check` on bundle archives: streamed, never extracted to disk."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from repro.archive.writer import write_directory
from repro.bundle.manifesttree import write_manifest
from tests.support.run import run_repro


def make_bundle_dir(root: Path) -> Path:
    bundle = root / "demo-1"
    (bundle / "env").mkdir(parents=True)
    (bundle / "bundle.toml").write_text('format_version = 1\nname = "demo"\n')
    (bundle / "env" / "requirements.lock").write_text("six==1.16.0\n")
    (bundle / "files").mkdir()
    (bundle / "files" / "name with spaces.txt").write_bytes(b"x" * 100_000)
    write_manifest(bundle)
    return bundle


def archive(bundle: Path, out: Path, compression: str = "none") -> Path:
    with out.open("wb") as stream:
        write_directory(bundle, stream, top=bundle.name, mtime=0, compression=compression)  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("compression", ["none", "gz", "zst"])
def test_check_archive_passes_and_writes_nothing(tmp_path: Path, compression: str) -> None:
    bundle = make_bundle_dir(tmp_path / "src")
    target = archive(bundle, tmp_path / f"demo-1.tar.{compression}", compression)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run_repro("check", "--json", str(target))
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert len(report["verified"]) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_check_archive_from_stdin(tmp_path: Path) -> None:
    bundle = make_bundle_dir(tmp_path / "src")
    data = archive(bundle, tmp_path / "b.tar").read_bytes()
    result = run_repro("check", "-", input=data)
    assert result.returncode == 0, result.stderr.decode()


def test_tampered_archive_fails_with_the_file_named(tmp_path: Path) -> None:
    bundle = make_bundle_dir(tmp_path / "src")
    (bundle / "env" / "requirements.lock").write_text("six==1.17.0\n")
    (bundle / "files" / "unlisted.txt").write_text("new\n")
    target = archive(bundle, tmp_path / "b.tar")
    result = run_repro("check", "--json", str(target))
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert [m["path"] for m in report["mismatched"]] == ["env/requirements.lock"]
    assert report["unlisted"][0]["path"] == "files/unlisted.txt"


def test_archive_agrees_with_gnu_tar_and_sha256sum(tmp_path: Path) -> None:
    bundle = make_bundle_dir(tmp_path / "src")
    target = archive(bundle, tmp_path / "b.tar")
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-xf", str(target), "-C", str(out)], check=True)
    subprocess.run(["sha256sum", "--strict", "-c", "MANIFEST.sha256"], cwd=out / "demo-1",
                   check=True, capture_output=True)  # fmt: skip


def test_archive_without_manifest_is_refused(tmp_path: Path) -> None:
    bundle = make_bundle_dir(tmp_path / "src")
    (bundle / "MANIFEST.sha256").unlink()
    target = archive(bundle, tmp_path / "b.tar")
    result = run_repro("check", str(target))
    assert result.returncode == 2
    assert b"holds no MANIFEST.sha256" in result.stderr


def test_truncated_archive_is_unreadable(tmp_path: Path) -> None:
    bundle = make_bundle_dir(tmp_path / "src")
    data = archive(bundle, tmp_path / "b.tar").read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: len(data) // 2])
    result = run_repro("check", str(cut))
    assert result.returncode == 2
    assert b"cut.tar" in result.stderr


def test_write_directory_is_deterministic(tmp_path: Path) -> None:
    bundle = make_bundle_dir(tmp_path / "src")
    first, second = io.BytesIO(), io.BytesIO()
    write_directory(bundle, first, top="demo-1", mtime=7)
    (bundle / "bundle.toml").touch()
    write_directory(bundle, second, top="demo-1", mtime=7)
    assert first.getvalue() == second.getvalue()


def test_a_tar_file_checked_in_parallel_agrees_with_the_streamed_check(tmp_path: Path) -> None:
    """A tar on disk is checked by reading its headers, then hashing members in parallel
    at their offsets (pread); piped, the same archive is hashed as it streams. A byte
    changed inside a large member is found either way, named, with the same report."""
    bundle = make_bundle_dir(tmp_path / "src")
    for index in range(3):
        (bundle / "env" / f"big{index}.bin").write_bytes(bytes([index]) * (3 << 20))
    for index in range(40):
        (bundle / "files" / f"small{index}.txt").write_text(f"{index}\n" * index)
    write_manifest(bundle)
    target = archive(bundle, tmp_path / "b.tar")
    data = bytearray(target.read_bytes())
    where = data.find(bytes([1]) * (3 << 20)) + (2 << 20)
    data[where] ^= 0xFF
    target.write_bytes(bytes(data))
    from_file = run_repro("check", "--json", "--jobs", "4", str(target))
    piped = subprocess.run(
        f"cat '{target}' | {sys.executable} -m repro check --json -",
        shell=True,
        capture_output=True,
        check=False,
    )
    assert from_file.returncode == piped.returncode == 1
    report, streamed = json.loads(from_file.stdout), json.loads(piped.stdout)
    for name in ("target", "manifest"):  # the archive's name, or stdin's
        report.pop(name), streamed.pop(name)
    assert report == streamed
    assert [m["path"] for m in report["mismatched"]] == ["env/big1.bin"]
    assert len(report["verified"]) == 3 + 2 + 40


def test_hash_spans_reads_ranges_in_parallel_and_refuses_a_short_file(tmp_path: Path) -> None:
    from repro.hashing import hash_spans

    payload = os.urandom(5 << 20)
    path = tmp_path / "data"
    path.write_bytes(payload)
    spans = [(0, 10), (7, 4 << 20), (100, 0), (len(payload) - 3, 3)]
    seen: list[int] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        found = hash_spans(fd, spans, jobs=3, on_progress=seen.append)
        assert found == [hashlib.sha256(payload[o : o + n]).hexdigest() for o, n in spans]
        assert sorted(seen) == sorted(n for _, n in spans)
        with pytest.raises(OSError, match="file ends inside"):
            hash_spans(fd, [(len(payload) - 2, 5)], jobs=2)
    finally:
        os.close(fd)
