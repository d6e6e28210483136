"""Unit text read as systemd reads it (repro.units.text), with the real `systemd-analyze
verify` as the other reader.

Every command of a test unit runs a program under /nonexistent/, so `systemd-analyze
verify` names each command systemd would run ("Command /nonexistent/X is not
executable"); repro's list of commands (the "will run"/"would run" lines of unpack) must
be exactly that list, or the unit is refused with its file and line. A unit that hides
an ExecStartPre= from str.splitlines() (a form feed, U+2028, ...) or shows one that
systemd reads otherwise (NUL, a lone carriage return) is refused by `repro pack` (exit
2, the unit and line named) and, in a bundle changed and re-manifested, by `repro
unpack` before anything is written.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repro.errors import UnitTextError
from repro.units.command import unit_commands
from repro.units.text import check_unit_text, unit_lines
from tests.support.bundles import archive_tree, make_bundle_tree
from tests.support.run import run_repro

_NOT_EXECUTABLE = re.compile(r"Command (/nonexistent/\S+) is not executable")


def systemd_commands(unit: Path) -> list[str]:
    """The /nonexistent/ programs systemd-analyze verify says the unit would run."""
    tool = shutil.which("systemd-analyze")
    assert tool is not None, "systemd-analyze is expected here (Debian's systemd package)"
    proc = subprocess.run(
        [tool, "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return sorted(set(_NOT_EXECUTABLE.findall(proc.stdout + proc.stderr)))


def repro_commands(text: str) -> list[str]:
    programs = {command.split()[0].lstrip("-@+!:") for _, command in unit_commands(text)}
    return sorted(p for p in programs if p.startswith("/nonexistent/"))


def _write(tmp_path: Path, text: str, name: str = "h.service") -> Path:
    unit = tmp_path / name
    unit.write_bytes(text.encode("utf-8"))
    return unit


# --- what systemd reads, repro reads -------------------------------------------------

SAME_READING = [
    (
        "plain lines",
        "[Service]\nExecStartPre=/nonexistent/pre\nExecStart=/nonexistent/start\n",
    ),
    (
        "Windows line ends: \\r\\n is one line end",
        "[Service]\r\nExecStartPre=/nonexistent/pre\r\nExecStart=/nonexistent/start\r\n",
    ),
    (
        "a byte-order mark at the start is dropped",
        "\ufeff[Service]\nExecStart=/nonexistent/start\n",
    ),
    (
        "an odd run of backslashes continues the line",
        "[Service]\nExecStart=/nonexistent/start \\\n  --flag\nExecStartPost=/nonexistent/post\n",
    ),
    (
        "an even run does not: the next line is a setting of its own",
        "[Service]\nExecStart=/nonexistent/start x\\\\\nExecStartPre=/nonexistent/pre\n",
    ),
    (
        "a comment inside a continuation is skipped, the continuation goes on",
        "[Service]\nExecStart=/nonexistent/start \\\n# ExecStartPre=/nonexistent/no\n"
        "  ; also a comment\n  --flag\nExecStartPost=/nonexistent/post\n",
    ),
    (
        "a continuation at the end of the file is still parsed",
        "[Service]\nExecStart=/nonexistent/start\nExecStartPre=/nonexistent/pre \\",
    ),
    (
        "a backslash then blanks is no continuation",
        "[Service]\nExecStart=/nonexistent/start \\ \nExecStartPre=/nonexistent/pre\n",
    ),
    (
        "tabs and indented comments",
        "[Service]\n\tExecStart=\t/nonexistent/start\n  # ExecStartPre=/nonexistent/no\n",
    ),
    (
        "other sections' Exec lines run nothing; a socket's do",
        "[Unit]\nExecStart=/nonexistent/unit\n[Service]\nExecStart=/nonexistent/start\n"
        "[X-Extra]\nExecStartPre=/nonexistent/extra\n",
    ),
]


@pytest.mark.parametrize(("what", "text"), SAME_READING, ids=[c[0] for c in SAME_READING])
def test_repro_lists_the_commands_systemd_runs(tmp_path: Path, what: str, text: str) -> None:
    unit = _write(tmp_path, text)
    expected = systemd_commands(unit)
    assert expected, f"{what}: systemd-analyze named no command"
    assert repro_commands(text) == expected, what


def test_a_socket_s_commands_are_listed_as_systemd_reads_them(tmp_path: Path) -> None:
    text = "[Socket]\nListenStream=127.0.0.1:9\nExecStartPre=/nonexistent/sock \\\n x\n"
    unit = _write(tmp_path, text, "h.socket")
    (tmp_path / "h.service").write_text("[Service]\nExecStart=/bin/true\n")
    assert repro_commands(text) == systemd_commands(unit) == ["/nonexistent/sock"]


def test_the_continuation_is_joined_as_systemd_joins_it() -> None:
    (line,) = [u for u in unit_lines("[S]\nA=x \\\n   y\n", source="u") if u.kind == "assignment"]
    assert (line.number, line.key, line.value) == (2, "A", "x     y")
    assert line.raw == ("A=x \\\n", "   y\n")


# --- what systemd reads otherwise: refused, with the file and line ---------------------

# (name, character, unit text with {c}); the hidden command is on line 3 and
# systemd-analyze names /nonexistent/hidden, which str.splitlines() would not show.
SPLIT_BY_PYTHON = (
    "[Service]\nExecStart=/bin/true\nX-Note=x{c}[X-Hidden]\nExecStartPre=/nonexistent/hidden\n"
)
SPLIT_BY_SYSTEMD = (
    "[Service]\nExecStart=/bin/true\nEnvironment=A=1{c}ExecStartPre=/nonexistent/hidden\n"
)
HIDDEN = [
    ("NUL", "\x00", SPLIT_BY_SYSTEMD),
    ("carriage return alone", "\r", SPLIT_BY_SYSTEMD),
    ("form feed", "\x0c", SPLIT_BY_PYTHON),
    ("vertical tab", "\x0b", SPLIT_BY_PYTHON),
    ("file separator", "\x1c", SPLIT_BY_PYTHON),
    ("group separator", "\x1d", SPLIT_BY_PYTHON),
    ("record separator", "\x1e", SPLIT_BY_PYTHON),
    ("next line", "\x85", SPLIT_BY_PYTHON),
    ("line separator", "\u2028", SPLIT_BY_PYTHON),
    ("paragraph separator", "\u2029", SPLIT_BY_PYTHON),
]
# Characters that hide nothing from systemd but show a reviewer another line.
UNSEEN = [
    ("escape (terminal control)", "\x1b"),
    ("unit separator", "\x1f"),
    ("delete", "\x7f"),
    ("C1 control CSI", "\x9b"),
    ("right-to-left override", "\u202e"),
    ("byte-order mark past the start", "\ufeff"),
]


@pytest.mark.parametrize(("what", "char", "template"), HIDDEN, ids=[c[0] for c in HIDDEN])
def test_systemd_runs_the_hidden_line_and_repro_refuses_the_unit(
    tmp_path: Path, what: str, char: str, template: str
) -> None:
    text = template.format(c=char)
    assert systemd_commands(_write(tmp_path, text)) == ["/nonexistent/hidden"], what
    with pytest.raises(UnitTextError, match=rf"^h\.service:3: holds U\+{ord(char):04X} "):
        unit_commands(text, source="h.service")


@pytest.mark.parametrize(("what", "char"), UNSEEN, ids=[c[0] for c in UNSEEN])
def test_characters_a_reviewer_cannot_see_are_refused(what: str, char: str) -> None:
    text = f"[Service]\nExecStart=/bin/true\nExecStartPre=/bin/echo a{char}b\n"
    with pytest.raises(UnitTextError, match=rf"^u\.service:3: holds U\+{ord(char):04X} "):
        check_unit_text(text, source="u.service")


def test_a_section_header_without_its_bracket_is_refused_as_systemd_refuses_it(
    tmp_path: Path,
) -> None:
    text = "[Service]\nExecStart=/bin/true\n[Install\nWantedBy=multi-user.target\n"
    tool = shutil.which("systemd-analyze")
    assert tool is not None
    proc = subprocess.run(
        [tool, "verify", "--man=no", str(_write(tmp_path, text))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0, proc.stderr
    with pytest.raises(UnitTextError, match=r"^h\.service:3: '\[Install' is not a section header"):
        check_unit_text(text, source="h.service")


# --- through the real CLI -------------------------------------------------------------


def _workspace(base: Path, unit_text: str) -> Path:
    root = base / "ws"
    (root / "services").mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root / "venv")],
        check=True,
        timeout=120,
    )
    (root / "services" / "h.service").write_bytes(unit_text.encode())
    (root / "repro.toml").write_text('[bundle]\nname = "ws"\n\n[env]\nvenv = "venv"\n')
    return root


@pytest.mark.parametrize(("what", "char", "template"), HIDDEN, ids=[c[0] for c in HIDDEN])
def test_pack_refuses_the_unit_naming_it_and_the_line(
    tmp_path: Path, what: str, char: str, template: str
) -> None:
    root = _workspace(tmp_path, template.format(c=char))
    out = tmp_path / "out" / "ws-1.0.tar"
    proc = run_repro(
        "pack", str(root), "-o", str(out), "--version", "1.0", "--offline",
        env={"VIRTUAL_ENV": None},
    )  # fmt: skip
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert f"{root / 'services' / 'h.service'}:3: holds U+{ord(char):04X} " in err, err
    assert "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(("what", "char", "template"), HIDDEN, ids=[c[0] for c in HIDDEN])
def test_unpack_refuses_a_re_manifested_bundle_s_unit_before_writing(
    tmp_path: Path, what: str, char: str, template: str
) -> None:
    text = template.format(c=char).encode()
    tree = make_bundle_tree(tmp_path / "src", files={"services/h.service": text})
    bundle = archive_tree(tree, tmp_path / "b.tar")
    assert run_repro("check", str(bundle)).returncode == 0  # re-manifested: it verifies
    target, units = tmp_path / "target", tmp_path / "units"
    for flags in (["--no-exec"], ["--install-units", "--units-dir", str(units)]):
        proc = run_repro(
            "unpack", str(bundle), "--target", str(target), "--cpu", "--no-smoke", *flags
        )
        err = proc.stderr.decode()
        assert proc.returncode == 2, err
        assert f"services/h.service:3: holds U+{ord(char):04X} " in err, err
        assert "Traceback" not in err
        assert not target.exists() and not units.exists()
