"""`repro check` on bundle archives: streamed, never extracted to disk."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from repro.archive import write_directory
from repro.manifest import write_manifest
from tests.conftest import run_repro


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
