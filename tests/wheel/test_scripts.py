"""repro.wheel.scripts: the `#!` line and the entry-point wrapper repro's installer
writes, and the pack side's reading of them back (restore_shebang for the rebuild,
only_shebang_differs for the scan), each run or compared for real: the wrappers run by
this interpreter, the `/bin/sh` trampoline by /bin/sh, the `#!python` script of a wheel
setuptools built."""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from pathlib import Path

import pytest

from repro.wheel.entrypoints import ENTRY_POINTS
from repro.wheel.scripts import (
    entry_point_script,
    only_shebang_differs,
    restore_shebang,
    shebang,
    shebang_candidates,
    split_shebang,
)
from tests.support.run import run_process
from tests.wheel.conftest import TOOL_SCRIPT, RealWheel

BODY = b"print('ran')\n"


def _interpreter_at(directory: Path) -> Path:
    """A `python` in `directory`: a link to this interpreter."""
    directory.mkdir(parents=True)
    python = directory / "python"
    python.symlink_to(sys.executable)
    return python


def _run_script(script: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """`script` made executable and run: its exit status and stdout (it writes no stderr)."""
    script.chmod(0o755)
    proc = run_process([script, *args], env=env, timeout=60)
    assert not proc.stderr, proc.stderr
    return proc.returncode, proc.stdout


def test_a_short_interpreter_path_is_one_line(tmp_path: Path) -> None:
    python = _interpreter_at(tmp_path / "bin")
    assert shebang(python) == f"#!{python}\n".encode()
    script = tmp_path / "tool"
    script.write_bytes(shebang(python) + BODY)
    assert _run_script(script) == (0, "ran\n")


@pytest.mark.parametrize("directory", ["d" * 130, "with space", "it's spaced"])
def test_a_long_or_spaced_path_gets_the_sh_trampoline_that_runs(
    tmp_path: Path, directory: str
) -> None:
    python = _interpreter_at(tmp_path / directory / "bin")
    header = shebang(python)
    assert header.startswith(b"#!/bin/sh\n'''exec' ")
    script = tmp_path / "tool"
    script.write_bytes(header + b"import sys\nprint(sys.argv[1:])\n")
    assert _run_script(script, "a b", "c") == (0, "['a b', 'c']\n")
    assert split_shebang(header + BODY) == (header, BODY)


@pytest.mark.parametrize("attrs", ["main", "app.run"])
def test_an_entry_point_script_runs_the_object_it_names(tmp_path: Path, attrs: str) -> None:
    (tmp_path / "demo_pkg").mkdir()
    (tmp_path / "demo_pkg" / "__init__.py").write_text(
        "class app:\n    @staticmethod\n    def run():\n        print('app.run')\n"
        "        return 3\n\n\ndef main():\n    print('main')\n    return 3\n"
    )
    script = tmp_path / "demo-cli"
    script.write_bytes(entry_point_script(Path(sys.executable), "demo_pkg", attrs))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    assert _run_script(script, env=env) == (3, f"{attrs}\n")


@pytest.mark.parametrize("directory", ["bin", "d" * 130 + "/bin", "with space/bin"])
def test_restore_shebang_undoes_what_the_installer_wrote(tmp_path: Path, directory: str) -> None:
    scripts = tmp_path / directory
    installed = shebang(scripts / "python3.11") + BODY
    assert restore_shebang(installed, scripts) == b"#!python\n" + BODY
    # another directory's interpreter, or `env`, was in the wheel as it is
    elsewhere = shebang(tmp_path / "elsewhere" / "python") + BODY
    assert restore_shebang(elsewhere, scripts) == elsewhere
    assert restore_shebang(b"#!/usr/bin/env python3\n" + BODY, scripts).startswith(b"#!/usr/")


def test_a_wheels_python_script_rewritten_for_an_interpreter_is_no_patch(
    real_wheel: RealWheel, tmp_path: Path
) -> None:
    """The `#!python` script of the wheel, as an installer rewrote it for one of the
    environment's interpreters: the scan takes it for the wheel's (RECORD's hash is the
    wheel's), and the rebuild gives it its `#!python` back."""
    with zipfile.ZipFile(real_wheel.path) as archive:
        original = archive.read(f"{real_wheel.data_dir}/scripts/wheeldemo-tool")
    assert original == TOOL_SCRIPT
    recorded = hashlib.sha256(original).hexdigest()
    scripts = tmp_path / "venv" / "bin"
    scripts.mkdir(parents=True)
    for python in (scripts / "python", scripts / ("d" * 130) / "python"):
        installed = scripts / "wheeldemo-tool"
        _, body = split_shebang(original) or (b"", b"")
        installed.write_bytes(b"#!" + str(python).encode() + b"\n" + body)
        assert only_shebang_differs(installed, recorded, [str(python)], tmp_path)
        # the body changed as well: a patch
        installed.write_bytes(b"#!" + str(python).encode() + b"\n" + body + b"# edited\n")
        assert not only_shebang_differs(installed, recorded, [str(python)], tmp_path)
    assert restore_shebang(shebang(scripts / "python") + body, scripts) == original
    assert b"#!python\n" in shebang_candidates([])


PIP_WRAPPER = """\
# -*- coding: utf-8 -*-
import re
import sys
from {module} import {head}
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit({call}())
"""


@pytest.mark.parametrize("value", ["wheeldemo:main", "wheeldemo.cli:run [extra]"])
def test_a_generated_wrapper_of_a_moved_venv_is_no_patch(tmp_path: Path, value: str) -> None:
    """A console script's wrapper as pip writes it, for an interpreter the environment no
    longer has (the venv moved): recognised by its body against entry_points.txt, the
    reference read as the installer reads it (extras are no part of it)."""
    dist_info = tmp_path / "wheeldemo-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / ENTRY_POINTS).write_text(f"[console_scripts]\nwheeldemo-x = {value}\n")
    module, _, attrs = value.partition(" ")[0].partition(":")
    body = PIP_WRAPPER.format(module=module, head=attrs.partition(".")[0], call=attrs)
    script = tmp_path / "wheeldemo-x"
    script.write_bytes(b"#!/old/venv/bin/python\n" + body.encode())
    assert only_shebang_differs(script, "0" * 64, [], dist_info)
    other = tmp_path / "other-x"
    other.write_bytes(script.read_bytes())
    assert not only_shebang_differs(other, "0" * 64, [], dist_info)  # not a script it lists
    (dist_info / ENTRY_POINTS).write_text("not ini\n")
    assert not only_shebang_differs(script, "0" * 64, [], dist_info)
