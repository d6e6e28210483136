"""A SIGKILL at any moment of `repro unpack`, then a rerun: the target ends equal to a
clean unpack's, file for file.

A real bundle (`repro pack --wheels all` of a workspace with real PyPI wheels, pip and
setuptools among them, a wheel only the vault holds, hand patches, a unit and bench
files) is unpacked offline once, cleanly, into TARGET; its tree is the reference. Then,
for each kill point, the same bundle is unpacked into the same TARGET (so that paths
written into scripts and units agree) and killed there: the single PID or the whole
process group, with SIGKILL. The rerun must exit 0, `repro verify TARGET` must pass,
and every file of the target (venv, patched files, units, workspace files, the state)
must be the clean unpack's, byte for byte and mode for mode.

Kill points are named events: run through `python -m tests.support.stop_at "STEP STATUS"`,
repro stops itself (SIGSTOP) right after it reports that event, so the kill lands
exactly there; inside a step that runs an installer the test lets it go on for a
fraction of the step's duration measured in the clean run, or waits until the
venv's creator is seen running or the vault installer's first file is. The extraction
is caught by watching its staging files appear.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from repro._toml import loads as toml_loads
from tests.conftest import REPO_ROOT
from tests.install.test_unpack import build_local_wheel, build_workspace, pack
from tests.support.run import run_repro
from tests.support.stop_at import python_argv
from tests.support.upgrades import differences as tree_differences
from tests.support.venvs import cache_root, find_python

pytestmark = pytest.mark.slow

UNPACK_ARGS = ("--cpu", "--no-smoke", "--offline")
# A run's own bookkeeping: the report of the latest run. Python's bytecode caches are
# not compared (written by whichever interpreter run comes first, with its mtimes).
NOT_COMPARED = {".repro/unpack-report.json"}
LOCK_FILES = {".repro/unpack.lock", ".repro/patch.lock"}  # they hold the last pid
RECIPE = "kill-anywhere 1"


# --- the bundle, built once per state of repro's code and cached --------------------------


def _code_key() -> str:
    digest = hashlib.sha256(RECIPE.encode())
    for path in sorted((REPO_ROOT / "repro").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(REPO_ROOT).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _build_bundle(base: Path) -> Path:
    wheel = build_local_wheel(base / "localwheel")
    workspace = build_workspace(
        base / "ws", find_python("3.11"), ["six==1.16.0", "idna==3.7", str(wheel)]
    )
    (workspace / "services").mkdir()
    (workspace / "services" / "model.service").write_text(
        "[Unit]\nDescription=model server\n\n[Service]\n"
        f"ExecStart={workspace}/.venv/bin/python -m http.server 30000\n"
    )
    (workspace / "bench").mkdir()
    (workspace / "bench" / "run.sh").write_text("#!/bin/sh\necho bench\n")
    (workspace / "bench" / "run.sh").chmod(0o755)
    (workspace / "bench" / "results.json").write_text('{"tokens_per_s": 100}\n')
    (workspace / "repro.toml").write_text('[files]\ninclude = ["bench/*"]\n')
    return pack(workspace, base / "bundles", "1", "--wheels", "all")


@pytest.fixture(scope="module")
def bundle() -> Iterator[Path]:
    """Cached in the test cache (see tests/support/venvs.py) under a key of repro's code, and
    held (a shared flock) while the module runs; bundles of other keys that nobody holds
    are removed."""
    root = cache_root()
    key = f"kill-anywhere-{_code_key()}"
    cached = root / f"{key}.tar"
    with (root / f"{key}.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not cached.is_file():
            with tempfile.TemporaryDirectory(dir=root) as temp:
                _build_bundle(Path(temp)).rename(cached)
        fcntl.flock(held, fcntl.LOCK_SH)
        for other in root.glob("kill-anywhere-*.lock"):
            if other.name != f"{key}.lock":
                _remove_unless_held(other)
        yield cached


def _remove_unless_held(lock: Path) -> None:
    with lock.open("a") as stream:
        try:
            fcntl.flock(stream, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a run of other code uses its bundle now
        lock.with_suffix(".tar").unlink(missing_ok=True)
        lock.unlink()


# --- looking at a target and at processes -------------------------------------------------


def tree(target: Path) -> dict[str, str]:
    """Every entry under `target`: a file's mode and sha256, a link's destination."""
    out: dict[str, str] = {}
    for directory, dirs, files in os.walk(target):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in [*dirs, *files]:
            path = Path(directory) / name
            rel = path.relative_to(target).as_posix()
            info = path.lstat()
            if rel in NOT_COMPARED:
                continue
            if stat.S_ISLNK(info.st_mode):
                out[rel] = f"link -> {os.readlink(path)}"
            elif stat.S_ISDIR(info.st_mode):
                out[rel] = f"dir {stat.S_IMODE(info.st_mode):o}"
            elif rel in LOCK_FILES:
                out[rel] = "lock"
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[rel] = f"file {stat.S_IMODE(info.st_mode):o} {digest}"
    return out


def _processes() -> Iterator[tuple[int, int, int, str, str]]:
    """(pid, ppid, pgid, state, command line) of every process."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        yield int(entry.name), int(fields[1]), int(fields[2]), fields[0], cmdline


