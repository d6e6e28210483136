"""Tests of repro.install.transaction.atomic: atomic writes and the exclusive lock."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from repro.errors import LockedError
from repro.install.transaction.atomic import (
    TEMP_SUFFIX,
    atomic_unlink,
    atomic_write,
    exclusive_lock,
    remove_temp_leftovers,
    write_if_changed,
)

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o755])
def test_atomic_write_writes_the_bytes_with_the_mode(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "new" / "dir" / "file"
    atomic_write(path, b"data\x00\xff", mode=mode)
    assert path.read_bytes() == b"data\x00\xff"
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert sorted(p.name for p in path.parent.iterdir()) == ["file"]


def test_atomic_write_replaces_and_keeps_other_links_to_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "state.toml"
    path.write_bytes(b"old")
    other = tmp_path / "hardlink"
    os.link(path, other)
    atomic_write(path, b"new")
    assert path.read_bytes() == b"new"
    assert other.read_bytes() == b"old"  # renamed over, not written in place


def _identity(path: Path) -> tuple[int, int]:
    info = path.lstat()
    return info.st_ino, info.st_mtime_ns


def test_write_if_changed_leaves_a_file_that_holds_the_bytes_untouched(tmp_path: Path) -> None:
    path = tmp_path / "demo.service"
    atomic_write(path, b"[Service]\n", mode=0o644)
    before = _identity(path)
    assert write_if_changed(path, b"[Service]\n", mode=0o644) is False
    assert _identity(path) == before


@pytest.mark.parametrize(
    ("present", "mode"),
    [
        (b"[Service]\nold\n", 0o644),  # other bytes
        (b"[Service]\n", 0o600),  # the same bytes, another mode
        (b"[Service]\n\n", 0o644),  # the bytes and one more
        (b"[Service", 0o644),  # a prefix of them
    ],
)
def test_write_if_changed_writes_what_differs(tmp_path: Path, present: bytes, mode: int) -> None:
    path = tmp_path / "demo.service"
    atomic_write(path, present, mode=mode)
    before = _identity(path)
    assert write_if_changed(path, b"[Service]\n", mode=0o644) is True
    assert path.read_bytes() == b"[Service]\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert _identity(path) != before


def test_write_if_changed_replaces_a_link_and_never_writes_through_it(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"[Service]\n")
    path = tmp_path / "demo.service"
    path.symlink_to(elsewhere)
    assert write_if_changed(path, b"[Service]\n") is True
    assert not path.is_symlink() and path.read_bytes() == b"[Service]\n"
    assert elsewhere.read_bytes() == b"[Service]\n"


def test_write_if_changed_writes_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "new" / "env"
    assert write_if_changed(path, b"A=1\n", mode=0o600) is True
    assert path.read_bytes() == b"A=1\n" and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"old")
    with pytest.raises(TypeError):
        atomic_write(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_remove_temp_leftovers_removes_only_temp_files(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    leftovers = [tmp_path / f".x.abc{TEMP_SUFFIX}", tmp_path / "a" / "b" / f".y.1{TEMP_SUFFIX}"]
    kept = [
        tmp_path / f"x.abc{TEMP_SUFFIX}",  # no leading dot
        tmp_path / ".x.abc.repro-tmp.bak",
        tmp_path / "a" / "file",
    ]
    for path in leftovers + kept:
        path.write_bytes(b"")
    target = tmp_path / "outside"
    target.write_bytes(b"keep")
    link = tmp_path / f".link{TEMP_SUFFIX}"
    link.symlink_to(target)
    assert sorted(remove_temp_leftovers(tmp_path)) == sorted(leftovers)
    assert all(not p.exists() for p in leftovers)
    assert all(p.exists() for p in kept)
    assert link.is_symlink() and target.read_bytes() == b"keep"


def test_atomic_unlink_removes_and_tolerates_missing(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    atomic_unlink(path)
    assert not path.exists()
    atomic_unlink(path)  # already gone: no error
    assert list(tmp_path.iterdir()) == []


def _try_lock_in_another_process(lock: Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from repro.install.transaction.atomic import LockedError, exclusive_lock\n"
        "try:\n"
        f"    with exclusive_lock(Path({str(lock)!r}), what='unpacking'):\n"
        "        print('acquired')\n"
        "except LockedError as exc:\n"
        "    print(exc.message)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=True,
    )


def test_the_lock_excludes_another_process_until_released(tmp_path: Path) -> None:
    lock = tmp_path / "t" / ".lock"
    with exclusive_lock(lock, what="unpacking"):
        assert lock.read_text() == f"{os.getpid()}\n"
        held = _try_lock_in_another_process(lock)
        assert held.stdout.strip() == f"{lock}: another repro process is unpacking here"
    assert _try_lock_in_another_process(lock).stdout.strip() == "acquired"


def test_the_lock_refuses_a_symbolic_link_at_its_name(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    lock = tmp_path / ".lock"
    lock.symlink_to(victim)
    with pytest.raises(LockedError) as caught, exclusive_lock(lock, what="x"):
        pass
    assert "a symbolic link stands at the lock's name" in caught.value.message
    assert victim.read_bytes() == b"precious"
