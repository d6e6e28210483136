"""repro starts a target interpreter only once its venv's own files are the ones the venv
step made (repro.install.venv.guard), and a streamed install's `adopt` never replaces them.

The attack: `python -I -S` reads the venv's `pyvenv.cfg` before anything else; a `home =`
pointing at a directory that holds `lib/python3.11/os.py` and an `encodings` package
makes the interpreter import that package at start-up. Here the hostile `encodings`
writes a marker file with the builtin `posix` module (nothing else is importable that
early): the attack is shown to work on its own (`test_the_attack_runs_code_under_i_s`),
then every repro command that would start the tampered venv's interpreter is shown to
refuse before it does, the marker never written. The wheels' own refusal to write these
paths (repro.wheel.audit) is a separate wall: here the venv is changed directly,
after the venv step, so this wall is tested alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from repro.errors import EXIT_INSTALL, InstallError
from repro.install.state import BundleIdentity, UnpackState, load_state
from repro.install.venv.installer import create_venv
from repro.install.venv.site import read_installed
from repro.install.venv.streamed import StagedVenv, adopt
from repro.install.venv.guard import (
    record_venv,
    recorded,
    trusted_interpreter,
    venv_differences,
)
from tests.conftest import REPO_ROOT, unpacked_venv
from tests.e2e.test_kill_anywhere import (
    UNPACK_ARGS,
    bundle,  # noqa: F401 - the fixture
)
from tests.support.run import run_repro
from tests.support.stop_at import python_argv
from tests.support.venvs import find_python

PY = "3.11"


def plant_hostile_home(venv: Path, marker: Path) -> Path:
    """A standard library of the attacker's inside the venv: `os.py` (the landmark the
    interpreter looks for from `home`) and an `encodings` that writes `marker`; the
    venv's pyvenv.cfg pointed at it. Returns the hostile home."""
    root = venv / "lib" / "hostile"
    stdlib = root / "lib" / f"python{PY}"
    (stdlib / "encodings").mkdir(parents=True)
    (root / "bin").mkdir()
    (stdlib / "os.py").write_text("")
    (stdlib / "encodings" / "__init__.py").write_text(
        "import posix\n"
        f"fd = posix.open({str(marker)!r}, posix.O_WRONLY | posix.O_CREAT, 0o644)\n"
        "posix.write(fd, b'hostile encodings ran')\n"
        "posix.close(fd)\n"
    )
    cfg = venv / "pyvenv.cfg"
    lines = [
        f"home = {root / 'bin'}" if line.startswith("home") else line
        for line in cfg.read_text().splitlines()
    ]
    cfg.write_text("\n".join(lines) + "\n")
    return root / "bin"


def _made(tmp_path: Path) -> tuple[Path, Path]:
    """A real venv made as the venv step makes it, and a target whose state.toml holds
    the venv step's record of it (as `repro unpack` writes it)."""
    target = tmp_path / "target"
    venv = target / "venv"
    target.mkdir()
    create_venv(find_python(PY), venv, "vault")
    state = UnpackState(target, BundleIdentity("demo", "1", "0" * 64))
    state.mark_done("venv", installer="vault", made=record_venv(venv).to_facts())
    return target, venv


def test_the_attack_runs_code_under_i_s(tmp_path: Path) -> None:
    """What the guard stands against, shown to work: the marker is written by a bare
    `python -I -S -c pass` of the tampered venv."""
    _target, venv = _made(tmp_path)
    marker = tmp_path / "marker"
    plant_hostile_home(venv, marker)
    subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-S", "-c", "pass"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert marker.read_bytes() == b"hostile encodings ran"


def _tamper_home(venv: Path, marker: Path) -> str:
    plant_hostile_home(venv, marker)
    return "pyvenv.cfg"


def _tamper_cfg_bytes(venv: Path, marker: Path) -> str:
    with (venv / "pyvenv.cfg").open("a") as cfg:  # home still outside: only the record sees it
        cfg.write("include-system-site-packages = true\n")
    return "pyvenv.cfg"