def installers_left(target: Path, grace: float = 0.5) -> list[str]:
    """Processes that still name the target (an installer, its guard) `grace` seconds
    after repro died; zombies do not count."""

    def left() -> list[str]:
        return [c for _p, _pp, _g, state, c in _processes() if str(target) in c and state != "Z"]

    deadline = time.monotonic() + grace
    while left() and time.monotonic() < deadline:
        time.sleep(0.01)
    return left()


# --- running, stopping and killing unpack -------------------------------------------------


@dataclass(frozen=True)
class Point:
    """Where a kill lands: right after the event `STEP STATUS` (`after`: once the step
    has run this fraction of its clean duration more), or as soon as `watch` is seen
    (a file in the target's parent, or a process whose command line holds it)."""

    name: str
    event: str | None = None
    after: tuple[str, float] | None = None
    watch_file: str | None = None
    watch_process: str | None = None
    landed: str | None = None  # the step state.toml must record as started then


Mode = Literal["pid", "group"]


@dataclass
class Killed:
    point: Point
    mode: Mode
    state: dict[str, object]  # state.toml right after the kill


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra)
    return env


def start_unpack(
    bundle: Path, target: Path, log: Path, stop_at: str | None = None
) -> subprocess.Popen[bytes]:
    args = ("unpack", str(bundle), "--target", str(target), *UNPACK_ARGS, "-v")
    with log.open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, *python_argv(*args, stop_at=stop_at)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=_env({}),
            start_new_session=True,  # its own process group, for the group kill
        )


