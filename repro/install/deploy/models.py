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

from repro.bundle import layout
from repro.bundle.info import ModelRef
from repro.bundle.manifest import ProgressSink
from repro.errors import SmallFileRefused
from repro.install.deploy.weights import check_weights, pinned_summary
from repro.smallfile import small_file_sha256

ModelStatus = Literal["found", "missing", "different"]
# pack describes a file of at most 1 MiB as small (repro.snapshot.workspace.models): nothing
# larger is read for a small file's digest here, whatever bundle.toml names
SMALL_FILE_LIMIT = 1 << 20


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


def candidates(ref: ModelRef, models_dir: Path | None, home: Path | None = None) -> list[Path]:
    """Where the weights may be: --models, the model's place in the restored workspace
    (a model packed from inside it) or its absolute path (one from outside), the HF cache.
    A relative local_path is never looked up against the current directory."""
    out: list[Path] = []
    if models_dir is not None:
        out.append(models_dir / ref.name)
        if ref.local_path:
            out.append(models_dir / Path(ref.local_path).name)
        if ref.repo_id:
            out.append(models_dir / ref.repo_id.split("/")[-1])
    if ref.local_path and ref.in_workspace:
        if home is not None:
            out.append(home / ref.local_path)
    elif ref.local_path:
        out.append(Path(ref.local_path))
    if ref.repo_id:
        snapshots = _hf_cache() / f"models--{ref.repo_id.replace('/', '--')}" / "snapshots"
        if ref.revision:
            out.append(snapshots / ref.revision)
        elif snapshots.is_dir():
            out.extend(sorted(snapshots.iterdir()))
    return out


def fetch_command(
    ref: ModelRef, models_dir: Path | None, *, into: Path | None = None
) -> str | None:
    if not ref.repo_id:
        return None
    dest = into or (models_dir or Path(layout.MODELS)) / ref.name
    revision = f" --revision {ref.revision}" if ref.revision else ""
    return f"huggingface-cli download {ref.repo_id}{revision} --local-dir {dest}"


def _missing_weights(ref: ModelRef, candidate: Path) -> list[str]:
    """The weight files `candidate` lacks (one of another size is `different`: its
    check is `check_weights`)."""
    return [rel for rel in sorted(ref.large_files) if not os.path.exists(candidate / rel)]


def _homes(candidate: Path) -> list[Path]:
    """Where a small file of `candidate` may lead: the model directory, and for a
    snapshot of the Hugging Face cache its repository (snapshots link into blobs/)."""
    homes = [candidate]
    if candidate.parent.name == "snapshots" and candidate.parent.parent.name.startswith("models--"):
        homes.append(candidate.parent.parent)
    return homes


def _differing_small_files(ref: ModelRef, candidate: Path) -> list[str]:
    """The small files of `ref` that `candidate` lacks or holds otherwise, each with why.
    Each read is bounded (repro.smallfile): never a non-regular file, never past the
    model directory, never more than SMALL_FILE_LIMIT bytes."""
    homes = _homes(candidate)
    out = []
    for rel, digest in sorted(ref.small_files.items()):
        path = candidate / rel
        if not os.path.lexists(path):
            out.append(f"{rel} (missing)")
            continue
        try:
            found = small_file_sha256(path, within=homes, limit=SMALL_FILE_LIMIT)
        except SmallFileRefused as exc:
            out.append(f"{rel} ({exc.message.removeprefix(f'{path}: ')})")
            continue
        if found != digest:
            out.append(f"{rel} (differs)")
    return out


def check_model(
    ref: ModelRef,
    models_dir: Path | None,
    home: Path | None = None,
    *,
    verify_weights: bool = False,
    jobs: int | None = None,
    progress: ProgressSink | None = None,
) -> ModelCheck:
    """The model's status: found where its small files and weights match (weights by
    size and safetensors header; with `verify_weights` by sha256 too, `jobs` files at
    a time, `progress` hearing the bytes), different, or missing."""
    fetch = fetch_command(ref, models_dir)
    partial: ModelCheck | None = None
    for candidate in candidates(ref, models_dir, home):
        if not candidate.is_dir():
            continue
        weights = _missing_weights(ref, candidate)
        if weights:
            size = sum(ref.large_files.values())
            partial = partial or ModelCheck(
                ref.name,
                "missing",
                str(candidate),
                f"{candidate} holds the model's small files but not its weights: "
                f"{len(weights)} of {len(ref.large_files)} weight file(s) missing "
                f"({size / 2**30:.2f} GiB in all): " + ", ".join(weights[:5]),
                fetch_command(ref, models_dir, into=candidate),
            )
            continue
        different = _differing_small_files(ref, candidate)
        if different:
            return ModelCheck(
                ref.name,
                "different",
                str(candidate),
                f"{len(different)} small file(s) differ or are missing: "
                + ", ".join(different[:5]),
                fetch,
            )
        weights = check_weights(ref, candidate, hashes=verify_weights, jobs=jobs, progress=progress)
        if weights:
            return ModelCheck(
                ref.name,
                "different",
                str(candidate),
                f"{len(weights)} weight file(s) differ: " + "; ".join(weights[:5]),
                fetch,
            )
        pinned = pinned_summary(ref, hashes=verify_weights)
        return ModelCheck(
            ref.name,
            "found",
            str(candidate),
            f"{len(ref.small_files)} small file(s) match" + (f", {pinned}" if pinned else ""),
            None,
        )
    if partial is not None:
        return partial
    return ModelCheck(
        ref.name,
        "missing",
        None,
        f"not under --models, its recorded path or the Hugging Face cache "
        f"({ref.file_count} files, {ref.total_bytes / 2**30:.2f} GiB)",
        fetch,
    )


def check_models(
    refs: Sequence[ModelRef],
    models_dir: Path | None,
    *,
    home: Path | None = None,
    verify_weights: bool = False,
    jobs: int | None = None,
    progress: ProgressSink | None = None,
) -> list[ModelCheck]:
    return [
        check_model(
            ref, models_dir, home, verify_weights=verify_weights, jobs=jobs, progress=progress
        )
        for ref in refs
    ]
