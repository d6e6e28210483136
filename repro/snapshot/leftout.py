"""What a pack leaves out of the workspace, and why, so nothing is dropped silently.

The bundle carries the venv (rebuilt, not copied), units, model configs, patches and
the files that repro.toml (or, without one, discovery) selects. Everything else at
the top of the workspace, model weights and oversized files are named here with the
reason, for pack to print and record.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.config import CONFIG_NAME
from repro.manifest import printable_path
from repro.snapshot.models import ModelReference

# Workspace files larger than this are not carried under files/ (checkpoints, data
# sets and logs belong in a model store, not in every bundle).
MAX_CARRIED_FILE = 64 << 20
ALWAYS_SKIPPED = frozenset({CONFIG_NAME, "__pycache__"})


@dataclass(frozen=True)
class LeftOut:
    path: str  # relative to the workspace, '/' ended for a directory
    reason: str

    def describe(self) -> str:
        return f"{self.path}: {self.reason}"


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"


def split_by_size(files: Iterable[Path], source: Path) -> tuple[list[Path], list[LeftOut]]:
    """Files small enough to carry, and those left out for their size."""
    kept: list[Path] = []
    refused: list[LeftOut] = []
    for path in files:
        try:
            size = path.stat().st_size
        except OSError:
            kept.append(path)  # the writer reports an unreadable file with its name
            continue
        if size > MAX_CARRIED_FILE:
            refused.append(
                LeftOut(
                    path.relative_to(source).as_posix(),
                    f"{_gib(size)}, over the {MAX_CARRIED_FILE >> 20} MiB limit for carried "
                    "files (put data and checkpoints in a model store)",
                )
            )
        else:
            kept.append(path)
    return kept, refused


def weights_left_out(models: Sequence[ModelReference]) -> list[LeftOut]:
    out = []
    for model in models:
        if not model.large_files:
            continue
        size = sum(s for _, s in model.large_files)
        where = model.local_path.rstrip("/") + "/"
        out.append(
            LeftOut(
                where,
                f"{len(model.large_files)} weight file(s) of model {model.name!r} ({_gib(size)}): "
                "referenced in bundle.toml, never copied; provide them on the target "
                "(--models or the recorded path)",
            )
        )
    return out


def uncovered_entries(source: Path, covered: Iterable[Path]) -> list[LeftOut]:
    """Top-level entries of the workspace that nothing of the pack takes."""
    root = Path(os.path.abspath(source))
    tops: set[str] = set()
    for path in covered:
        absolute = Path(os.path.abspath(path))
        if absolute == root:
            return []  # the workspace is the venv itself: there is nothing beside it
        if absolute.is_relative_to(root):
            tops.add(absolute.relative_to(root).parts[0])
    out = []
    for entry in sorted(root.iterdir()):
        name = entry.name
        if name in tops or name in ALWAYS_SKIPPED or name.startswith("."):
            continue
        kind = "directory" if entry.is_dir() else "file"
        out.append(
            LeftOut(
                printable_path(name) + ("/" if entry.is_dir() else ""),
                f"a {kind} no rule selects (not the venv, a unit, a model, patches or a "
                "file pattern); add it to [files] include in repro.toml to carry it",
            )
        )
    return out
