"""Where a venv keeps each kind of file, and the files an installer writes itself
(entry-point scripts, INSTALLER): shared by the plan (audit) and the writer
(install)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

INSTALLER_NAME = "repro"
SCHEME_KEYS = ("purelib", "platlib", "scripts", "headers", "data")
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


@dataclass(frozen=True)
class Scheme:
    """Where a venv keeps each kind of file (sysconfig's scheme of its interpreter)."""

    purelib: Path
    platlib: Path
    scripts: Path
    data: Path  # the venv's prefix
    include_site: Path  # headers go to include_site / <distribution name>
    python: Path  # the interpreter scripts are pointed at
    # The target interpreter's (major, minor): pip's versioned script names (pip3.11)
    # are made for it; None leaves the wheel's names as they are.
    version: tuple[int, int] | None = None

    def base(self, key: str, distribution: str) -> Path:
        if key == "headers":
            return self.include_site / distribution
        path: Path = getattr(self, key)
        return path

    def script(self, module: str, attrs: str) -> bytes:
        """The script of a console or GUI entry point (module and attrs are checked
        dotted names)."""
        head = attrs.partition(".")[0]
        body = _ENTRY_POINT_SCRIPT.format(module=module, head=head, call=attrs)
        return shebang(self.python) + body.encode()

    def installer_line(self) -> bytes:
        return f"{INSTALLER_NAME}\n".encode()


def shebang(python: Path) -> bytes:
    """The `#!` line(s) a script starts with: the interpreter's path, or, where the kernel
    would cut it or split it at a space, pip's `/bin/sh` trampoline."""
    text = str(python)
    if len(text) + 2 <= _SHEBANG_MAX and " " not in text:
        return f"#!{text}\n".encode()
    quoted = text.replace("'", "'\"'\"'")
    return f"#!/bin/sh\n'''exec' '{quoted}' \"$0\" \"$@\"\n' '''\n".encode()
