"""Crashes and concurrency: a killed `repro pack` leaves nothing at the output path; two
`repro unpack` runs into one target end as one run would (the second is refused while
the first holds the target's lock, or finds the work done)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.install.state import STATE_DIR
from tests.conftest import REPO_ROOT, unpacked_venv
from tests.support.bundles import archive_tree, make_bundle_tree
from tests.support.run import run_repro
from tests.support.stop_at import python_argv

pytestmark = pytest.mark.slow


def start_repro(*args: str, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.Popen(
        [sys.executable, "-m", "repro", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
    )


# --- a killed pack ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with a real venv and a 4 GiB (sparse) file to carry: the write
    of the bundle takes long enough to be killed in the middle."""
    from tests.snapshot.conftest import PYTHON_311, make_venv

    root = tmp_path_factory.mktemp("big-ws") / "big"
    root.mkdir()
    make_venv(PYTHON_311, root / "venv")
    with (root / "weights.bin").open("wb") as stream:
        stream.truncate(4 << 30)
    (root / "repro.toml").write_text('[files]\ninclude = ["weights.bin"]\n')
    return root


def test_killed_pack_leaves_no_file_at_the_output_path(big_workspace: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    output = out_dir / "big-1.0.tar"
    proc = start_repro("pack", str(big_workspace), "-o", str(output), "--offline")
    partial: list[Path] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        partial = [p for p in out_dir.glob(".big-1.0.tar.*.partial") if p.stat().st_size > 0]
        if partial:
            break
        time.sleep(0.002)
    if not partial:
        proc.kill()
        _, err = proc.communicate(timeout=60)
        pytest.fail(
            f"no partial bundle seen while the pack ran (exit {proc.returncode}): "
            + err.decode(errors="replace")[-2000:]
        )
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not output.exists()
    # The temp file a SIGKILL cannot clean up is hidden and never has the output's name.
    assert all(p.name.startswith(".") and p.name.endswith(".partial") for p in out_dir.iterdir())
    rerun = run_repro("pack", str(big_workspace), "-o", str(output), "--offline")
    assert rerun.returncode == 0, rerun.stderr.decode()
    check = run_repro("check", str(output))
    assert check.returncode == 0, check.stderr.decode()
    for stale in partial:
        stale.unlink(missing_ok=True)


# --- two unpacks into one target -----------------------------------------------------------


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("conc-bundle")
    return archive_tree(make_bundle_tree(root / "src"), root / "demo.tar")


def unpack_args(bundle: Path, target: Path) -> tuple[str, ...]:
    return ("unpack", str(bundle), "--target", str(target), "--cpu", "--no-smoke",
            "--installer", "pip", "--json")  # fmt: skip


def end_state(target: Path) -> dict[str, object]:
    """What a finished unpack leaves: the steps done and the distributions installed."""
    state = (target / STATE_DIR / "state.toml").read_text()
    freeze = subprocess.run(
        [str(unpacked_venv(target) / "bin" / "python"), "-m", "pip", "freeze", "--all"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    done = [line for line in state.splitlines() if line.startswith("done")]
    return {"done": done, "freeze": sorted(freeze.split())}


@pytest.fixture(scope="module")
def single_run(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    target = tmp_path_factory.mktemp("single") / "target"
    proc = run_repro(*unpack_args(bundle, target))
    assert proc.returncode == 0, proc.stderr.decode()
    return end_state(target)


def test_unpack_into_a_locked_target_is_refused(
    bundle: Path, tmp_path: Path, single_run: dict[str, object]
) -> None:
    """Another process holds the target's lock (taken here with the same flock call a
    repro process makes): the run is refused, names the lock, and changes nothing."""
    target = tmp_path / "target"
    lock = target / STATE_DIR / "unpack.lock"
    lock.parent.mkdir(parents=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        proc = run_repro(*unpack_args(bundle, target))
        err = proc.stderr.decode()
        assert proc.returncode == 2, err  # the command cannot run now
        assert "another repro process is unpacking here" in err and str(lock) in err
        assert sorted(p.name for p in target.iterdir()) == [STATE_DIR]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]  # no staging left
    finally:
        os.close(fd)
    proc = run_repro(*unpack_args(bundle, target))
    assert proc.returncode == 0, proc.stderr.decode()
    assert end_state(target) == single_run


def test_two_concurrent_unpacks_end_as_one_run(
    bundle: Path, tmp_path: Path, single_run: dict[str, object]
) -> None:
    target = tmp_path / "target"
    first = start_repro(*unpack_args(bundle, target))
    deadline = time.monotonic() + 120
    while not (target / STATE_DIR / "unpack.lock").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    second = start_repro(*unpack_args(bundle, target))
    results: list[tuple[int | None, bytes, str]] = []
    for proc in (first, second):
        stdout, stderr = proc.communicate(timeout=600)
        results.append((proc.returncode, stdout, stderr.decode()))
    assert results[0][0] == 0, results[0][2]
    code, second_out, err = results[1]
    if code == 0:  # it came after the first had finished: nothing left to do
        assert json.loads(second_out)["changed"] is False, err
    else:
        assert code == 2 and "another repro process is unpacking here" in err, err
    assert end_state(target) == single_run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]  # no staging left


# --- staging directories of runs that share the parent directory ----------------------------

HOLD_LOCK = """
import fcntl, os, sys
from pathlib import Path
lock, staging = Path(sys.argv[1]), Path(sys.argv[2])
fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
(staging / "bundle").mkdir(parents=True)
print("held", flush=True)
sys.stdin.read()
"""

DIE_IN_STAGING = """
import os, signal, sys
from pathlib import Path
from repro.install.read.staging import staging_dir
with staging_dir(Path(sys.argv[1])) as dest:
    (dest / "bundle").mkdir(parents=True)
    (dest.parent / f".{dest.name}.staging-cc").mkdir()
    print(dest.name, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _python(script: str, *args: str, stdin: int | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        env=env,
        text=True,
        stdin=stdin,
        stdout=subprocess.PIPE,
    )


def test_staging_cleanup_keeps_live_runs_and_removes_dead_ones(
    bundle: Path, tmp_path: Path
) -> None:
    """Runs that share the targets' parent directory: a live `repro unpack` (stopped right
    after it verified its staging copy), and a live run of another PID namespace (its name
    carries a PID that is dead here; a real process holds its lock) keep their staging
    directories; a run that was SIGKILLed, and a directory whose name carries a PID that
    happens to be alive here but whose lock nobody holds, lose theirs."""
    parent = tmp_path / "targets"
    parent.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    args = ("unpack", str(bundle), "--target", str(parent / "a"), "--cpu", "--dry-run")
    live = subprocess.Popen(
        [sys.executable, *python_argv(*args, stop_at="verify done")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    _pid, status = os.waitpid(live.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status)
    (live_staging,) = [p for p in parent.iterdir() if p.is_dir()]

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    other_ns = parent / f".repro-unpack-{dead}-aaaa"
    holder = _python(HOLD_LOCK, f"{other_ns}.lock", str(other_ns), stdin=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"

    killed = _python(DIE_IN_STAGING, str(parent))
    stale_name = killed.communicate(timeout=60)[0].strip()
    assert killed.returncode == -signal.SIGKILL
    stale = [parent / stale_name, parent / f".{stale_name}.staging-cc"]
    unheld = parent / f".repro-unpack-{os.getpid()}-bbbb"  # a live PID, no lock held
    (unheld / "bundle").mkdir(parents=True)
    Path(f"{unheld}.lock").touch()
    lockless = parent / f".repro-unpack-{os.getpid()}-cccc"  # no lock file at all
    (lockless / "bundle").mkdir(parents=True)
    assert all(path.is_dir() for path in stale)

    second = run_repro("unpack", str(bundle), "--target", str(parent / "b"), "--cpu", "--dry-run")
    assert second.returncode == 0, second.stderr.decode()
    assert live_staging.is_dir() and Path(f"{live_staging}.lock").is_file()
    assert other_ns.is_dir()
    for gone in [*stale, unheld, lockless]:
        assert not gone.exists(), gone
    left = sorted(p.name for p in parent.iterdir())
    assert left == sorted([live_staging.name, f"{live_staging.name}.lock",
                           other_ns.name, f"{other_ns.name}.lock"])  # fmt: skip

    os.kill(live.pid, signal.SIGCONT)
    _out, err = live.communicate(timeout=300)
    assert live.returncode == 0, err.decode()
    assert not live_staging.exists() and not Path(f"{live_staging}.lock").exists()

    holder.communicate(input="", timeout=60)  # the other run ends without cleaning up
    third = run_repro("unpack", str(bundle), "--target", str(parent / "c"), "--cpu", "--dry-run")
    assert third.returncode == 0, third.stderr.decode()
    assert list(parent.iterdir()) == []
