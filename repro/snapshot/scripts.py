"""Scripts an installer rewrote: the `#!` line it writes, and the console-script
wrappers it generates from entry_points.txt.

The scan uses these to tell such a script from a patch (`only_shebang_differs`); the
wheel rebuild to give a script back the `#!python` line it had in the wheel
(`restore_shebang`).
"""

from __future__ import annotations

import configparser
import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

from repro.bundle.environment import DistributionFacts, EnvironmentFacts

_TRAMPOLINE = re.compile(
    rb"\A#!/bin/sh\n'''exec' (\"[^\"]*\"|'[^']*'|\S+) \"\$0\" \"\$@\"\n' '''\n"
)


def restore_shebang(content: bytes, scripts_dir: Path) -> bytes:
    """Undo an installer's `#!python` rewrite: point the script back at `#!python`.

    Installers replace a first line starting with `#!python` by `#!<interpreter>` (pip,
    uv) or by a /bin/sh trampoline when the path is long or has spaces (installer). Only
    interpreters inside the environment's own scripts directory are taken back; any other
    shebang (`#!/usr/bin/env python3`) was in the wheel as it is.
    """
    match = _TRAMPOLINE.match(content)
    if match is not None:
        interpreter = match.group(1).strip(b"\"'")
        rest = content[match.end() :]
    else:
        if not content.startswith(b"#!"):
            return content
        first, newline, rest = content.partition(b"\n")
        if not newline:
            return content
        interpreter = first[2:].strip()
        if b" " in interpreter:
            return content
    path = Path(os.fsdecode(interpreter))
    name = path.name
    if os.path.normpath(path.parent) != os.path.normpath(scripts_dir):
        return content
    if not (name.startswith("python") or name.startswith("pypy")):
        return content
    return b"#!python\n" + rest


def split_shebang(data: bytes) -> tuple[bytes, bytes] | None:
    """(header, body) of a script: the `#!` line, or the `#!/bin/sh` + `'''exec'` three-line
    form pip/distlib writes for long interpreter paths."""
    if not data.startswith(b"#!"):
        return None
    first, sep, rest = data.partition(b"\n")
    if first.rstrip() == b"#!/bin/sh" and rest.startswith(b"'''exec' "):
        exec_line, _, rest2 = rest.partition(b"\n")
        close, _, body = rest2.partition(b"\n")
        if close.strip() == b"' '''":
            return first + b"\n" + exec_line + b"\n" + close + b"\n", body
    return first + sep, rest


def shebang_candidates(interpreters: Iterable[str]) -> list[bytes]:
    """Headers an installer may have written: `#!python` (as in the wheel), and the simple and
    long forms for each interpreter path."""
    headers = [b"#!python\n"]
    for interpreter in interpreters:
        exe = interpreter.encode()
        headers.append(b"#!" + exe + b"\n")
        headers.append(b"#!/bin/sh\n'''exec' " + exe + b' "$0" "$@"\n' + b"' '''\n")
    return headers


def _interpreters(facts: EnvironmentFacts) -> list[str]:
    scripts = Path(facts.python.scripts)
    major_minor = ".".join(facts.python.version.split(".")[:2])
    names = ["python", "python3", f"python{major_minor}"]
    found = [facts.python.executable, *(str(scripts / n) for n in names)]
    found.append(os.path.realpath(facts.python.executable))
    return list(dict.fromkeys(found))


def only_shebang_differs(
    path: Path, recorded_sha256: str | None, dist: DistributionFacts, facts: EnvironmentFacts
) -> bool:
    """Whether the installed script `path` differs from what RECORD lists only by the `#!`
    line an installer wrote (for one of the environment's interpreters), or is a console
    script wrapper the installer generated for `dist`."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    parts = split_shebang(data)
    if parts is None:
        return False
    _, body = parts
    for header in shebang_candidates(_interpreters(facts)):
        if hashlib.sha256(header + body).hexdigest() == recorded_sha256:
            return True
    return _is_generated_console_script(path.name, body, dist)


def _is_generated_console_script(name: str, body: bytes, dist: DistributionFacts) -> bool:
    """An entry-point wrapper the installer generated for a console script of `dist`: its body
    imports exactly the object entry_points.txt names (the venv may have moved, so the original
    interpreter path is unknown)."""
    entry_points = Path(dist.metadata_dir) / "entry_points.txt"
    try:
        text = entry_points.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    target = _console_script_target(text, name)
    if target is None:
        return False
    module, _, attribute = target.partition(":")
    import_name = attribute.split(".")[0].strip()
    expected = f"from {module.strip()} import {import_name}".encode()
    lines = [line.strip() for line in body.splitlines()]
    allowed = {b"", b"# -*- coding: utf-8 -*-", b"import re", b"import sys"}
    for line in lines:
        if line in allowed or line == expected or line.startswith((b"if __name__", b"sys.")):
            continue
        return False
    return expected in lines


def script_entry_points(text: str) -> dict[str, str]:
    """`console_scripts` and `gui_scripts` of an entry_points.txt, name -> `module:attr`,
    read as an INI file by configparser, as pypa/installer reads it to write the wrappers
    (one reader for the scan and the rebuild, not a line loop of its own). Raises
    configparser.Error on a file that is not INI."""
    # strict=False: a name listed twice is read (the last wins), not refused
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    found: dict[str, str] = {}
    for section in ("console_scripts", "gui_scripts"):
        if parser.has_section(section):
            found.update((name, value.strip()) for name, value in parser.items(section))
    return found


def _console_script_target(text: str, name: str) -> str | None:
    try:
        return script_entry_points(text).get(name)
    except configparser.Error:
        return None
