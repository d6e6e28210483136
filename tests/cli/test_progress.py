"""Progress of pack's writing and unpack's extraction: files and bytes, through a sink.

The library tells a ProgressSink how many files and bytes will be written, then each
member's size as it lands; the CLI draws that as a bar on a terminal only. Real packs
of a real workspace (a venv with six, patched; its wheel in the vault, written into its
hole or streamed through gzip), real extraction, and the real CLI under a
pseudo-terminal (`pty`) and under pipes.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from repro.archive.extract import extract_archive
from repro.install.read.bundle import read_bundle
from repro.snapshot.pack import PackOptions, pack
from tests.conftest import REPO_ROOT
from tests.support.progress import Recorder
from tests.support.venvs import find_python

pytestmark = pytest.mark.slow


def _payload(bundle: Path) -> tuple[int, int]:
    """Bytes and count of the archive's regular files, as tar reads them."""
    with tarfile.open(bundle) as archive:
        files = [member for member in archive.getmembers() if member.isfile()]
    return sum(member.size for member in files), len(files)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("progress") / "ws"
    root.mkdir()
    venv = root / ".venv"
    for argv in (
        [str(find_python("3.11")), "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "six==1.16.0"],
    ):
        subprocess.run(argv, check=True, capture_output=True, timeout=600)
    (six,) = venv.glob("lib/python3.11/site-packages/six.py")
    six.write_text(six.read_text() + "PATCHED = 1\n")
    (root / "bench").mkdir()
    (root / "bench" / "results.json").write_bytes(b'{"tokens_per_s": 1}\n' * 5000)
    (root / "repro.toml").write_text('[files]\ninclude = ["bench/*"]\n')
    return root


@pytest.fixture(scope="module")
def bundle(workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("progress-bundle") / "demo-1.tar"
    pack(PackOptions(source=workspace, output=out, name="demo", version="1", wheels="all"))
    return out


@pytest.mark.parametrize("compression", ["none", "gz"])
def test_pack_reports_every_members_bytes(
    workspace: Path, tmp_path: Path, compression: str
) -> None:
    recorder = Recorder()
    out = tmp_path / ("b.tar" if compression == "none" else "b.tar.gz")
    options = PackOptions(
        source=workspace,
        output=out,
        name="demo",
        version="1",
        wheels="all",
        compression=compression,  # type: ignore[arg-type]
    )
    result = pack(options, writing=recorder)
    payload, files = _payload(out)
    assert result.vault_wheels  # six's wheel: a hole filled in, or streamed through gzip
    assert sum(recorder.advanced) == payload
    assert len(recorder.advanced) == files
    ((total_bytes, total_files),) = recorder.started
    # told ahead: every member's bytes but those made from the others' digests once
    # they are written (the lock files that list the wheels' sha256, the manifest)
    with tarfile.open(out) as archive:
        made = [
            archive.getmember(f"demo-1/{rel}").size
            for rel in ("env/pylock.toml", "env/vault.toml", "MANIFEST.sha256")
        ]
    assert (total_bytes, total_files) == (payload - sum(made), files - 1)


def test_extraction_reports_every_members_bytes(bundle: Path, tmp_path: Path) -> None:
    recorder = Recorder()
    extract_archive(bundle, tmp_path / "x", source_name=str(bundle), progress=recorder)
    payload, files = _payload(bundle)
    assert recorder.started == [(payload, files)]
    assert sum(recorder.advanced) == payload
    assert len(recorder.advanced) == files


def test_a_stream_has_no_total_but_every_byte_is_reported(bundle: Path, tmp_path: Path) -> None:
    recorder = Recorder()
    read_fd, write_fd = os.pipe()

    def feed() -> None:
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(bundle.read_bytes())

    feeder = threading.Thread(target=feed)
    feeder.start()
    with os.fdopen(read_fd, "rb") as stream:
        extract_archive(stream, tmp_path / "x", source_name="-", progress=recorder)
    feeder.join()
    payload, files = _payload(bundle)
    assert recorder.started == [(0, 0)]
    assert sum(recorder.advanced) == payload
    assert len(recorder.advanced) == files


def test_read_bundle_passes_the_extraction_on(bundle: Path, tmp_path: Path) -> None:
    recorder = Recorder()
    with read_bundle(str(bundle), tmp_path, progress=recorder) as (directory, info):
        assert info.name == "demo" and directory.parent == tmp_path
        assert sum(recorder.advanced) == _payload(bundle)[0]
        assert (directory / "MANIFEST.sha256").is_file()
    assert not directory.exists()
    assert list(tmp_path.iterdir()) == []  # the staging directory and its lock are gone


# --- the bar, on a terminal only ----------------------------------------------------------


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update({"TERM": "xterm-256color", "COLUMNS": "120"})
    return env


def _on_a_terminal(*args: str) -> tuple[int, str]:
    """The real CLI with stdout and stderr on a pseudo-terminal: its exit status and
    everything the terminal received."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "repro", *args],
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
        env=_env(),
    )
    os.close(terminal)
    received = bytearray()
    while True:
        ready, _, _ = select.select([controller], [], [], 600)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the terminal's last writer has gone
            break
        if not chunk:
            break
        received += chunk
    os.close(controller)
    return proc.wait(timeout=60), received.decode(errors="replace")


def _through_pipes(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "repro", *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
        check=False,
    )


def test_pack_draws_a_bar_on_a_terminal_only(workspace: Path, tmp_path: Path) -> None:
    args = ("pack", str(workspace), "--name", "demo", "--version", "1", "--wheels", "all")
    _, files = _payload_of_pack(workspace, tmp_path)
    status, screen = _on_a_terminal(*args, "-o", str(tmp_path / "tty.tar"))
    assert status == 0, screen
    bar = f"writing {files - 1} files"  # the bar's label: members before the manifest
    assert bar in screen
    assert "B/s" in screen  # and its rate
    piped = _through_pipes(*args, "-o", str(tmp_path / "pipe.tar"))
    assert piped.returncode == 0, piped.stderr
    assert "pack: writing" in piped.stderr  # the step is said, in words
    assert bar not in piped.stderr + piped.stdout
    quiet, screen = _on_a_terminal(*args, "-q", "-o", str(tmp_path / "quiet.tar"))
    assert quiet == 0 and bar not in screen


def _payload_of_pack(workspace: Path, tmp_path: Path) -> tuple[int, int]:
    out = tmp_path / "reference.tar"
    pack(PackOptions(source=workspace, output=out, name="demo", version="1", wheels="all"))
    return _payload(out)


def test_unpack_draws_a_bar_on_a_terminal_only(bundle: Path, tmp_path: Path) -> None:
    _, files = _payload(bundle)
    args = ("unpack", str(bundle), "--offline", "--cpu", "--no-smoke")
    status, screen = _on_a_terminal(*args, "--target", str(tmp_path / "tty"))
    assert status == 0, screen
    assert f"extracting {files} files" in screen
    assert "B/s" in screen
    piped = _through_pipes(*args, "--target", str(tmp_path / "pipe"))
    assert piped.returncode == 0, piped.stderr
    assert "extracting" not in piped.stderr + piped.stdout
