"""Where a unit expects a model, as the bundle's units name it, and how to fetch one.

Pack writes a model directory a unit names into the unit as `${REPRO_HOME}/<path>` (a
model inside the workspace, recorded relative to it) or `${REPRO_MODELS}/<its
directory's name>` (one outside it, recorded by its absolute path); a repository id
(`org/name`) stays as it is, for the engine to find in the Hugging Face cache. The
unpacker renders each unit at the place where it found the model (repro.install.deploy
.models): it replaces the unit's text for the model (`unit_token`) with that place.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from repro.bundle import layout
from repro.bundle.info import ModelRef


def unit_token(ref: ModelRef) -> str | None:
    """The text the bundle's units name the model by; None for a repository id (or a
    model at the workspace's top, which is the workspace itself)."""
    if not ref.local_path or ref.local_path == ".":
        return None
    if ref.in_workspace:
        return f"${{REPRO_HOME}}/{ref.local_path}"
    return f"${{REPRO_MODELS}}/{dir_name(ref)}"


def dir_name(ref: ModelRef) -> str:
    """The model directory's name on the target: its recorded path's last part (what
    the units name under ${REPRO_MODELS}), else the reference's name."""
    if ref.local_path and not ref.in_workspace:
        return posixpath.basename(ref.local_path.rstrip("/")) or ref.name
    return ref.name


def expected_place(ref: ModelRef) -> str:
    """Where the unit expects the model, for people to read."""
    token = unit_token(ref)
    if token is None:
        return f"the Hugging Face cache (the unit names {ref.repo_id or ref.name})"
    if ref.in_workspace:
        return f"TARGET/{ref.local_path} ({token})"
    return (
        f"{token}: TARGET/{layout.MODELS}/{dir_name(ref)}, or DIR/{dir_name(ref)} with "
        f"--models DIR; unpack also looks at {ref.local_path} and the Hugging Face cache"
    )


def fetch_command(ref: ModelRef, dest: str) -> str | None:
    """`hf download` of the model into `dest`; None where its identity is unknown."""
    if not ref.repo_id:
        return None
    revision = f" --revision {ref.revision}" if ref.revision else ""
    return f"hf download {ref.repo_id}{revision} --local-dir {dest}"


def hf_caches() -> tuple[Path, ...]:
    """The Hugging Face hub caches of this box, each once: $HF_HUB_CACHE, $HF_HOME/hub,
    ~/.cache/huggingface/hub. Where pack looks for a model named by its repository id
    and where unpack's one rule looks for any model."""
    found: list[Path] = []
    if os.environ.get("HF_HUB_CACHE"):
        found.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        found.append(Path(os.environ["HF_HOME"]) / "hub")
    found.append(Path.home() / ".cache" / "huggingface" / "hub")
    return tuple(dict.fromkeys(found))
