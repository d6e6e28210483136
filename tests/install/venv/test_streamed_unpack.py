"""`repro pack -o - | repro unpack -`: the vault installer at work while the bundle
streams in (repro.install.venv.streamed), through the real CLI.

The bundle is test_kill_anywhere's (`repro pack --wheels all` of a workspace with real
PyPI wheels, pip and setuptools, a wheel only the vault holds, hand patches, a unit and
bench files), fed to `repro unpack -` through a pipe as `| ssh box repro unpack -` does.
What a streamed unpack leaves must be what an unpack of the same bundle as a file
leaves at the same target, file for file and mode for mode; a bad stream must leave
nothing; a kill anywhere, then the same command again, must end there too.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomli_w

from repro._toml import loads as toml_loads
from repro.archive.writer import write_directory
from repro.bundle.info import FORMAT_VERSION
from repro.bundle.layout import trailing_members
from repro.bundle.manifesttree import write_manifest
from repro.errors import EXIT_INSTALL, EXIT_INVALID
from tests.conftest import SIGINT_DEFAULT
from tests.e2e.test_kill_anywhere import (
    UNPACK_ARGS,
    _env,
    bundle,  # noqa: F401 - the fixture
    installers_left,
    tree,
)
from tests.support.run import run_repro
from tests.support.stop_at import python_argv
from tests.support.upgrades import differences as tree_differences
from tests.support.venvs import find_python

pytestmark = pytest.mark.slow

STATE = ".repro/state.toml"
STAGED_VENVS = "..repro-unpack-*.staging-venv"


def start_streamed(
    source: Path, target: Path, *extra: str, log: Path, stop_at: str | None = None
) -> subprocess.Popen[bytes]:
    """`repro unpack -` reading `source` from a pipe (fed by a thread), in its own
    process group, its stderr to `log`; stopped right after the event `stop_at`."""
    args = ("unpack", "-", "--target", str(target), *UNPACK_ARGS, *extra, "-v")
    # a terminal's SIGINT disposition, whatever this test run inherited (see there)
    argv = [sys.executable, "-c", SIGINT_DEFAULT, *python_argv(*args, stop_at=stop_at)]
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=_env({}),
            start_new_session=True,
        )

    def feed() -> None:
        assert proc.stdin is not None
        with (
            contextlib.suppress(BrokenPipeError, ValueError),
            proc.stdin,
            source.open("rb") as data,
        ):
            shutil.copyfileobj(data, proc.stdin, 1 << 20)

    threading.Thread(target=feed, daemon=True).start()
    return proc


def unpack_streamed(source: Path, target: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    """A whole streamed unpack; its stderr in the result."""
    with tempfile.TemporaryDirectory() as temp:
        log = Path(temp) / "stderr"
        proc = start_streamed(source, target, *extra, log=log)
        proc.wait(timeout=600)
        return subprocess.CompletedProcess(proc.args, proc.returncode, b"", log.read_bytes())


def install_facts(target: Path) -> dict[str, object]:
    facts: dict[str, object] = toml_loads((target / STATE).read_text())["facts"]["install"]
    return facts


def without_how(found: dict[str, str], target: Path) -> dict[str, str]:
    """The tree, its state.toml read with the install's `streamed` fact left out (the
    one thing that says how the venv was made)."""
    state = toml_loads((target / STATE).read_text())
    state["facts"]["install"].pop("streamed", None)
    return {**found, STATE: repr(state)}


@dataclass(frozen=True)
class Reference:
    target: Path  # every run that compares its tree unpacks here (scripts name it)
    tree: dict[str, str]


@pytest.fixture(scope="module")
def from_file(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Reference:  # noqa: F811
    """The tree an unpack of the bundle as a file leaves at the target."""
    target = tmp_path_factory.mktemp("streamed") / "demo"
    result = run_repro("unpack", str(bundle), "--target", str(target), *UNPACK_ARGS)
    assert result.returncode == 0, result.stderr.decode()
    assert "streamed" not in install_facts(target)
    found = without_how(tree(target), target)
    shutil.rmtree(target)
    return Reference(target, found)


def _assert_unpacked_streamed(result: subprocess.CompletedProcess[bytes], target: Path) -> None:
    """The unpack passed, installing while the bundle streamed in: no second copy of the
    wheels kept, no staging left beside the target."""
    assert result.returncode == 0, result.stderr.decode()
    assert "unpacked by repro while the bundle streamed in" in result.stderr.decode()
    assert install_facts(target)["streamed"] is True
    assert not (target / ".repro/bundle/env/wheels").exists()
    assert sorted(p.name for p in target.parent.iterdir()) == ["demo"]


def test_a_streamed_unpack_equals_an_unpack_of_the_file(
    bundle: Path,  # noqa: F811
    from_file: Reference,
) -> None:
    target = from_file.target
    try:
        _assert_unpacked_streamed(unpack_streamed(bundle, target), target)
        assert tree_differences(without_how(tree(target), target), from_file.tree) == []
        verify = run_repro("verify", str(target))
        assert verify.returncode == 0, verify.stdout.decode() + verify.stderr.decode()
    finally:
        shutil.rmtree(target, ignore_errors=True)


def test_keep_bundle_keeps_every_wheel_of_a_streamed_unpack(
    bundle: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    target = tmp_path / "demo"
    result = unpack_streamed(bundle, target, "--keep-bundle")
    assert result.returncode == 0, result.stderr.decode()
    assert install_facts(target)["streamed"] is True
    with tarfile.open(bundle) as archive:
        carried = sorted(
            Path(m.name).name for m in archive.getmembers() if "/env/wheels/" in m.name
        )
    kept = sorted(p.name for p in (target / ".repro/bundle/env/wheels").iterdir())
    assert kept == carried and len(kept) >= 4
    check = run_repro("check", str(target / ".repro/bundle/MANIFEST.sha256"))
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()


def _rewritten(
    source: Path,
    dest: Path,
    change: Callable[[Path], None],
    trailing: tuple[str, ...] = trailing_members(FORMAT_VERSION),
) -> Path:
    """The bundle extracted by tar, changed, its manifest made again and archived by
    repro's own writer (in the member order `trailing` gives): a bundle that verifies
    and says something else."""
    work = dest.parent / "rewrite"
    work.mkdir()
    subprocess.run(["tar", "xf", str(source), "-C", str(work)], check=True)
    (top,) = work.iterdir()
    change(top)
    (top / "MANIFEST.sha256").unlink()
    write_manifest(top)
    with dest.open("wb") as out:
        write_directory(top, out, top=top.name, mtime=0, trailing=trailing)
    return dest


def _six_wheel(top: Path) -> Path:
    (wheel,) = (top / "env/wheels").glob("six-*.whl")
    return wheel


def test_a_wheel_unlike_its_vault_entry_fails_the_same_streamed_or_not(
    bundle: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """six's wheel with a zip comment added (still a valid wheel, other bytes) and the
    manifest made again: verification passes, the vault list's sha256 does not. In
    format 5 that list (env/vault.toml) arrives after the wheels, which were unpacked
    into staging by then: it is checked before anything leaves staging, and the
    target is never made."""

    def change(top: Path) -> None:
        wheel = _six_wheel(top)
        data = bytearray(wheel.read_bytes())
        assert data[-2:] == b"\0\0"  # an end-of-central-directory with no comment
        data[-2:] = (4).to_bytes(2, "little")
        wheel.write_bytes(bytes(data) + b"edit")

    changed = _rewritten(bundle, tmp_path / "changed.tar", change)
    names = _member_names(changed)
    assert names.index("env/vault.toml") > max(
        i for i, n in enumerate(names) if n.startswith("env/wheels/")
    )
    (tmp_path / "s").mkdir()
    streamed = unpack_streamed(changed, tmp_path / "s" / "demo")
    from_file = run_repro(
        "unpack", str(changed), "--target", str(tmp_path / "f" / "demo"), *UNPACK_ARGS
    )
    for result in (streamed, from_file):
        err = result.stderr.decode()
        assert result.returncode == EXIT_INSTALL, err
        assert "six-1.16.0-py2.py3-none-any.whl: sha256" in err, err
        assert "is not the one env/vault.toml lists for six" in err, err
    assert list((tmp_path / "s").iterdir()) == []  # no target, no staging left


def _member_names(archive: Path) -> list[str]:
    """The files of `archive` in the order GNU tar reads them, below the top directory."""
    listing = subprocess.run(["tar", "-tf", str(archive)], capture_output=True, check=True)
    names = [line.split("/", 1)[1] for line in listing.stdout.decode().splitlines()]
    return [name for name in names if name and not name.endswith("/")]


def _as_format_3(top: Path) -> None:
    """bundle.toml said format 3 again: no [vault] names (env/vault.toml comes first)."""
    path = top / "bundle.toml"
    document = toml_loads(path.read_text())
    assert document.pop("format_version") == FORMAT_VERSION
    assert document.pop("vault")["wheels"]
    path.write_bytes(tomli_w.dumps({"format_version": 3, **document}).encode())


def test_a_format_3_stream_is_still_unpacked_while_it_streams_in(
    bundle: Path,  # noqa: F811
    from_file: Reference,
    tmp_path: Path,
) -> None:
    """A bundle of before: the lock files before the wheels, their digests checked as
    each wheel arrives; it unpacks streamed, to the tree an unpack of the file leaves."""
    old = _rewritten(bundle, tmp_path / "old.tar", _as_format_3, trailing=trailing_members(3))
    names = _member_names(old)
    assert names.index("env/vault.toml") < names.index(
        next(n for n in names if n.startswith("env/wheels/"))
    )
    target = from_file.target
    try:
        _assert_unpacked_streamed(unpack_streamed(old, target), target)
    finally:
        shutil.rmtree(target, ignore_errors=True)


def test_a_tampered_stream_is_refused_and_leaves_nothing(
    bundle: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """One byte of a vault wheel changed, the manifest left as it was: the wheel is
    unpacked into staging before the manifest arrives, and all of it goes when the
    manifest does not verify."""
    tampered = tmp_path / "demo-1.tar"
    with (
        tarfile.open(bundle) as source,
        tarfile.open(tampered, "w", format=tarfile.PAX_FORMAT) as out,
    ):
        for member in source.getmembers():
            stream = source.extractfile(member) if member.isfile() else None
            data = stream.read() if stream is not None else None
            if data is not None and "/env/wheels/idna-" in member.name:
                at = data.index(b"idna/__init__.py")  # a name in a local header
                data = data[:at] + b"I" + data[at + 1 :]
            out.addfile(member, io.BytesIO(data) if data is not None else None)
    parent = tmp_path / "targets"
    parent.mkdir()
    result = unpack_streamed(tampered, parent / "demo")
    err = result.stderr.decode()
    assert result.returncode == EXIT_INVALID, err
    assert "does not verify" in err and "mismatched: env/wheels/idna-3.7" in err, err
    assert list(parent.iterdir()) == []


# --- a kill anywhere in a streamed unpack, then the same command again -------------------


def _wait_for(proc: subprocess.Popen[bytes], seen: Callable[[], bool], log: Path) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if seen():
            return
        time.sleep(0.001)
    pytest.fail(f"never seen (exit {proc.poll()}):\n{log.read_text()}")


def _stopped(proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        pid, status = os.waitpid(proc.pid, os.WUNTRACED | os.WNOHANG)
        if pid and os.WIFSTOPPED(status):
            return
        if pid:
            pytest.fail(f"unpack ended before the stop:\n{log.read_text()}")
        time.sleep(0.002)
    pytest.fail(f"unpack never stopped:\n{log.read_text()}")


KILL_POINTS = {
    # a wheel's files are in the staged venv while the stream is still being read
    "wheels-staged": None,
    "verified": "verify done",
    "venv-done": "venv done",
    "adopting": "install started",
    "install-done": "install done",
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_kill_in_a_streamed_unpack_then_the_same_command_again(
    bundle: Path,  # noqa: F811
    from_file: Reference,
    point: str,
    tmp_path: Path,
) -> None:
    target = from_file.target
    parent = target.parent
    log = tmp_path / "killed.log"
    event = KILL_POINTS[point]
    try:
        proc = start_streamed(bundle, target, log=log, stop_at=event)
        if event is None:
            _wait_for(
                proc,
                lambda: any(parent.glob(f"{STAGED_VENVS}/lib/python*/site-packages/*")),
                log,
            )
        else:
            _stopped(proc, log)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL, log.read_text()
        assert installers_left(target) == []
        rerun = unpack_streamed(bundle, target)
        assert rerun.returncode == 0, rerun.stderr.decode()
        assert sorted(p.name for p in parent.iterdir()) == ["demo"]  # no staging left
        verify = run_repro("verify", str(target))
        assert verify.returncode == 0, verify.stdout.decode() + verify.stderr.decode()
        assert tree_differences(without_how(tree(target), target), from_file.tree) == []
        # killed before anything reached the target, the rerun streams again; after, it
        # installs as a resumed run does (or finds the install done)
        streamed = install_facts(target).get("streamed")
        assert streamed is (
            True if point in ("wheels-staged", "verified", "install-done") else None
        )
    finally:
        shutil.rmtree(target, ignore_errors=True)


def test_a_stream_for_another_python_is_refused_by_the_preflight_leaving_nothing(
    bundle: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """--python names a Python of another version: the streamed install finds no
    interpreter for its plan and stays off; the preflight refuses as it always has, and
    nothing is left, in staging or beside it."""
    parent = tmp_path / "p"
    parent.mkdir()
    other = find_python("3.12")
    result = unpack_streamed(bundle, parent / "demo", "--python", str(other))
    err = result.stderr.decode()
    assert result.returncode == EXIT_INVALID, err
    assert "the bundle needs Python 3.11" in err, err
    assert "while the bundle streamed in" not in err
    assert list(parent.iterdir()) == []


def test_ctrl_c_while_wheels_are_staged_ends_the_run_and_leaves_nothing(
    bundle: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """SIGINT (what Ctrl-C sends) while wheels are being unpacked into staging: exit 130,
    the wheels not yet started are dropped, and nothing is left beside the target."""
    parent = tmp_path / "p"
    parent.mkdir()
    log = tmp_path / "log"
    proc = start_streamed(bundle, parent / "demo", log=log)
    _wait_for(proc, lambda: any(parent.glob(f"{STAGED_VENVS}/lib/python*/site-packages/*")), log)
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=60) == 130, log.read_text()
    assert list(parent.iterdir()) == [], log.read_text()
