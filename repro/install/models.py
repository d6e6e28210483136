"""Is each referenced model's weights present on this box, and the same?

Never downloads: reports found / missing / different with the command that
would fetch the weights.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from repro.bundle import ModelRef
from repro.hashing import sha256_file

ModelStatus = Literal["found", "missing", "different"]


@dataclass(frozen=True)
class ModelCheck:
    name: str
    status: ModelStatus
    path: str | None
    detail: str
    fetch: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "path": self.path,
            "detail": self.detail,
            "fetch": self.fetch,
        }


def _hf_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    return Path(home) / "hub"


def candidates(ref: ModelRef, models_dir: Path | None) -> list[Path]:
    out: list[Path] = []
    if models_dir is not None:
        out.append(models_dir / ref.name)
        if ref.local_path:
            out.append(models_dir / Path(ref.local_path).name)
        if ref.repo_id:
            out.append(models_dir / ref.repo_id.split("/")[-1])
    if ref.local_path:
        out.append(Path(ref.local_path))
    if ref.repo_id:
        snapshots = _hf_cache() / f"models--{ref.repo_id.replace('/', '--')}" / "snapshots"
        if ref.revision:
            out.append(snapshots / ref.revision)
        elif snapshots.is_dir():
            out.extend(sorted(snapshots.iterdir()))
    return out


def fetch_command(ref: ModelRef, models_dir: Path | None) -> str | None:
    if not ref.repo_id:
        return None
    dest = (models_dir or Path("models")) / ref.name
    revision = f" --revision {ref.revision}" if ref.revision else ""
    return f"huggingface-cli download {ref.repo_id}{revision} --local-dir {dest}"


def check_model(ref: ModelRef, models_dir: Path | None) -> ModelCheck:
    fetch = fetch_command(ref, models_dir)
    for candidate in candidates(ref, models_dir):
        if not candidate.is_dir():
            continue
        different = []
        for rel, digest in sorted(ref.small_files.items()):
            path = candidate / rel
            if not path.is_file() or sha256_file(path) != digest:
                different.append(rel)
        if different:
            return ModelCheck(
                ref.name,
                "different",
                str(candidate),
                f"{len(different)} small file(s) differ or are missing: "
                + ", ".join(different[:5]),
                fetch,
            )
        return ModelCheck(
            ref.name,
            "found",
            str(candidate),
            f"{len(ref.small_files)} small file(s) match",
            None,
        )
    return ModelCheck(
        ref.name,
        "missing",
        None,
        f"not under --models, its recorded path or the Hugging Face cache "
        f"({ref.file_count} files, {ref.total_bytes / 2**30:.2f} GiB)",
        fetch,
    )


def check_models(refs: Sequence[ModelRef], models_dir: Path | None) -> list[ModelCheck]:
    return [check_model(ref, models_dir) for ref in refs]