def _replace_python_by_a_file(venv: Path, marker: Path) -> str:
    python = venv / "bin" / "python"
    python.unlink()
    python.write_text(f"#!/bin/sh\necho ran > {marker}\n")
    python.chmod(0o755)
    return "bin/python"


def _relink_python(venv: Path, marker: Path) -> str:
    script = venv / "lib" / "hostile-python"
    script.write_text(f"#!/bin/sh\necho ran > {marker}\n")
    script.chmod(0o755)
    python = venv / "bin" / "python"
    python.unlink()
    python.symlink_to(script)
    return "bin/python"


def _add_a_python(venv: Path, marker: Path) -> str:
    (venv / "bin" / "python3.99").write_text(f"#!/bin/sh\necho ran > {marker}\n")
    return "bin/python3.99"


def _remove_cfg(venv: Path, marker: Path) -> str:
    (venv / "pyvenv.cfg").unlink()
    return "pyvenv.cfg"


TAMPERINGS = {
    "home into the venv": _tamper_home,
    "other pyvenv.cfg bytes": _tamper_cfg_bytes,
    "bin/python a file": _replace_python_by_a_file,
    "bin/python linked elsewhere": _relink_python,
    "a new bin/python*": _add_a_python,
    "pyvenv.cfg removed": _remove_cfg,
}


@pytest.mark.parametrize("how", list(TAMPERINGS))
def test_a_venv_changed_after_the_venv_step_is_refused_before_it_runs(
    tmp_path: Path, how: str
) -> None:
    target, venv = _made(tmp_path)
    # as made: trusted, and the interpreter it hands out answers
    interpreter = trusted_interpreter(target, venv)
    assert interpreter == venv / "bin" / "python"
    assert read_installed(interpreter) == {}
    marker = tmp_path / "marker"
    changed = TAMPERINGS[how](venv, marker)
    with pytest.raises(InstallError) as caught:
        trusted_interpreter(target, venv)
    assert f"{venv / changed}: expected " in caught.value.message
    assert "refusing to start its interpreter" in caught.value.message
    state = load_state(target)
    assert state is not None
    assert changed in [d.path for d in venv_differences(venv, recorded(state))]
    assert not marker.exists()


def test_a_state_written_before_the_record_is_read_and_checked_by_the_rules(
    tmp_path: Path,
) -> None:
    """A target unpacked by an earlier repro: no record in its venv step's facts. It is
    read as before; the rules that hold for every venv still refuse a `home` inside it."""
    target = tmp_path / "target"
    venv = target / "venv"
    target.mkdir()
    create_venv(find_python(PY), venv, "vault")
    UnpackState(target, BundleIdentity("demo", "1", "0" * 64)).mark_done(
        "venv", installer="vault", startup_files=[]
    )
    state = load_state(target)
    assert state is not None and state.made_venv is None
    assert trusted_interpreter(target, venv) == venv / "bin" / "python"
    marker = tmp_path / "marker"
    plant_hostile_home(venv, marker)
    with pytest.raises(InstallError, match="home = the base interpreter's directory"):
        trusted_interpreter(target, venv)
    assert not marker.exists()


# --- adopt: the staged tree of a streamed install never replaces the venv's own files --


def _staged(tmp_path: Path, venv: Path, files: dict[str, str]) -> StagedVenv:
    prefix = tmp_path / "staged"
    for rel, text in files.items():
        (prefix / rel).parent.mkdir(parents=True, exist_ok=True)
        (prefix / rel).write_text(text)
    layout = {"purelib": f"lib/python{PY}/site-packages", "scripts": "bin"}
    layout["platlib"] = layout["purelib"]
    return StagedVenv(find_python(PY), venv, prefix, layout, (), 0.0)


