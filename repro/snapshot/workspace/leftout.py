"""What a pack leaves out of the workspace, and why, so nothing is dropped silently.

The bundle carries the venv (rebuilt, not copied), units, model configs, patches and
the files that repro.toml (or, without one, discovery) selects. Everything else at
the top of the workspace, model weights, oversized files, files that look like a
credential and links or special files a pattern reaches are named here with the
reason, for pack to print and record. Each entry has a kind (LEFT_OUT_KINDS) besides
its human reason. A credential's entry says why it looks like one, never what it holds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from repro.bundle.manifest import printable_path
from repro.config import CONFIG_NAME
from repro.snapshot.workspace.files import looks_secret, secret_in_file
from repro.snapshot.workspace.models import ModelReference

# Workspace files larger than this are not carried under files/ (checkpoints, data
# sets and logs belong in a model store, not in every bundle).
MAX_CARRIED_FILE = 64 << 20
ALWAYS_SKIPPED = frozenset({CONFIG_NAME, "__pycache__"})
# why, in one word: no rule selects it, too big, model weights, a credential, a link or
# special file that is not carried, a name a bundle cannot hold (not UTF-8, a control
# character, a backslash)
LeftOutKind = Literal["unselected", "size", "weights", "secret", "not-a-file", "bad-name"]
LEFT_OUT_KINDS: tuple[LeftOutKind, ...] = (
    "unselected",
    "size",
    "weights",
    "secret",
    "not-a-file",
    "bad-name",
)


@dataclass(frozen=True)
class LeftOut:
    path: str  # relative to the workspace, '/' ended for a directory
    reason: str
    kind: LeftOutKind

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
                    "size",
                )
            )
        else:
            kept.append(path)
    return kept, refused


def split_secrets(
    files: Iterable[Path], source: Path, known_values: Sequence[str] = ()
) -> tuple[list[Path], list[LeftOut]]:
    """Files to carry, and those left out because their name or their content looks
    like a credential (repro.snapshot.workspace.files: looks_secret, secret_in_file; `known_values`
    are the packing environment's secret values). The reason says why, never what the
    file holds."""
    kept: list[Path] = []
    refused: list[LeftOut] = []
    for path in files:
        why = "its name" if looks_secret(path) else secret_in_file(path, known_values)
        if why is None:
            kept.append(path)
            continue
        refused.append(
            LeftOut(
                path.relative_to(source).as_posix(),
                f"looks like a credential ({why}): never carried; put it on the target yourself",
                "secret",
            )
        )
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
                "weights",
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
        what = "directory" if entry.is_dir() else "file"
        out.append(
            LeftOut(
                printable_path(name) + ("/" if entry.is_dir() else ""),
                f"a {what} no rule selects (not the venv, a unit, a model, patches or a "
                "file pattern); add it to [files] include in repro.toml to carry it",
                "unselected",
            )
        )
    return out
