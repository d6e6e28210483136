"""Staging is created, not found: a link another local user plants at a staging name
ends the run with a clear error, and nothing is written through it.

`repro unpack` stages beside the target: `.repro-unpack-PID-RANDOM.lock` appears in the
target's parent first, and the staging names follow from it (the extractor's
`..repro-unpack-PID-RANDOM.staging-RANDOM`, the streamed install's
`..repro-unpack-PID-RANDOM.staging-venv`, the verified copy `.repro-unpack-PID-RANDOM`).
Another user who can write that parent reads the lock's name and plants a link at a
staging name to a directory of theirs, holding a `.pth` for the target's site-packages.
Here the "other user" is this test (the checks do not depend on who owns the link); the
runs are the real CLI, from a pipe and from a file, their input held back where the
link is to be planted between steps.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from repro.errors import EXIT_USAGE, LockedError, UsageError
from repro.install.options import UnpackOptions
from repro.install.read.staging import STAGED_VENV
from repro.install.transaction.atomic import exclusive_lock
from repro.install.venv.streamed import StreamedInstall
from tests.conftest import REPO_ROOT
from tests.e2e.test_kill_anywhere import (
    UNPACK_ARGS,
    bundle,  # noqa: F401 - the fixture
)

EVIL_PTH = "zz_planted.pth"


def attacker_dir(root: Path) -> Path:
    """The other user's directory: a site-packages holding their `.pth`, which the
    attack would have moved into the target."""
    site = root / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / EVIL_PTH).write_text("import os; os.system('echo planted')\n")
    return root


def attacker_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def no_pth_in(target: Path) -> bool:
    return not any(target.rglob(EVIL_PTH)) if target.exists() else True


def test_the_staged_venv_is_made_exclusively_never_found(tmp_path: Path) -> None:
    """The streamed install's prefix: a link at its name is refused by name (exit 2)."""
    attacker = attacker_dir(tmp_path / "attacker")
    before = attacker_files(attacker)
    prefix = tmp_path / f"..repro-unpack-1-abc{STAGED_VENV}"
    prefix.symlink_to(attacker)
    streamed = StreamedInstall(UnpackOptions(bundle="-", target=tmp_path / "t"))
    with pytest.raises(UsageError) as caught:
        streamed.place(prefix)
    assert f"{prefix}: refusing to stage there: a symbolic link (to {attacker})" in str(
        caught.value
    )
    assert caught.value.exit_code == EXIT_USAGE
    assert streamed.prefix is None
    assert attacker_files(attacker) == before
    # a directory planted there is refused the same way; a fresh name is made 0700
    prefix.unlink()
    prefix.mkdir()
    with pytest.raises(UsageError, match="a directory already exists"):
        streamed.place(prefix)
    fresh = tmp_path / f"..repro-unpack-2-abc{STAGED_VENV}"
    streamed.place(fresh)
    assert fresh.is_dir() and not fresh.is_symlink()
    assert fresh.stat().st_mode & 0o777 == 0o700


def test_a_link_at_a_lock_is_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    lock = tmp_path / "state" / "unpack.lock"
    lock.parent.mkdir()
    lock.symlink_to(victim)
    refused = pytest.raises(LockedError, match="a symbolic link stands at the lock's name")
    with refused, exclusive_lock(lock, what="unpacking"):
        pass
    assert victim.read_text() == "keep me\n"


# --- the real CLI ---------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "repro", "unpack", *argv, *UNPACK_ARGS],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=_env(),
        )


def _wait(seen: Callable[[], Path | None], proc: subprocess.Popen[bytes], log: Path) -> Path:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = seen()
        if found is not None:
            return found
        if proc.poll() is not None:
            pytest.fail(f"unpack ended first (exit {proc.returncode}):\n{log.read_text()}")
        time.sleep(0.001)
    pytest.fail(f"never seen:\n{log.read_text()}")


def _lock_name(parent: Path) -> Callable[[], Path | None]:
    def seen() -> Path | None:
        return next(iter(parent.glob(".repro-unpack-*.lock")), None)

    return seen


def _offset_of(archive: Path, member: str) -> int:
    """The byte of the archive where `member`'s header starts."""
    with tarfile.open(archive) as tar:
        return tar.getmember(member).offset