ADOPT_REFUSALS = {
    "pyvenv.cfg": "the venv's own file",
    "bin/python": "the venv's own file",
    "bin/python3": "the venv's own file",
    "bin/activate": "the venv's own file",
    "bin/python3.99": "the venv's own file",
    "lib64": "a file would replace a symbolic link",
    f"lib/python{PY}/site-packages": "a file would replace a directory",
}


@pytest.mark.parametrize("rel", list(ADOPT_REFUSALS))
def test_adopt_refuses_to_replace_what_the_venv_step_made(tmp_path: Path, rel: str) -> None:
    target, venv = _made(tmp_path)
    before = {p.relative_to(venv).as_posix(): _what(p) for p in sorted(venv.rglob("*"))}
    files = {rel: "hostile\n"}
    if "site-packages" not in rel:  # and a harmless file beside it, which must not move
        files[f"lib/python{PY}/site-packages/fine.py"] = "x = 1\n"
    staged = _staged(tmp_path, venv, files)
    with pytest.raises(InstallError) as caught:
        adopt(staged, venv, staged.layout)
    assert f"{venv / rel}: {ADOPT_REFUSALS[rel]}" in caught.value.message
    assert "nothing was moved" in caught.value.message
    after = {p.relative_to(venv).as_posix(): _what(p) for p in sorted(venv.rglob("*"))}
    assert after == before  # not even the harmless file moved
    assert trusted_interpreter(target, venv) == venv / "bin" / "python"


def test_adopt_refuses_a_link_in_the_staged_tree(tmp_path: Path) -> None:
    """A link that appeared inside the staged prefix (repro stages none) is not moved."""
    _target, venv = _made(tmp_path)
    staged = _staged(tmp_path, venv, {f"lib/python{PY}/site-packages/fine.py": "x = 1\n"})
    outside = tmp_path / "attacker"
    outside.mkdir()
    (staged.prefix / f"lib/python{PY}/site-packages/evil").symlink_to(outside)
    with pytest.raises(InstallError, match="a link in the staged files"):
        adopt(staged, venv, staged.layout)
    assert not (venv / f"lib/python{PY}/site-packages/evil").exists()
    assert not (venv / f"lib/python{PY}/site-packages/fine.py").exists()


def test_adopt_moves_a_clean_staged_tree(tmp_path: Path) -> None:
    target, venv = _made(tmp_path)
    files = {f"lib/python{PY}/site-packages/fine.py": "x = 1\n", "bin/tool": "#!/bin/sh\n"}
    adopt(_staged(tmp_path, venv, files), venv, _staged(tmp_path, venv, {}).layout)
    assert (venv / f"lib/python{PY}/site-packages/fine.py").read_text() == "x = 1\n"
    assert (venv / "bin/tool").is_file()
    assert trusted_interpreter(target, venv) == venv / "bin" / "python"


def _what(path: Path) -> str:
    if path.is_symlink():
        return f"link {os.readlink(path)}"
    return "dir" if path.is_dir() else f"file {path.read_bytes()!r}"


# --- the real CLI: verify, unpack again, unpatch, and a run changed between steps --------


def _unpacked(bundle: Path, target: Path) -> None:  # noqa: F811 - not the fixture
    result = run_repro("unpack", str(bundle), "--target", str(target), *UNPACK_ARGS)
    assert result.returncode == 0, result.stderr.decode()


