"""Compile the directories named on the command line to bytecode with this interpreter;
what was done as JSON on stdout.

Run by unpack's patch step (after the patches) under `--compile-bytecode` with the
TARGET venv's python (`python -I -S bytecode.py WORKERS DIR...`): nothing of
site-packages runs (compiling a module does not execute it). The bytecode is
`checked-hash` (PEP 552): valid while the source's bytes are the ones it was compiled
from, whatever the file's mtime, so a patch, an upgrade in place or a rollback never
leaves a stale one in use. A file that does not compile (a fixture in another Python's
grammar, a template named .py) is left without bytecode, as pip leaves it. WORKERS:
processes, 0 for one per core.
"""

import compileall
import importlib.util
import json
import os
import py_compile
import sys
from typing import List


def python_files(directory: str) -> List[str]:
    found: List[str] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found.extend(os.path.join(root, name) for name in sorted(files) if name.endswith(".py"))
    return found


def main() -> None:
    workers = int(sys.argv[1])
    directories = sys.argv[2:]
    for directory in directories:
        compileall.compile_dir(
            directory,
            maxlevels=1000,  # every level (3.8's default stops at 10)
            quiet=2,
            workers=workers,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
    sources = [path for directory in directories for path in python_files(directory)]
    left = [p for p in sources if not os.path.isfile(importlib.util.cache_from_source(p))]
    json.dump(
        {"files": len(sources), "compiled": len(sources) - len(left), "left": left[:20]}, sys.stdout
    )


if __name__ == "__main__":
    main()