@pytest.mark.slow
def test_a_link_planted_at_the_staged_venv_of_a_stream(
    bundle: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """`repro unpack -`: as soon as the lock file appears (the stream not yet fed), a
    link to the attacker's directory is planted at the staged venv's name. repro made
    that directory itself before reading a byte, so the link cannot be planted; were it
    planted first, the run would end with exit 2. Either way the attacker's directory
    gets nothing and no `.pth` of theirs reaches the target."""
    parent = tmp_path / "shared"
    parent.mkdir()
    target = parent / "demo"
    attacker = attacker_dir(tmp_path / "attacker")
    before = attacker_files(attacker)
    log = tmp_path / "stderr"
    proc = _start(["-", "--target", str(target)], log)
    lock = _wait(_lock_name(parent), proc, log)
    staged = parent / f".{lock.name.removesuffix('.lock')}{STAGED_VENV}"
    try:
        staged.symlink_to(attacker)
        planted = True
    except FileExistsError:
        planted = False
        # made by repro already: a directory of its own, only its owner may enter
        assert staged.is_dir() and not staged.is_symlink()
        assert staged.stat().st_mode & 0o777 == 0o700
    assert proc.stdin is not None
    try:
        with proc.stdin, bundle.open("rb") as data:
            shutil.copyfileobj(data, proc.stdin, 1 << 20)
    except BrokenPipeError:
        assert planted  # repro refused the planted link and stopped reading
    proc.wait(timeout=600)
    err = log.read_text()
    if planted:
        assert proc.returncode == EXIT_USAGE, err
        assert f"{staged}: refusing to stage there" in err
        assert not target.exists()
        assert staged.readlink() == attacker  # left as it was, never followed
    else:
        assert proc.returncode == 0, err
        assert not staged.exists()  # removed with the rest of the staging area
    assert "Traceback" not in err
    assert attacker_files(attacker) == before
    assert no_pth_in(target)


@pytest.mark.slow
def test_a_link_planted_inside_the_extractors_staging_between_members(
    bundle: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """`repro unpack -` fed up to the `services/` member (the reader reads ahead in
    chunks: env/requirements.lock is written by then), then held: a link to the attacker's
    directory is planted at `services`, a directory the extractor has not made yet,
    inside its staging tree. The extractor opens every component with O_NOFOLLOW: the
    run ends (exit 2) naming the link, nothing lands in the attacker's
    directory, the target is never made."""
    parent = tmp_path / "shared"
    parent.mkdir()
    target = parent / "demo"
    attacker = attacker_dir(tmp_path / "attacker")
    before = attacker_files(attacker)
    log = tmp_path / "stderr"
    proc = _start(["-", "--target", str(target)], log)
    cut = _offset_of(bundle, "demo-1/services")
    data = bundle.read_bytes()
    assert proc.stdin is not None
    try:
        proc.stdin.write(data[:cut])
        proc.stdin.flush()

        def lock_written() -> Path | None:
            written = parent.glob("..repro-unpack-*.staging-*/demo-1/env/requirements.lock")
            found = next(iter(written), None)
            return found.parent.parent if found is not None else None

        top = _wait(lock_written, proc, log)
        assert not (top / "services").exists()
        (top / "services").symlink_to(attacker)
        with contextlib.suppress(BrokenPipeError), proc.stdin:
            proc.stdin.write(data[cut:])  # the run may have ended at the link already
        proc.wait(timeout=600)
    finally:
        proc.kill()
        proc.wait()
    err = log.read_text()
    assert proc.returncode == EXIT_USAGE, err
    assert f"{top / 'services'}: a link or a file stands where repro makes a directory" in err
    assert "Traceback" not in err
    assert attacker_files(attacker) == before
    assert not target.exists()
    assert sorted(p.name for p in parent.iterdir()) == []  # staging removed, links too


@pytest.mark.slow
def test_a_link_planted_at_the_verified_copy_of_a_file_bundle(
    bundle: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """`repro unpack bundle.tar`: a link to the attacker's directory is planted at the
    name the verified bundle is moved to (`.repro-unpack-PID-RANDOM`) once the lock
    appears. The extractor never moves onto a link: exit 2 naming it, the attacker's
    directory as it was, the target never made."""
    parent = tmp_path / "shared"
    parent.mkdir()
    target = parent / "demo"
    attacker = attacker_dir(tmp_path / "attacker")
    before = attacker_files(attacker)
    log = tmp_path / "stderr"
    proc = _start([str(bundle), "--target", str(target)], log)
    lock = _wait(_lock_name(parent), proc, log)
    dest = parent / lock.name.removesuffix(".lock")
    dest.symlink_to(attacker)
    proc.wait(timeout=600)
    err = log.read_text()
    assert proc.returncode == EXIT_USAGE, err
    assert f"destination {dest} already exists and is not an empty directory" in err, err
    assert "Traceback" not in err
    assert attacker_files(attacker) == before
    assert not target.exists()


@pytest.mark.slow
def test_a_link_planted_at_the_target_while_the_bundle_verifies(
    bundle: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """`--target` is checked not to be a link at the start; the target itself is made
    only once the bundle verified and the preflight passed. A link to the attacker's
    (empty) directory planted at its name meanwhile: exit 2 naming it, nothing written
    through it."""
    parent = tmp_path / "shared"
    parent.mkdir()
    target = parent / "demo"
    attacker = tmp_path / "attacker"
    attacker.mkdir()
    log = tmp_path / "stderr"
    proc = _start([str(bundle), "--target", str(target)], log)
    _wait(_lock_name(parent), proc, log)
    target.symlink_to(attacker)
    proc.wait(timeout=600)
    err = log.read_text()
    assert proc.returncode == EXIT_USAGE, err
    assert f"--target {target} became a symbolic link (to {attacker})" in err, err
    assert "Traceback" not in err
    assert list(attacker.iterdir()) == []