def wait_stopped(proc: subprocess.Popen[bytes], log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status = os.waitpid(proc.pid, os.WUNTRACED | os.WNOHANG)
        if pid == 0:
            time.sleep(0.002)
            continue
        if os.WIFSTOPPED(status):
            return
        proc.returncode = os.waitstatus_to_exitcode(status)
        pytest.fail(f"unpack ended (exit {proc.returncode}) before the stop:\n{log.read_text()}")
    proc.kill()
    pytest.fail(f"unpack never stopped:\n{log.read_text()}")


def wait_seen(proc: subprocess.Popen[bytes], point: Point, parent: Path, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if point.watch_file is not None and any(parent.glob(point.watch_file)):
            return
        if point.watch_process is not None:
            if any(point.watch_process in command for *_rest, command in _processes()):
                return
            time.sleep(0.004)  # reading /proc is not free: leave the CPU to the run
        time.sleep(0.001)
    pytest.fail(f"{point.name}: never seen (exit {proc.poll()}):\n{log.read_text()}")


def kill_at(
    bundle: Path,
    target: Path,
    point: Point,
    mode: Mode,
    durations: dict[str, float],
    log: Path,
) -> Killed:
    # A timed point waits a fraction of the step's clean duration; on a machine whose
    # load fell since the clean run the step may end first: the run is then done, not
    # killed, and the point is tried again from nothing with half the wait (the kill
    # must still land inside the step: `landed` is checked by the caller).
    for attempt in range(4):
        proc = start_unpack(bundle, target, log, point.event)
        if point.event is not None:
            wait_stopped(proc, log)
            if point.after is not None:
                step, fraction = point.after
                os.kill(proc.pid, signal.SIGCONT)
                time.sleep(durations[step] * fraction / 2**attempt)
        else:
            wait_seen(proc, point, target.parent, log)
        if mode == "pid":
            os.kill(proc.pid, signal.SIGKILL)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        if proc.returncode == 0 and point.after is not None and attempt < 3:
            shutil.rmtree(target)
            continue
        break
    assert proc.returncode == -signal.SIGKILL, log.read_text()
    state_file = target / ".repro" / "state.toml"
    state = toml_loads(state_file.read_text()) if state_file.is_file() else {}
    return Killed(point, mode, state)


# --- the clean reference --------------------------------------------------------------------


@dataclass(frozen=True)
class Clean:
    target: Path  # every run unpacks here
    tree: dict[str, str]
    durations: dict[str, float]  # seconds each step took in the clean run
    scan: object


def _timed_events(proc: subprocess.Popen[bytes]) -> dict[str, float]:
    """`STEP STATUS` -> when its line came, from the run's stderr as it is written."""
    assert proc.stderr is not None
    seen: dict[str, float] = {}
    for raw in proc.stderr:
        line = raw.decode(errors="replace").strip()
        status, _, rest = line.partition(" ")
        for known in ("already done", "started", "done", "sources", "pass", "skipped"):
            if line.startswith(known):
                status, rest = known, line[len(known) :].strip()
        step = rest.partition(":")[0]
        seen.setdefault(f"{step} {status}", time.monotonic())
    return seen


def scan_json(target: Path) -> object:
    result = run_repro("scan", "--venv", str(target / ".venv"), "--json")
    assert result.returncode in (0, 1), result.stderr.decode()
    document = json.loads(result.stdout)
    return document.get("patched", document)


@pytest.fixture(scope="module")
def clean(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Clean:
    target = tmp_path_factory.mktemp("kill-anywhere") / "demo"
    argv = [sys.executable, "-m", "repro", "unpack", str(bundle), "--target", str(target)]
    proc = subprocess.Popen(
        [*argv, *UNPACK_ARGS, "-v"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env({})
    )
    events = _timed_events(proc)
    assert proc.wait(timeout=600) == 0, events
    durations = {
        "venv": events["venv done"] - events["venv started"],
        "install": events["install done"] - events["install sources"],
        "patch": events["patch done"] - events["patch started"],
        "workspace": events["workspace done"] - events["workspace started"],
    }
    verify = run_repro("verify", str(target))
    assert verify.returncode == 0, verify.stderr.decode()
    reference = Clean(target, tree(target), durations, scan_json(target))
    assert any(rel.endswith("six.py") for rel in reference.tree)
    assert "services/model.service" in reference.tree
    assert "bench/run.sh" in reference.tree
    shutil.rmtree(target)
    return reference


# --- the kill points ------------------------------------------------------------------------


def _started(step: str) -> Point:
    return Point(f"{step}-started", event=f"{step} started", landed=step)


def _within(step: str, event: str, fraction: float) -> Point:
    return Point(f"{step}-{int(fraction * 100)}%", event=event, after=(step, fraction))


POINTS = [
    Point("staging-locked", watch_file=".repro-unpack-*.lock"),
    Point("extracting", watch_file="..repro-unpack-*.staging-*"),
    Point("verified", event="verify done"),
    Point("preflight-python", event="preflight python pass"),
    Point("preflight-done", event="preflight done"),
    _started("venv"),
    Point("venv-running", watch_process="venv --without-pip", landed="venv"),
    _within("venv", "venv started", 0.5),
    Point("venv-done", event="venv done"),
    _started("install"),
    Point("install-sources", event="install sources", landed="install"),
    # the vault installer (the default for a --wheels all bundle) has written a file
    Point(
        "wheels-unpacking", watch_file="demo/.venv/lib/python*/site-packages/*", landed="install"
    ),
    *(_within("install", "install sources", f) for f in (0.15, 0.3, 0.45, 0.6, 0.75)),
    Point("install-done", event="install done"),
    _started("patch"),
    *(_within("patch", "patch started", f) for f in (0.3, 0.6)),
    Point("patch-done", event="patch done"),
    _started("workspace"),
    _within("workspace", "workspace started", 0.5),
    Point("workspace-done", event="workspace done"),
    _started("caches"),
    Point("caches-done", event="caches done"),
    _started("services"),
    Point("services-done", event="services done"),
    Point("models-started", event="models started"),
    Point("models-done", event="models done"),
    Point("smoke-skipped", event="smoke skipped"),
]
MODES: list[Mode] = ["pid", "group"]


@pytest.mark.parametrize(
    ("point", "mode"),
    [(point, MODES[i % 2]) for i, point in enumerate(POINTS)],
    ids=[f"{point.name}-{MODES[i % 2]}" for i, point in enumerate(POINTS)],
)
def test_a_kill_then_a_rerun_equals_a_clean_unpack(
    bundle: Path, clean: Clean, point: Point, mode: Mode, tmp_path: Path
) -> None:
    target = clean.target
    try:
        killed = kill_at(bundle, target, point, mode, clean.durations, tmp_path / "killed.log")
        if point.landed is not None:
            assert killed.state.get("started") == point.landed, killed.state
        # Tethered: the installer and all it started die with repro, PID kill or not.
        assert installers_left(target) == []
        if killed.state:  # the verified bundle is in the target: nothing staged beside it
            assert sorted(p.name for p in target.parent.iterdir()) == [target.name]
        rerun = run_repro("unpack", str(bundle), "--target", str(target), *UNPACK_ARGS)
        assert rerun.returncode == 0, rerun.stderr.decode()
        assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # no staging
        verify = run_repro("verify", str(target))
        assert verify.returncode == 0, verify.stdout.decode() + verify.stderr.decode()
        assert tree_differences(tree(target), clean.tree) == []
        if point.landed == "install":
            assert scan_json(target) == clean.scan
    finally:
        shutil.rmtree(target, ignore_errors=True)


def test_what_a_kill_inside_an_atomic_write_leaves_is_removed(
    bundle: Path, clean: Clean, tmp_path: Path
) -> None:
    """A SIGKILL between an atomic write's temporary file and its rename leaves the
    temporary file (beside a patched file, beside the state) and a cut-short copy of the
    kept bundle; the rerun removes them all."""
    target = clean.target
    try:
        kill_at(bundle, target, _started("patch"), "pid", clean.durations, tmp_path / "log")
        site = next((target / ".venv" / "lib").glob("python3.*/site-packages"))
        leftovers = [
            site / ".six.py.k1ll3d.repro-tmp",
            target / ".repro" / ".state.toml.k1ll3d.repro-tmp",
            target / ".repro" / ".bundle.0123abcd" / "bundle.toml",
        ]
        for path in leftovers:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"half written")
        rerun = run_repro("unpack", str(bundle), "--target", str(target), *UNPACK_ARGS)
        assert rerun.returncode == 0, rerun.stderr.decode()
        assert tree_differences(tree(target), clean.tree) == []
    finally:
        shutil.rmtree(target, ignore_errors=True)


def record_mismatches(site: Path) -> list[str]:
    """Files each installed distribution's RECORD lists that are missing or differ."""
    out = []
    for record in site.glob("*.dist-info/RECORD"):
        for line in record.read_text().splitlines():
            path, _, rest = line.partition(",")
            digest = rest.partition(",")[0]
            if not digest.startswith("sha256=") or "__pycache__" in path:
                continue  # a bytecode cache is rewritten when its source changes
            file = (site / path).resolve()
            if not file.is_file():
                out.append(f"{path}: missing")
                continue
            data = hashlib.sha256(file.read_bytes()).digest()
            if base64.urlsafe_b64encode(data).rstrip(b"=").decode() != digest[7:]:
                out.append(f"{path}: differs")
    return sorted(out)


def start_pip_unpack(
    bundle: Path, target: Path, log: Path, ready: Callable[[Path, Path], bool]
) -> subprocess.Popen[bytes]:
    """`repro unpack --installer pip`, once `ready(site-packages, bin)` says the venv
    step's ensurepip has got far enough."""
    argv = [sys.executable, "-m", "repro", "unpack", str(bundle), "--target", str(target)]
    argv += [*UNPACK_ARGS, "--installer", "pip"]
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=stderr, env=_env({}), start_new_session=True
        )
    lib, bin_dir = target / ".venv" / "lib", target / ".venv" / "bin"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        for site in lib.glob("python3.*/site-packages"):
            if ready(site, bin_dir):
                return proc
        time.sleep(0.001)
    proc.kill()
    pytest.fail(f"ensurepip was never seen that far (exit {proc.wait()}):\n{log.read_text()}")


def writing_a_package(site: Path, bin_dir: Path) -> bool:
    return any(site.glob("*/__init__.py"))


def pip_unpacked_not_finished(site: Path, bin_dir: Path) -> bool:
    """pip's files and dist-info are in place; it has not yet compiled them, written its
    scripts (bin/pip) and its own RECORD."""
    return any(site.glob("pip-*.dist-info/RECORD")) and not (bin_dir / "pip").exists()


def test_a_pid_kill_ends_the_installer_and_what_it_started(bundle: Path, tmp_path: Path) -> None:
    """A SIGKILL to repro's PID alone does not reach its children: `python -m venv` and
    the pip its ensurepip runs went on writing into the venv after repro was gone (while
    a rerun could be rebuilding it). Tethered, they end with repro."""
    target = tmp_path / "pip-target"
    proc = start_pip_unpack(bundle, target, tmp_path / "killed.log", writing_a_package)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert installers_left(target) == []


def test_a_kill_while_ensurepip_unpacks_pip_is_rebuilt_not_kept(
    bundle: Path, tmp_path: Path
) -> None:
    """The kill of the issue: `--installer pip` makes the venv with `python -m venv`,
    whose ensurepip runs pip; killed (the group) once pip's files and metadata are in
    the venv and before pip has finished (no bin/pip yet), the rerun's ensurepip found
    pip "already satisfied", and unpack exited 0 with pip half installed. Now the rerun
    removes the unfinished venv and builds it again: bin/pip is there and every
    installed file matches its RECORD."""
    target = tmp_path / "pip-target"
    log = tmp_path / "killed.log"
    proc = start_pip_unpack(bundle, target, log, pip_unpacked_not_finished)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, log.read_text()
    assert installers_left(target) == []
    state = toml_loads((target / ".repro" / "state.toml").read_text())
    assert state.get("started") == "venv", state

    rerun = run_repro("unpack", str(bundle), "--target", str(target), *UNPACK_ARGS,
                      "--installer", "pip")  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr.decode()
    verify = run_repro("verify", str(target))
    assert verify.returncode == 0, verify.stdout.decode() + verify.stderr.decode()
    site = next((target / ".venv" / "lib").glob("python3.*/site-packages"))
    assert record_mismatches(site) == ["six.py: differs"]  # the hand patch, nothing else
    assert (target / ".venv" / "bin" / "pip").is_file()
