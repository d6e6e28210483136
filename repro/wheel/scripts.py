"""Scripts and their `#!` lines, both ways: the line and the console-script wrapper an
installer writes (`shebang`, `entry_point_script`: repro's installer), and how a script
an installer rewrote is told from a patch (`only_shebang_differs`: the scan) and given
back the `#!python` line it had in the wheel (`restore_shebang`: the rebuild).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

from repro.errors import EntryPointsError
from repro.wheel.entrypoints import read_scripts, reference

# pip's limit: a longer `#!` line is cut by the kernel (BINPRM_BUF_SIZE, 128 bytes).
_SHEBANG_MAX = 127

# uv's template (pip's differs only in stripping the suffix with a regular expression)
_ENTRY_POINT_SCRIPT = """\
# -*- coding: utf-8 -*-
import sys
from {module} import {head}
if __name__ == "__main__":
    if sys.argv[0].endswith("-script.pyw"):
        sys.argv[0] = sys.argv[0][:-11]
    elif sys.argv[0].endswith(".exe"):
        sys.argv[0] = sys.argv[0][:-4]
    sys.exit({call}())
"""


def shebang(python: Path) -> bytes:
    """The `#!` line(s) a script starts with: the interpreter's path, or, where the kernel
    would cut it or split it at a space, pip's `/bin/sh` trampoline."""
    text = str(python)
    if len(text) + 2 <= _SHEBANG_MAX and " " not in text:
        return f"#!{text}\n".encode()
    quoted = text.replace("'", "'\"'\"'")
    return f"#!/bin/sh\n'''exec' '{quoted}' \"$0\" \"$@\"\n' '''\n".encode()


def entry_point_script(python: Path, module: str, attrs: str) -> bytes:
    """The script of a console or GUI entry point, run by `python` (module and attrs are
    checked dotted names: repro.wheel.entrypoints.checked_scripts)."""
    head = attrs.partition(".")[0]
    body = _ENTRY_POINT_SCRIPT.format(module=module, head=head, call=attrs)
    return shebang(python) + body.encode()


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


def only_shebang_differs(
    path: Path, recorded_sha256: str | None, interpreters: Iterable[str], dist_info: Path
) -> bool:
    """Whether the installed script `path` differs from what RECORD lists only by the `#!`
    line an installer wrote (for one of the environment's `interpreters`), or is a console
    script wrapper the installer generated for the distribution of `dist_info`."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    parts = split_shebang(data)
    if parts is None:
        return False
    _, body = parts
    for header in shebang_candidates(interpreters):
        if hashlib.sha256(header + body).hexdigest() == recorded_sha256:
            return True
    return _is_generated_console_script(path.name, body, dist_info)


def _is_generated_console_script(name: str, body: bytes, dist_info: Path) -> bool:
    """An entry-point wrapper the installer generated for a console script of the
    distribution: its body imports exactly the object entry_points.txt names (the venv may
    have moved, so the original interpreter path is unknown)."""
    try:
        target = read_scripts(dist_info).get(name)
    except EntryPointsError:
        return False  # unreadable: the script is judged as any other file
    if target is None:
        return False
    module, attrs = reference(target)
    import_name = attrs.partition(".")[0]
    expected = f"from {module} import {import_name}".encode()
    lines = [line.strip() for line in body.splitlines()]
    allowed = {b"", b"# -*- coding: utf-8 -*-", b"import re", b"import sys"}
    for line in lines:
        if line in allowed or line == expected or line.startswith((b"if __name__", b"sys.")):
            continue
        return False
    return expected in lines
