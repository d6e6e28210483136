"""The target's paths written into a bundle's units (repro.units.render), read back by the
real `systemd-analyze verify` and cross-checked with repro's own reader.

`systemd-analyze verify` checks that each command's program exists and is executable,
so a rendered unit whose programs live under the target verifies only when systemd
decoded the exact path (a space, a "%"); the arguments, Environment= and
WorkingDirectory= are read back with repro.units.command (whose word splitting and
expansion are systemd's rules, and which the same unit's program path agrees with).
Plain text substitution (what repro did before) fails both.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from repro.errors import UnitPathError, UsageError
from repro.units.command import parse_service, unit_commands
from repro.units.render import render_env_text, render_unit, render_unit_text
from tests.support.bundles import archive_tree, make_bundle_tree
from tests.support.run import run_repro

ARGUMENTS_TEMPLATE = """\
[Unit]
Description=serves ${REPRO_MODELS}
[Service]
WorkingDirectory=${REPRO_MODELS}
Environment="MODEL=${REPRO_MODELS}/q" PLAIN=${REPRO_MODELS}/p 'SINGLE=${REPRO_MODELS}/s'
EnvironmentFile=-${REPRO_MODELS}/env
ExecStart=/bin/true --model-path ${REPRO_MODELS}/m "--cache=${REPRO_MODELS}/c" \\
    '${REPRO_MODELS}/single' x${REPRO_MODELS}
