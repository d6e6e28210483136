"""What `--python` names, in every verb: an interpreter file or a virtual environment."""

from __future__ import annotations

import os
from pathlib import Path

from repro.errors import UsageError

HINT = "give an interpreter (venv/bin/python) or a virtual environment's directory"


def resolve_python(path: Path, *, option: str = "--python") -> Path:
    """The interpreter `path` names: the file itself, or a venv directory's bin/python.

    Raises UsageError naming the path when there is no executable interpreter there."""
    if path.is_dir():
        candidate = path / "bin" / "python"
        if not candidate.exists():
            raise UsageError(
                f"{option} {path}: a directory without bin/python, not a virtual environment",
                hint=HINT,
            )
        path = candidate
    elif not path.exists():
        raise UsageError(f"{option} {path}: no such interpreter", hint=HINT)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise UsageError(f"{option} {path}: not an executable file", hint=HINT)
    return path
