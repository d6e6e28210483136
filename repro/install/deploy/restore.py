"""The target laid out like the source workspace: venv, files, model configs, units.

`repro pack DIR` records where the venv sat in DIR (bundle.toml [workspace]); the
bench harness, results and reports travel under files/ with their paths relative
to DIR, and a model inside DIR is recorded relative to it. Unpack puts each back at
the same place under the target, so a unit's ${REPRO_HOME}/drafter or
WorkingDirectory=${REPRO_HOME} names a directory that exists there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.bundle import layout
from repro.bundle.info import BundleInfo
from repro.errors import PatchConflictError, UsageError
from repro.hashing import sha256_file
from repro.install.state import STATE_DIR
from repro.install.transaction.atomic import atomic_write


def venv_dir(target: Path, info: BundleInfo) -> Path:
    """The rebuilt venv's directory: its place in the workspace, under the target."""
    place = info.workspace.venv
    return target if place == "." else target / place


def models_dir(target: Path, models: Path | None) -> Path:
    """${REPRO_MODELS}: --models when given, else TARGET/models."""
    return models if models is not None else layout.at(target, layout.MODELS)


def path_values(
    target: Path, info: BundleInfo, models: Path | None, placed: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The values of the variables units and launch commands are written with, and
    (`placed`) each found model's unit text with the place where it was found."""
    return {
        "REPRO_VENV": str(venv_dir(target, info)),
        "REPRO_HOME": str(target),
        "REPRO_MODELS": str(models_dir(target, models)),
        **(placed or {}),
    }


@dataclass(frozen=True)
class RestoredFile:
    member: str  # path in the bundle
    rel: str  # path under the target
    sha256: str
    executable: bool


def plan_restore(bundle: Path, info: BundleInfo) -> list[RestoredFile]:
    """Every workspace file the bundle carries and where it goes under the target."""
    planned: dict[str, RestoredFile] = {}
    files = layout.at(bundle, layout.FILES)
    if files.is_dir():
        for path in sorted(p for p in files.rglob("*") if p.is_file()):
            rel = path.relative_to(files).as_posix()
            planned[rel] = _restored(path, layout.carried_file(rel), rel)
    for model in info.models:
        if not model.in_workspace or model.local_path is None:
            continue  # outside the workspace: found through --models or its path
        carried = layout.at(bundle, layout.MODELS) / model.name
        if not carried.is_dir():
            continue
        for path in sorted(p for p in carried.rglob("*") if p.is_file()):
            inner = path.relative_to(carried).as_posix()
            rel = inner if model.local_path == "." else f"{model.local_path}/{inner}"
            planned[rel] = _restored(path, layout.model_file(model.name, inner), rel)
    venv = info.workspace.venv
    clashing = [rel for rel in planned if venv != "." and (rel + "/").startswith(venv + "/")]
    if clashing:
        raise UsageError(
            f"bundle carries workspace files inside the venv's place {venv}/: "
            + ", ".join(clashing[:5]),
            hint="the venv is rebuilt, never copied; pack without these files",
        )
    return [planned[rel] for rel in sorted(planned)]


def _restored(path: Path, member: str, rel: str) -> RestoredFile:
    return RestoredFile(member, rel, sha256_file(path), os.access(path, os.X_OK))


def _destination(target: Path, rel: str) -> Path:
    """TARGET/rel, refusing a path that leaves the target or enters repro's own state
    (through `..` or a symbolic link on the way)."""
    dest = target / rel
    root = target.resolve()
    parent = dest.parent.resolve()
    if not (parent == root or parent.is_relative_to(root)) or rel.split("/")[0] == STATE_DIR:
        raise UsageError(
            f"{dest}: outside the target {target} (a symbolic link on the way?); "
            "refusing to write there",
            hint="remove the link, or unpack into another --target",
        )
    if dest.is_symlink():
        raise UsageError(f"{dest} is a symbolic link; refusing to write through it")
    return dest


def restore_workspace(
    bundle: Path,
    target: Path,
    planned: Sequence[RestoredFile],
    *,
    earlier: Mapping[str, str] | None = None,
    force: bool = False,
) -> tuple[list[str], list[str]]:
    """Write the planned files under the target; returns (written, already there).

    A file that exists with other content is a conflict unless an earlier run of this
    bundle wrote it (`earlier`: rel -> sha256) or `force` is given: every conflict is
    reported at once and nothing is written."""
    earlier = earlier or {}
    conflicts: list[str] = []
    todo: list[tuple[RestoredFile, Path]] = []
    present: list[str] = []
    for item in planned:
        dest = _destination(target, item.rel)
        if dest.is_dir():
            conflicts.append(f"{item.rel}: a directory is in the file's place")
            continue
        if dest.exists():
            found = sha256_file(dest)
            if found == item.sha256:
                present.append(item.rel)
                continue
            if not force and earlier.get(item.rel) != found:
                conflicts.append(
                    f"{item.rel}: exists with sha256 {found}, bundle has {item.sha256}"
                )
                continue
        todo.append((item, dest))
    if conflicts:
        raise PatchConflictError(
            f"{target}: {len(conflicts)} workspace file(s) would be overwritten; "
            "nothing was written:\n" + "\n".join(f"  - {c}" for c in conflicts[:50]),
            hint="move them away, or pass --force to overwrite them",
        )
    for item, dest in todo:
        data = (bundle / item.member).read_bytes()
        atomic_write(dest, data, mode=0o755 if item.executable else 0o644)
    return [item.rel for item, _ in todo], present
