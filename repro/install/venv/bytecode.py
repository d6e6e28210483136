"""Bytecode for the rebuilt venv, compiled once at unpack (`--compile-bytecode`).

repro installs as uv does: no bytecode. A server's first start then compiles every
module it imports (torch and transformers: thousands), and where PYTHONDONTWRITEBYTECODE
is set (container images often set it) every start does, since nothing is written back.
With `--compile-bytecode` the patch step, once the venv's files are final (installed,
rebuilt kernels, patches applied), compiles its site-packages once with the target
interpreter, one process per core (repro/probe/bytecode.py: `-I -S`, so no
`.pth` of the bundle's runs, and compiling runs nothing: `--no-exec` allows it), into
`checked-hash` bytecode that a later patch or upgrade cannot leave stale.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.errors import InstallError
from repro.interpreter import run_target_script

TIMEOUT = 1800  # a 7 GB venv of 25k modules takes seconds per core; a slow disk more


@dataclass(frozen=True)
class Compiled:
    files: int  # the .py files below the directories
    compiled: int  # those with bytecode now
    left: tuple[str, ...]  # the first of those that do not compile
    seconds: float

    def describe(self) -> str:
        left = self.files - self.compiled
        return (
            f"bytecode of {self.compiled} of {self.files} Python files in {self.seconds:.1f} s"
            + (f" ({left} do not compile, as {', '.join(self.left[:3])})" if left else "")
        )

    def to_facts(self) -> dict[str, object]:
        return {"files": self.files, "compiled": self.compiled, "seconds": round(self.seconds, 3)}


def compile_bytecode(python: Path, directories: Sequence[Path], *, jobs: int | None) -> Compiled:
    """Compile `directories` (the venv's site-packages) with the venv's `python`."""
    started = time.monotonic()
    proc = run_target_script(
        python,
        "bytecode.py",
        [str(jobs or 0), *map(str, directories)],
        timeout=TIMEOUT,
        error=InstallError,
    )
    try:
        answer = json.loads(proc.stdout) if proc.returncode == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise InstallError(
            f"{python}: compiling the venv's bytecode failed: {proc.stderr.strip()[-2000:]}",
            hint="pass --compile-bytecode only where the venv's interpreter runs; the venv "
            "works without it",
        )
    return Compiled(
        int(answer["files"]),
        int(answer["compiled"]),
        tuple(str(p) for p in answer["left"]),
        time.monotonic() - started,
    )
