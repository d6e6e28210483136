"""Terminal escapes from a bundle never reach the terminal raw.

A real `repro pack --wheels all` bundle, edited and re-manifested so that `repro check`
passes: a unit whose Description=, ExecStartPre= and ExecStart= hold ESC sequences (clear
the screen, retitle the window, a C1 CSI), a launch command whose name and shell line
hold them, and a file and a unit named with one. The real `repro unpack`, `inspect` and
`check` run on it; not one ESC (0x1b) nor C1 control byte may be in what they print,
and the sequences are shown escaped (`\\x1b[2J`), so the operator still sees them.
"""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import tomli_w

from repro._toml import loads as toml_loads
from repro.bundle.manifesttree import write_manifest
from tests.conftest import REPO_ROOT, read_pty
from tests.e2e.test_hostile_sources import packed  # noqa: F401 - the shared packed bundle
from tests.support.run import run_repro

pytestmark = pytest.mark.slow

CLEAR = "\x1b[2J"  # erase the screen
TITLE = "\x1b]0;owned\x07"  # set the window title (OSC ... BEL)
CSI = "\x9b2J"  # the same as CLEAR, as one C1 character
UNIT = (
    "[Unit]\n"
    f"Description=demo {CLEAR}{TITLE}\n"
    "[Service]\n"
    f"ExecStartPre=/bin/true {TITLE}\n"
    f"ExecStart=/bin/echo {CLEAR}cleared{CSI}\n"
    "[Install]\n"
    "WantedBy=multi-user.target\n"
)


def _raw_controls(data: bytes) -> list[str]:
    """ESC bytes, and C1 controls (U+0080..U+009F, as UTF-8), in what was printed."""
    text = data.decode("utf-8", "replace")
    return [repr(c) for c in text if c == "\x1b" or "\x80" <= c <= "\x9f"]


def _edited(packed: Path, into: Path, edit: Callable[[Path], None]) -> Path:  # noqa: F811
    bundle = into / packed.name
    shutil.copytree(packed, bundle)
    edit(bundle)
    write_manifest(bundle)
    checked = run_repro("check", str(bundle / "MANIFEST.sha256"))
    assert checked.returncode == 0, checked.stderr.decode()
    return bundle


def _unit_and_launch(bundle: Path) -> None:
    (bundle / "services").mkdir(exist_ok=True)
    (bundle / "services" / "llm.service").write_text(UNIT)
    info = toml_loads((bundle / "bundle.toml").read_text())
    info["launch"] = {
        "commands": [
            {
                "name": f"srv{CLEAR}",
                "engine": "openai",
                "port": 8000,
                "shell": f"python -m http.server 8000 # {CLEAR}{TITLE}{CSI}",
            }
        ]
    }
    (bundle / "bundle.toml").write_text(tomli_w.dumps(info))


def _file_named_with_escape(bundle: Path) -> None:
    (bundle / "files").mkdir(exist_ok=True)
    (bundle / "files" / f"notes{CLEAR}.txt").write_text("notes\n")


def _unit_named_with_escape(bundle: Path) -> None:
    (bundle / "services").mkdir(exist_ok=True)
    (bundle / "services" / f"evil{CLEAR}.service").write_text(UNIT)


def _assert_clean(result: subprocess.CompletedProcess[bytes]) -> str:
    for name, stream in (("stdout", result.stdout), ("stderr", result.stderr)):
        assert _raw_controls(stream) == [], f"{name}: {stream.decode('utf-8', 'replace')}"
    printed = (result.stdout + result.stderr).decode()
    assert "Traceback" not in printed
    return printed


def test_unpack_shows_unit_and_launch_escapes_escaped(packed: Path, tmp_path: Path) -> None:  # noqa: F811
    bundle = _edited(packed, tmp_path, _unit_and_launch)
    argv = ["unpack", str(bundle), "--target", str(tmp_path / "t"), "--cpu", "--offline",
            "--no-exec", "--install-units"]  # fmt: skip
    # A control character in unit text is refused (repro.units.text), named escaped.
    result = run_repro(*argv)
    printed = _assert_clean(result)
    assert result.returncode == 2, printed
    assert "services/llm.service:2: holds U+001B" in printed, printed
    assert not (tmp_path / "t").exists()
    # Without the unit, the launch command's escapes are shown escaped.
    (bundle / "services" / "llm.service").unlink()
    write_manifest(bundle)
    result = run_repro(*argv)
    printed = _assert_clean(result)
    assert result.returncode == 0, printed
    assert "server srv\\x1b[2J (port 8000)" in printed  # the launch command's name
    # and its shell line (the BEL that ends the title sequence is dropped by rich)
    assert "# \\x1b[2J\\x1b]0;owned\\x9b2J" in printed


def test_inspect_and_check_show_escapes_escaped(packed: Path, tmp_path: Path) -> None:  # noqa: F811
    bundle = _edited(packed, tmp_path / "a", _unit_and_launch)
    for args in ([], ["--json"]):
        inspected = run_repro("inspect", str(bundle), *args)
        assert inspected.returncode == 0, _assert_clean(inspected)
    unit_named = _edited(packed, tmp_path / "u", _unit_named_with_escape)
    inspected = run_repro("inspect", str(unit_named))
    printed = _assert_clean(inspected)
    assert inspected.returncode == 0, printed
    assert "evil\\x1b[2J.service" in printed  # the units row
    named = _edited(packed, tmp_path / "b", _file_named_with_escape)
    checked = run_repro("check", str(named), "-v")
    printed = _assert_clean(checked)
    assert checked.returncode == 0, printed
    assert "notes\\x1b[2J.txt" in printed
    # the same file, unlisted: check fails naming it
    (named / "files" / f"more{CLEAR}.txt").write_text("more\n")
    unlisted = run_repro("check", str(named))
    printed = _assert_clean(unlisted)
    assert unlisted.returncode == 1 and "more\\x1b[2J.txt" in printed


def test_a_unit_named_with_an_escape_is_refused_escaped(packed: Path, tmp_path: Path) -> None:  # noqa: F811
    bundle = _edited(packed, tmp_path, _unit_named_with_escape)
    target = tmp_path / "t"
    result = run_repro(
        "unpack", str(bundle), "--target", str(target), "--cpu", "--offline", "--no-smoke"
    )
    printed = _assert_clean(result)
    assert result.returncode == 1, printed
    assert "services/evil\\x1b[2J.service" in printed
    assert not target.exists()


def test_on_a_terminal_too(packed: Path, tmp_path: Path) -> None:  # noqa: F811
    """With stdout and stderr a terminal (rich's own colours on), the only ESC bytes are
    rich's styles (`ESC[...m`): none of the bundle's sequences."""
    bundle = _edited(packed, tmp_path, _unit_named_with_escape)
    controller, terminal = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "repro", "inspect", str(bundle)],
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
        env=env,
    )
    os.close(terminal)
    seen = read_pty(controller)
    assert proc.wait(timeout=120) == 0, seen.decode("utf-8", "replace")
    os.close(controller)
    text = seen.decode("utf-8", "replace")
    assert "\x1b[2J" not in text and "\x1b]0;" not in text and "\x9b" not in text
    assert "\\x1b[2J" in text
