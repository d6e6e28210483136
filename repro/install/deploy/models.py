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
from repro.bundle.modelplace import dir_name, hf_caches, unit_token
from repro.bundle.modelplace import fetch_command as modelplace_fetch
from repro.errors import SmallFileRefused
from repro.install.deploy.weights import check_weights, pinned_summary
from repro.smallfile import small_file_sha256

ModelStatus = Literal["found", "missing", "different"]
# pack describes a file of at most 1 MiB as small (repro.snapshot.workspace.models): nothing
# larger is read for a small file's digest here, whatever bundle.toml names
SMALL_FILE_LIMIT = 1 << 20


@dataclass(frozen=True)
class ModelCheck:
    """Where one model is on this box (the one rule, `locate_model`): `path` is where
    it was found (found, different), or where to put it (missing)."""

    name: str
    status: ModelStatus
    path: str | None
    detail: str
    fetch: str | None
    found: bool = False  # `path` holds the model (found or different): units name it
    present_when_packed: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "path": self.path,
            "detail": self.detail,
            "fetch": self.fetch,
            "found": self.found,
            "present_when_packed": self.present_when_packed,
        }


def _cache_snapshots(ref: ModelRef) -> list[Path]:
    """The snapshots of the model in the Hugging Face caches: its revision's, else the
    one refs/main names, else every one."""
    if not ref.repo_id:
        return []
    out: list[Path] = []
    for cache in hf_caches():
        repo = cache / f"models--{ref.repo_id.replace('/', '--')}"
        snapshots = repo / "snapshots"
        if ref.revision:
            if "/" not in ref.revision and ref.revision not in (".", ".."):
                out.append(snapshots / ref.revision)
            continue
        try:
            main = (repo / "refs" / "main").read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            main = ""
        if main and "/" not in main and main not in (".", ".."):
            out.append(snapshots / main)
        elif snapshots.is_dir():
            out.extend(sorted(snapshots.iterdir()))
    return out


def candidates(ref: ModelRef, models_dir: Path | None, home: Path | None = None) -> list[Path]:
    """Where the model may be, in this order: --models, its recorded path (its place in
    the restored workspace for a model packed from inside it, its absolute path for one
    from outside), the Hugging Face caches (by repo_id and revision), TARGET/models
    (`home` is the target). A relative local_path is never looked up against the
    current directory."""
    out: list[Path] = []
    if models_dir is not None:
        out += [models_dir / dir_name(ref), models_dir / ref.name]
        if ref.repo_id:
            out.append(models_dir / ref.repo_id.split("/")[-1])
    if ref.local_path and ref.in_workspace:
        if home is not None:
            out.append(home / ref.local_path)
    elif ref.local_path:
        out.append(Path(ref.local_path))
    out += _cache_snapshots(ref)
    if home is not None:
        out += [
            layout.at(home, layout.MODELS) / dir_name(ref),
            layout.at(home, layout.MODELS) / ref.name,
        ]
    return list(dict.fromkeys(out))


def default_place(ref: ModelRef, models_dir: Path | None, home: Path | None) -> Path | None:
    """Where a model found nowhere goes: where its unit names it (${REPRO_HOME}/<path>,
    ${REPRO_MODELS}/<name>); None for a repository id (the Hugging Face cache)."""
    if ref.in_workspace and ref.local_path:
        return home / ref.local_path if home is not None else None
    if not ref.local_path:
        return None
    base = (
        models_dir
        if models_dir is not None
        else (layout.at(home, layout.MODELS) if home is not None else Path(layout.MODELS))
    )
    return base / dir_name(ref)


def fetch_command(
    ref: ModelRef, models_dir: Path | None, *, into: Path | None = None, home: Path | None = None
) -> str | None:
    """`hf download REPO --revision REV --local-dir PATH` into where the unit expects
    the model (or `into`); None where its identity is unknown."""
    if not ref.repo_id:
        return None
    dest = into or default_place(ref, models_dir, home)
    if dest is None:  # a repository id: into the Hugging Face cache
        revision = f" --revision {ref.revision}" if ref.revision else ""
        return f"hf download {ref.repo_id}{revision}"
    return modelplace_fetch(ref, str(dest))


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


