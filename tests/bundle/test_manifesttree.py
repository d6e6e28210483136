"""Tests of repro.bundle.manifesttree: a tree and its MANIFEST.sha256."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
from pathlib import Path

import pytest

from repro.bundle.manifesttree import scan_tree, verify_directory, write_manifest
from repro.errors import InputError, ManifestError
from tests.support.progress import Recorder

# tests/bundle/test_manifest.py covers the round trip with sha256sum and the common
# problems; these are the other paths of the walk and of the hashing plan.


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_scan_tree_kinds(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"123")
    (tmp_path / "ln").symlink_to("d")
    os.mkfifo(tmp_path / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        listing = scan_tree(tmp_path)
    assert listing.files == {"d/f"} and dict(listing.sizes) == {"d/f": 3}
    assert dict(listing.nonregular) == {"ln": "symlink", "fifo": "fifo", "sock": "socket"}
    assert dict(listing.unreadable) == {}


def test_scan_tree_of_a_missing_root(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=f"{tmp_path / 'gone'}: cannot list directory"):
        scan_tree(tmp_path / "gone")


def test_write_manifest_refuses_a_fifo_naming_it(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ManifestError, match=f"{tmp_path / 'pipe'}: is a fifo, not a regular file"):
        write_manifest(tmp_path)
    assert not (tmp_path / "MANIFEST.sha256").exists()


def test_write_manifest_skips_itself_and_sha256sum_agrees(tmp_path: Path) -> None:
    (tmp_path / "MANIFEST.sha256.sig").write_text("sig")
    (tmp_path / "x").write_text("x")
    path = write_manifest(tmp_path)
    assert path.read_bytes() == f"{_sha(b'x')}  x\n".encode()
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    subprocess.run(
        ["sha256sum", "-c", "--strict", path.name], cwd=tmp_path, check=True, capture_output=True
    )
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".MANIFEST")] == []


def test_verify_links_inside_and_outside_and_a_listed_directory(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    (root / "real").write_bytes(b"r")
    (tmp_path / "outside").write_bytes(b"o")
    manifest = tmp_path / "m.sha256"
    manifest.write_text(
        f"{_sha(b'r')}  real\n{_sha(b'r')}  inside\n{_sha(b'o')}  escape\n{_sha(b'')}  d\n"
    )
    (root / "inside").symlink_to("real")
    (root / "escape").symlink_to(tmp_path / "outside")
    progress = Recorder()
    report = verify_directory(root, manifest, jobs=1, on_progress=progress)
    assert report.verified == ("inside", "real")
    assert [(r.path, r.reason.split(",")[0]) for r in report.rejected] == [
        ("escape", f"resolves through a symlink to {tmp_path / 'outside'}")
    ]
    assert [(u.path, u.reason) for u in report.unreadable] == [("d", "is a directory")]
    assert [u.path for u in report.unlisted] == []  # the links are listed, not unlisted
    assert progress.started == [(2, 2)]
    assert not report.passed(ignore_missing=True, strict=False)


def test_known_and_consumed_digests_are_taken(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "kept").write_bytes(b"k")
    manifest = tmp_path / "m.sha256"
    manifest.write_text(f"{_sha(b'k')}  kept\n{_sha(b'w')}  env/wheels/w.whl\n")
    known = {"kept": _sha(b"k"), "env/wheels/w.whl": _sha(b"w")}
    report = verify_directory(root, manifest, jobs=1, known=known, consumed=["env/wheels/w.whl"])
    assert report.verified == ("env/wheels/w.whl", "kept")
    assert report.passed(ignore_missing=False, strict=True)
    # without `consumed` the removed wheel is missing
    plain = verify_directory(root, manifest, jobs=1, known=known)
    assert plain.missing == ("env/wheels/w.whl",)
