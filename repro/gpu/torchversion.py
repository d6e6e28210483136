"""torch's build facts read from its `torch/version.py`, never imported.

The file holds `__version__`, `cuda`, `hip` and `git_version` as plain assignments;
they are parsed with `ast` and never executed, so reading them from a target's
site-packages runs nothing of the target. Both sides read it: pack for the source's
probe facts (repro.snapshot.facts.modulefiles), unpack for the rebuilt venv's CUDA
runtime (repro.install.deploy.caches).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

TORCH_VERSION_FILE = Path("torch") / "version.py"
VERSION_FILE_LIMIT = 1 << 20  # torch's is < 1 KiB; anything this large is not a version file
_VERSION_NAMES = ("__version__", "cuda", "hip", "git_version")


@dataclass(frozen=True)
class TorchVersionFile:
    """The string assignments of torch/version.py (None: absent or not a string)."""

    version: str | None = None
    cuda: str | None = None
    hip: str | None = None
    git_version: str | None = None
    error: str | None = None


def read_torch_version_file(path: Path) -> TorchVersionFile:
    """Parse torch/version.py without executing it: module-level `NAME = 'text'` (or
    `NAME: T = 'text'`) for __version__, cuda, hip and git_version. The last assignment of a
    name wins, as it would when the file runs; any other value reads as None."""
    try:
        with path.open("rb") as stream:
            data = stream.read(VERSION_FILE_LIMIT + 1)
    except OSError as exc:
        return TorchVersionFile(error=f"{path}: cannot read: {exc.strerror or exc}")
    if len(data) > VERSION_FILE_LIMIT:
        return TorchVersionFile(error=f"{path}: larger than {VERSION_FILE_LIMIT} bytes")
    try:
        tree = ast.parse(data, filename=str(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return TorchVersionFile(error=f"{path}: not valid Python: {exc}")
    found: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        text = value.value if isinstance(value, ast.Constant) else None
        for target in targets:
            if isinstance(target, ast.Name) and target.id in _VERSION_NAMES:
                found[target.id] = text if isinstance(text, str) else None
    return TorchVersionFile(
        version=found.get("__version__"),
        cuda=found.get("cuda"),
        hip=found.get("hip"),
        git_version=found.get("git_version"),
    )