"""
PROGRAM_TEMPLATE = """\
[Service]
ExecStartPre=-${REPRO_HOME}/bin/pre "${REPRO_HOME}/arg"
ExecStart=${REPRO_VENV}/bin/python -m server --root ${REPRO_HOME}
ExecStopPost=@'${REPRO_VENV}/bin/python' python-post
"""
# Each character that plain substitution breaks in a unit, as part of a directory name.
SPECIAL = [
    ("a space", "my models"),
    ("a percent sign (a specifier)", "m%hodels"),
    ("a dollar sign (a variable)", "m$HOME-x"),
    ("a double quote", 'm"odels'),
    ("a backslash", "m\\odels"),
    ("a single quote", "m'odels"),
    ("all at once", "a b%c$d\"e\\f'g"),
]
# Characters systemd takes in a program's path (string_is_safe refuses quotes and
# backslashes there, and "$" is not expanded in the path but is in argv[0]).
PROGRAM_SAFE = [(what, name) for what, name in SPECIAL if not set(name) & set("\"'\\$")]


def _verify(unit: Path) -> tuple[int, str]:
    tool = shutil.which("systemd-analyze")
    assert tool is not None, "systemd-analyze is expected here (Debian's systemd package)"
    proc = subprocess.run(
        [tool, "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def _executable(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)


@pytest.mark.parametrize(("what", "name"), SPECIAL, ids=[c[0] for c in SPECIAL])
def test_a_path_in_arguments_and_settings_reads_back_exactly(
    tmp_path: Path, what: str, name: str
) -> None:
    models = tmp_path / name
    models.mkdir()
    text = render_unit_text(ARGUMENTS_TEMPLATE, {"REPRO_MODELS": str(models)}, source="m.service")
    unit = tmp_path / "m.service"
    unit.write_text(text)
    assert _verify(unit) == (0, ""), text
    service = parse_service(text, unit="m.service")
    m = str(models)
    assert service.argv == (
        "/bin/true", "--model-path", f"{m}/m", f"--cache={m}/c", f"{m}/single", f"x{m}",
    ), text  # fmt: skip
    assert service.environment == {"MODEL": f"{m}/q", "PLAIN": f"{m}/p", "SINGLE": f"{m}/s"}
    assert service.working_directory == m
    # every line the template had, each setting once; the path's own "$" is no variable
    assert [k for k, _ in unit_commands(text)] == ["ExecStart"]
    assert service.warnings == ()


# Directory names of printable characters, the unit syntax's own among them.
NAMES = st.text(
    alphabet=st.sampled_from(list(" \"'\\$%;#=@-:{}[]*?~&|<>()`!abé中😀")),
    min_size=1,
    max_size=12,
).filter(lambda name: name not in (".", "..") and not name.endswith(" "))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=NAMES)
@example(name="\\")
@example(name="a\\\\")
def test_any_printable_path_reads_back_exactly_or_is_refused(tmp_path: Path, name: str) -> None:
    """Whatever the path: systemd-analyze verify accepts the rendered unit and repro's
    reader gives back exactly the path in every argument and setting; only a path that
    ends in an odd run of backslashes is refused (it ends `WorkingDirectory=` and
    `Description=`, which take no escapes, and would continue them into the next line)."""
    models = tmp_path / name
    trailing = len(str(models)) - len(str(models).rstrip("\\"))
    if trailing % 2:  # systemd continues a line on an odd run of trailing backslashes
        with pytest.raises(UnitPathError, match="change the unit's lines"):
            render_unit_text(ARGUMENTS_TEMPLATE, {"REPRO_MODELS": str(models)}, source="m.service")
        return
    text = render_unit_text(ARGUMENTS_TEMPLATE, {"REPRO_MODELS": str(models)}, source="m.service")
    unit = tmp_path / "m.service"
    unit.write_text(text)
    assert _verify(unit) == (0, ""), text
    service = parse_service(text, unit="m.service")
    m = str(models)
    assert service.argv == (
        "/bin/true", "--model-path", f"{m}/m", f"--cache={m}/c", f"{m}/single", f"x{m}",
    ), text  # fmt: skip
    assert service.environment == {"MODEL": f"{m}/q", "PLAIN": f"{m}/p", "SINGLE": f"{m}/s"}
    assert service.working_directory == m


@pytest.mark.parametrize(("what", "name"), PROGRAM_SAFE, ids=[c[0] for c in PROGRAM_SAFE])
def test_a_program_under_the_target_is_the_one_systemd_runs(
    tmp_path: Path, what: str, name: str
) -> None:
    home = tmp_path / name
    values = {"REPRO_VENV": str(home / "venv"), "REPRO_HOME": str(home)}
    for program in (home / "venv" / "bin" / "python", home / "bin" / "pre"):
        _executable(program)
    unit = tmp_path / "p.service"
    unit.write_text(render_unit_text(PROGRAM_TEMPLATE, values, source="p.service"))
    assert _verify(unit) == (0, ""), unit.read_text()
    service = parse_service(unit.read_text(), unit="p.service")
    assert service.argv == (f"{home}/venv/bin/python", "-m", "server", "--root", str(home))
    # what repro did before: the text pasted in; systemd then runs another program
    unit.write_text(render_unit(PROGRAM_TEMPLATE, values))
    code, output = _verify(unit)
    assert code != 0 and output, output


@pytest.mark.parametrize("char", ['"', "'", "\\", "$"])
def test_a_program_path_systemd_cannot_run_is_refused(tmp_path: Path, char: str) -> None:
    home = tmp_path / f"a{char}b"
    values = {"REPRO_VENV": str(home / "venv"), "REPRO_HOME": str(home)}
    with pytest.raises(UnitPathError, match=r"^p\.service:2: ExecStartPre= runs a program"):
        render_unit_text(PROGRAM_TEMPLATE, values, source="p.service")


@pytest.mark.parametrize(
    "path",
    ["/srv/a\nExecStartPre=/tmp/evil", "/srv/a\tb", "/srv/a\rb", "/srv/a\x00b", "/srv/a\x0cb",
     "/srv/a\u2028b", "/srv/a\x85b", "/srv/ab "],
)  # fmt: skip
def test_a_path_that_would_end_or_hide_a_line_is_refused(path: str) -> None:
    with pytest.raises(UnitPathError):
        render_unit_text(ARGUMENTS_TEMPLATE, {"REPRO_MODELS": path}, source="m.service")


def test_a_path_ending_the_line_in_a_backslash_is_refused() -> None:
    """WorkingDirectory= takes no escapes: a path ending in "\\" would continue the
    line into the next setting."""
    template = "[Service]\nWorkingDirectory=${REPRO_HOME}\nExecStart=/bin/true\n"
    with pytest.raises(UnitPathError, match="change the unit's lines"):
        render_unit_text(template, {"REPRO_HOME": "/srv/x\\"}, source="w.service")


def test_lines_without_a_variable_keep_their_bytes() -> None:
    template = "[Service]\r\nExecStart=/bin/true  'a'\r\n# ${REPRO_HOME} in a comment\r\n"
    text = render_unit_text(template, {"REPRO_HOME": "/srv/x y"}, source="c.service")
    assert text == "[Service]\r\nExecStart=/bin/true  'a'\r\n# /srv/x y in a comment\r\n"


def test_an_environment_file_reads_the_path_back() -> None:
    template = "A=${REPRO_HOME}/a\nB=\"${REPRO_HOME}/b\"\nC='${REPRO_HOME}/c'\n"
    text = render_env_text(template, {"REPRO_HOME": '/srv/x"y\\z$w'}, source="e.env")
    assert text == ('A=/srv/x\\"y\\\\z\\$w/a\nB="/srv/x\\"y\\\\z\\$w/b"\nC=\'/srv/x"y\\z$w/c\'\n')
    with pytest.raises(UnitPathError, match="inside single quotes"):
        render_env_text(template, {"REPRO_HOME": "/srv/x'y"}, source="e.env")


# --- through the real CLI -------------------------------------------------------------

CLI_UNIT = """\
[Unit]
Description=repro unit render test
[Service]
WorkingDirectory=${REPRO_HOME}
Environment="DATA=${REPRO_HOME}/files"
ExecStart=${REPRO_VENV}/bin/python -m http.server --directory ${REPRO_HOME}/files
"""


def _bundle(tmp_path: Path) -> Path:
    tree = make_bundle_tree(tmp_path / "src", files={"services/web.service": CLI_UNIT.encode()})
    return archive_tree(tree, tmp_path / "b.tar")


@pytest.mark.slow
def test_unpack_into_a_target_with_a_space_and_a_percent_renders_a_unit_systemd_reads(
    tmp_path: Path,
) -> None:
    target = tmp_path / "srv 50%h"
    proc = run_repro(
        "unpack", str(_bundle(tmp_path)), "--target", str(target), "--cpu", "--no-smoke",
        "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    unit = target / "services" / "web.service"
    assert _verify(unit) == (0, ""), unit.read_text()
    service = parse_service(unit.read_text(), unit="web.service")
    venv = json.loads(proc.stdout)["venv"]
    assert Path(venv) == target  # the venv is the target
    assert service.argv == (
        f"{venv}/bin/python", "-m", "http.server", "--directory", f"{target}/files",
    )  # fmt: skip
    assert service.environment == {"DATA": f"{target}/files"}
    assert service.working_directory == str(target)


def test_unpack_refuses_a_target_systemd_cannot_run_a_program_under(tmp_path: Path) -> None:
    target = tmp_path / 'srv"x'
    proc = run_repro(
        "unpack", str(_bundle(tmp_path)), "--target", str(target), "--cpu", "--no-smoke"
    )
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "services/web.service:6: ExecStart= runs a program under ${REPRO_VENV}" in err, err
    assert "Traceback" not in err
    assert not target.exists()


@pytest.mark.parametrize("option", ["--target", "--models"])
@pytest.mark.parametrize("bad", ["a\nExecStartPre=/tmp/evil", "a\x0bb", "a\x1bb"])
def test_unpack_refuses_a_path_option_holding_a_control_character(
    tmp_path: Path, option: str, bad: str
) -> None:
    target = tmp_path / "t"
    value = str(tmp_path / bad)
    args = ["--target", str(target)] if option == "--models" else []
    proc = run_repro("unpack", str(_bundle(tmp_path)), option, value, *args, "--cpu", "--no-smoke")
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert f"{option} " in err and "a control character" in err, err
    assert "Traceback" not in err
    assert not target.exists() and not Path(value).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar", "src"]


def test_the_option_check_is_a_usage_error() -> None:
    assert issubclass(UnitPathError, UsageError)