def _holds_files(candidate: Path) -> bool:
    try:
        return any(True for _ in candidate.iterdir())
    except OSError:
        return False


def locate_model(
    ref: ModelRef,
    models_dir: Path | None,
    home: Path | None = None,
    *,
    verify_weights: bool = False,
    jobs: int | None = None,
    progress: ProgressSink | None = None,
) -> ModelCheck:
    """The one rule for where a model is, used by unpack's models step, the units it
    renders and `repro verify`: the first of `candidates` that holds it. Found: the
    units name that place; its weights checked by size and safetensors header (with
    `verify_weights` by sha256 too, `jobs` files at a time, `progress` hearing the
    bytes). Nowhere: `missing`, with where to put it and the command that fetches it."""
    partial: ModelCheck | None = None
    known = bool(ref.small_files or ref.large_files)
    for candidate in candidates(ref, models_dir, home):
        if not candidate.is_dir():
            continue
        if not known:
            # not present when packed: nothing to compare, a directory with files is it
            if _holds_files(candidate):
                return ModelCheck(
                    ref.name,
                    "found",
                    str(candidate),
                    "not present when packed: no files recorded to compare",
                    None,
                    found=True,
                    present_when_packed=ref.present,
                )
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
                fetch_command(ref, models_dir, into=candidate, home=home),
                present_when_packed=ref.present,
            )
            continue
        different = _differing_small_files(ref, candidate)
        if different:
            return ModelCheck(
                ref.name,
                "different",
                str(candidate),
                f"{candidate}: {len(different)} small file(s) differ or are missing: "
                + ", ".join(different[:5]),
                fetch_command(ref, models_dir, into=candidate, home=home),
                found=True,
                present_when_packed=ref.present,
            )
        weights = check_weights(ref, candidate, hashes=verify_weights, jobs=jobs, progress=progress)
        if weights:
            return ModelCheck(
                ref.name,
                "different",
                str(candidate),
                f"{candidate}: {len(weights)} weight file(s) differ: " + "; ".join(weights[:5]),
                fetch_command(ref, models_dir, into=candidate, home=home),
                found=True,
                present_when_packed=ref.present,
            )
        pinned = pinned_summary(ref, hashes=verify_weights)
        return ModelCheck(
            ref.name,
            "found",
            str(candidate),
            f"{len(ref.small_files)} small file(s) match" + (f", {pinned}" if pinned else ""),
            None,
            found=True,
            present_when_packed=ref.present,
        )
    if partial is not None:
        return partial
    return _nowhere(ref, models_dir, home)


def _nowhere(ref: ModelRef, models_dir: Path | None, home: Path | None) -> ModelCheck:
    place = default_place(ref, models_dir, home)
    fetch = fetch_command(ref, models_dir, home=home)
    looked = "--models, " if models_dir is not None else ""
    size = (
        f"{ref.file_count} files, {ref.total_bytes / 2**30:.2f} GiB"
        if ref.present
        else "not present when packed"
    )
    where = f"put it at {place}" if place is not None else "put it in the Hugging Face cache"
    how = (
        f"; fetch it: {fetch}"
        if fetch
        else "; its identity is unknown: copy the model there from where it came from"
    )
    return ModelCheck(
        ref.name,
        "missing",
        str(place) if place is not None else None,
        f"not under {looked}its recorded path ({ref.local_path or ref.repo_id}), the "
        f"Hugging Face cache or TARGET/models ({size}): {where}{how}",
        fetch,
        present_when_packed=ref.present,
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
        locate_model(
            ref, models_dir, home, verify_weights=verify_weights, jobs=jobs, progress=progress
        )
        for ref in refs
    ]


def model_placements(refs: Sequence[ModelRef], checks: Sequence[ModelCheck]) -> dict[str, str]:
    """The unit text of each model found (`unit_token`) and the place it was found: the
    values the units and launch commands are rendered with (repro.units.render places
    them), so the unit names the place where the model is. A model found nowhere is
    not here: its unit keeps ${REPRO_MODELS}/<name> (or ${REPRO_HOME}/<path>)."""
    out: dict[str, str] = {}
    for ref, check in zip(refs, checks, strict=True):
        token = unit_token(ref)
        if token is not None and check.found and check.path is not None:
            out[token] = check.path
    return out