@pytest.mark.slow
def test_commands_on_a_tampered_target_refuse_and_never_start_it(
    bundle: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    target = tmp_path / "demo"
    _unpacked(bundle, target)
    venv = unpacked_venv(target)
    state = load_state(target)
    assert state is not None and isinstance(state.made_venv, dict)
    assert set(state.made_venv) >= {"pyvenv.cfg", "bin/python"}
    cfg = (venv / "pyvenv.cfg").read_bytes()
    marker = tmp_path / "marker"
    plant_hostile_home(venv, marker)

    verify = run_repro("verify", str(target))
    out = verify.stdout.decode() + verify.stderr.decode()
    assert verify.returncode != 0, out
    assert "pyvenv.cfg" in out and "home = " in out
    assert not marker.exists()

    again = run_repro("unpack", str(bundle), "--target", str(target), *UNPACK_ARGS)
    err = again.stderr.decode()
    assert again.returncode == EXIT_INSTALL and "pyvenv.cfg" in err, err
    assert "refusing to start its interpreter" in err
    assert "Traceback" not in err
    assert not marker.exists()

    unpatch = run_repro("unpatch", str(target))
    err = unpatch.stderr.decode()
    assert unpatch.returncode == EXIT_INSTALL, err
    assert "refusing to start its interpreter" in err and "Traceback" not in err
    assert not marker.exists()

    # the venv's own file as the venv step made it: trusted again
    (venv / "pyvenv.cfg").write_bytes(cfg)
    verify = run_repro("verify", str(target))
    assert verify.returncode == 0, verify.stdout.decode() + verify.stderr.decode()
    assert not marker.exists()


def _stopped_at(
    argv: list[str], event: str, log: Path, stdin: Path | None
) -> subprocess.Popen[bytes]:
    """`repro unpack` stopped (SIGSTOP, tests/support/stop_at.py) right after `event`."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    with log.open("wb") as stderr, stdin.open("rb") if stdin else open(os.devnull, "rb") as feed:
        proc = subprocess.Popen(
            [sys.executable, *python_argv(*argv, stop_at=event)],
            stdin=feed,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        pid, status = os.waitpid(proc.pid, os.WUNTRACED | os.WNOHANG)
        if pid and os.WIFSTOPPED(status):
            return proc
        if pid:
            pytest.fail(f"unpack ended before {event}:\n{log.read_text()}")
        time.sleep(0.005)
    pytest.fail(f"unpack never stopped at {event}:\n{log.read_text()}")


@pytest.mark.slow
@pytest.mark.parametrize("source", ["file", "stream"])
def test_a_venv_changed_between_the_venv_step_and_the_install_is_refused(
    bundle: Path,  # noqa: F811
    tmp_path: Path,
    source: str,
) -> None:
    """Stopped right after the venv step, the venv's pyvenv.cfg is pointed at a hostile
    standard library: the install step (the vault installer, or the adoption of what
    streamed in) refuses before it starts the interpreter, exit 3; the next run rebuilds
    the unfinished venv and succeeds, the marker never written."""
    target = tmp_path / "demo"
    log = tmp_path / "stderr"
    name = "-" if source == "stream" else str(bundle)
    argv = ["unpack", name, "--target", str(target), *UNPACK_ARGS, "-v"]
    proc = _stopped_at(argv, "venv done", log, bundle if source == "stream" else None)
    marker = tmp_path / "marker"
    plant_hostile_home(unpacked_venv(target), marker)
    os.kill(proc.pid, signal.SIGCONT)
    assert proc.wait(timeout=600) == EXIT_INSTALL, log.read_text()
    err = log.read_text()
    assert "refusing to start its interpreter" in err and "pyvenv.cfg" in err, err
    assert "Traceback" not in err
    assert not marker.exists()
    with tempfile.TemporaryDirectory() as temp:
        feed = bundle.read_bytes() if source == "stream" else None
        rerun = run_repro(*argv[:-1], input=feed, cwd=Path(temp))
    assert rerun.returncode == 0, rerun.stderr.decode()
    assert not marker.exists()
    verify = run_repro("verify", str(target))
    assert verify.returncode == 0, verify.stdout.decode() + verify.stderr.decode()


def test_a_new_venv_that_breaks_the_rules_is_not_recorded(tmp_path: Path) -> None:
    """The record is taken right after the venv step: a venv that is wrong already (a
    `python -m venv` run over a directory someone prepared) is refused, not recorded."""
    venv = tmp_path / "venv"
    create_venv(find_python(PY), venv, "vault")
    marker = tmp_path / "marker"
    plant_hostile_home(venv, marker)
    with pytest.raises(InstallError, match="refusing the new venv"):
        record_venv(venv)
    assert not marker.exists()
