"""Model references: small files are copied, weights are only described.

A 590 GB checkpoint never enters a bundle. What does: the files that say what
the model is (config, generation config, tokenizer config, model card), and a
reference to the weights (repository id and revision where known, local path,
size, file count, sha256 of each small file) so the unpacker can tell whether
the weights it finds are the same.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.bundle.weights import WeightPin
from repro.errors import InputError, SmallFileRefused
from repro.smallfile import small_file_sha256
from repro.snapshot.workspace.files import secret_in_file
from repro.snapshot.workspace.weights import WeightHashing, pin_weights

COPIED_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "README.md",
)
SMALL_FILE_LIMIT = 1 << 20
_HF_SNAPSHOT = re.compile(
    r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<rev>[0-9a-f]{7,64})"
)


@dataclass(frozen=True)
class ModelReference:
    name: str
    role: str
    local_path: str
    repo_id: str | None
    revision: str | None
    total_bytes: int
    file_count: int
    small_files: tuple[tuple[str, str], ...]
    copied: tuple[tuple[str, Path], ...]
    large_files: tuple[tuple[str, int], ...] = ()
    # (path in the model directory, why) of files not described or not copied
    refused: tuple[tuple[str, str], ...] = ()
    # each large file pinned: size, sha256 (unless --no-hash-weights), safetensors facts
    weights: tuple[WeightPin, ...] = ()
    weights_hashed: bool = False

    def warnings(self) -> list[str]:
        where = self.local_path.rstrip("/")
        return [f"model {self.name!r}: {where}/{rel}: {why}" for rel, why in self.refused]

    def to_toml(self) -> dict[str, object]:
        table: dict[str, object] = {
            "name": self.name,
            "role": self.role,
            "local_path": self.local_path,
            "total_bytes": self.total_bytes,
            "file_count": self.file_count,
            "small_files": dict(self.small_files),
        }
        if self.weights:
            table["weights_hashed"] = self.weights_hashed
            table["weights"] = [pin.to_toml() for pin in self.weights]
        elif self.large_files:
            table["large_files"] = dict(self.large_files)
        if self.repo_id:
            table["repo_id"] = self.repo_id
        if self.revision:
            table["revision"] = self.revision
        return table


def _hf_identity(model_dir: Path) -> tuple[str | None, str | None]:
    """Repository id and revision from a Hugging Face cache path or the config."""
    match = _HF_SNAPSHOT.search(model_dir.resolve().as_posix())
    if match is None:
        match = _HF_SNAPSHOT.search(model_dir.as_posix())
    if match:
        return f"{match.group('org')}/{match.group('name')}", match.group("rev")
    config = model_dir / "config.json"
    if config.is_file():
        try:
            data = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"{config}: not valid JSON: {exc}") from exc
        name = data.get("_name_or_path") if isinstance(data, dict) else None
        if isinstance(name, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", name):
            return name, None
    return None, None


def recorded_path(model_dir: Path, workspace: Path | None) -> str:
    """How a model's place is recorded: relative to the workspace when inside it (the
    target lays the workspace out again), absolute otherwise. Never relative to the
    directory pack was started from."""
    absolute = Path(os.path.abspath(model_dir))
    if workspace is not None:
        home = Path(os.path.abspath(workspace))
        for inner, outer in ((absolute, home), (absolute.resolve(), home.resolve())):
            if inner.is_relative_to(outer):
                return inner.relative_to(outer).as_posix() or "."
    return absolute.as_posix()


def describe_model(
    model_dir: Path,
    *,
    name: str,
    role: str,
    workspace: Path | None = None,
    secret_values: Sequence[str] = (),
    hashing: WeightHashing | None = None,
) -> ModelReference:
    """What pack records of the model in `model_dir`: its small files hashed (the
    COPIED_FILES among them copied), its large files pinned (`hashing`: how; None
    hashes them without a cache)."""
    if not model_dir.is_dir():
        raise InputError(f"model {name!r}: {model_dir} is not a directory")
    total = 0
    count = 0
    small: list[tuple[str, str]] = []
    large: list[tuple[str, int]] = []
    refused: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(model_dir, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            rel = path.relative_to(model_dir).as_posix()
            # HF caches keep snapshots as symlinks into blobs/: follow those for size.
            try:
                info = path.stat()
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):  # a FIFO would block the read forever
                refused.append((rel, "not a regular file: not read"))
                continue
            size = info.st_size
            total += size
            count += 1
            if size <= SMALL_FILE_LIMIT:
                # read bounded (a file swapped for a FIFO or a /proc file after the
                # stat): links are followed as above, the model's owner placed them
                try:
                    digest = small_file_sha256(path, within=[Path("/")], limit=SMALL_FILE_LIMIT)
                except SmallFileRefused as exc:
                    total -= size
                    count -= 1
                    refused.append((rel, exc.message.removeprefix(f"{path}: ")))
                    continue
                small.append((rel, digest))
            else:
                large.append((rel, size))
    homes = _link_homes(model_dir, workspace)
    copied_list: list[tuple[str, Path]] = []
    for filename in COPIED_FILES:
        path = model_dir / filename
        if path.is_symlink() and path.is_file():
            target = path.resolve()
            if not any(target.is_relative_to(home) for home in homes):
                why = (
                    f"a symbolic link to {os.readlink(path)}, outside the model directory "
                    "and the workspace: not copied"
                )
                refused.append((filename, why))
                continue
        if path.is_file() and stat.S_ISREG(path.stat().st_mode):
            # a model card or config that holds a token is never carried (files/ likewise)
            secret = secret_in_file(path, secret_values)
            if secret is not None:
                refused.append((filename, f"looks like a credential ({secret}): not copied"))
                continue
            copied_list.append((filename, path))
    copied = tuple(copied_list)
    repo_id, revision = _hf_identity(model_dir)
    pinned = pin_weights(model_dir, large, name=name, hashing=hashing or WeightHashing())
    refused += pinned.refused
    return ModelReference(
        name=name,
        role=role,
        local_path=recorded_path(model_dir, workspace),
        repo_id=repo_id,
        revision=revision,
        total_bytes=total,
        file_count=count,
        small_files=tuple(small),
        copied=copied,
        large_files=tuple(large),
        refused=tuple(refused),
        weights=pinned.pins,
        weights_hashed=pinned.hashed,
    )


def _link_homes(model_dir: Path, workspace: Path | None) -> list[Path]:
    """Where a copied file's link may lead: the model directory, the Hugging Face cache
    repository that holds it (snapshots link into its blobs/), the workspace."""
    real = model_dir.resolve()
    homes = [real]
    match = _HF_SNAPSHOT.search(real.as_posix())
    if match is not None:
        homes.append(Path(real.as_posix()[: match.start()] + match.group(0).split("/")[0]))
    if workspace is not None:
        homes.append(workspace.resolve())
    return homes
