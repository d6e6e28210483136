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
from dataclasses import dataclass, replace
from pathlib import Path

from repro.bundle.weights import WeightPin
from repro.errors import InputError, SmallFileRefused
from repro.servecmd import HUB_ID
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
    present: bool = True  # False: the place the unit named held nothing when packed
    identity_from: str | None = None  # where repo_id was inferred from, for the report
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
        if not self.present:
            table["present"] = False
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


def absent_model(
    path: str, *, name: str, role: str, workspace: Path | None = None
) -> ModelReference:
    """A model the unit names at `path` that was not there when packed: its name, the
    path, and the identity its path says (the Hugging Face cache layout
    models--org--name/snapshots/<rev>); present = False."""
    match = _HF_SNAPSHOT.search(path)
    repo_id = f"{match.group('org')}/{match.group('name')}" if match else None
    where = recorded_path(Path(path), workspace) if path.startswith("/") else path
    return ModelReference(
        name=name,
        role=role,
        local_path=where,
        repo_id=repo_id,
        revision=match.group("rev") if match else None,
        total_bytes=0,
        file_count=0,
        small_files=(),
        copied=(),
        present=False,
        identity_from="its path (the Hugging Face cache layout)" if match else None,
    )


def hub_model(
    repo_id: str,
    *,
    name: str,
    role: str,
    caches: Sequence[Path] = (),
    hashing: WeightHashing | None = None,
) -> ModelReference:
    """A model a unit names by its repository id: the snapshot a Hugging Face cache of
    `caches` holds (refs/main) described, else an absent reference with repo_id."""
    for cache in caches:
        repo = cache / f"models--{repo_id.replace('/', '--')}"
        revision = _read_ref(repo / "refs" / "main")
        snapshot = repo / "snapshots" / revision if revision else None
        if snapshot is not None and snapshot.is_dir():
            ref = describe_model(snapshot, name=name, role=role, hashing=hashing)
            return replace(ref, repo_id=repo_id, revision=revision)
    return ModelReference(
        name=name,
        role=role,
        local_path="",
        repo_id=repo_id,
        revision=None,
        total_bytes=0,
        file_count=0,
        small_files=(),
        copied=(),
        present=False,
        identity_from="the launch command (a repository id)",
    )


def _read_ref(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if re.fullmatch(r"[0-9a-f]{7,64}", text) else None


def card_base_models(model_dir: Path) -> tuple[str, ...]:
    """The `base_model:` a model card's front matter (README.md between `---` lines)
    names: one value, or a YAML list of them; repository ids only."""
    card = model_dir / "README.md"
    try:
        if not card.is_file() or card.stat().st_size > SMALL_FILE_LIMIT:
            return ()
        lines = card.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return ()
    if not lines or lines[0].strip() != "---":
        return ()
    found: list[str] = []
    in_list = False
    for line in lines[1:]:
        if line.strip() == "---":
            break
        key, sep, value = line.partition(":")
        if sep and not line.startswith((" ", "\t", "-")):
            in_list = key.strip() == "base_model" and not value.strip()
            if key.strip() == "base_model" and value.strip():
                found.append(value.strip())
            continue
        if in_list and line.strip().startswith("- "):
            found.append(line.strip()[2:].strip())
    ids = (v.strip("'\"") for v in found)
    return tuple(v for v in ids if HUB_ID.fullmatch(v))


def infer_identities(refs: Sequence[ModelReference]) -> list[ModelReference]:
    """Absent models without an identity get one where the workspace says it: a drafter
    card's `base_model:` whose name is the absent model's (or the one base model, when
    exactly one target is absent)."""
    bases = [
        (base, ref.name)
        for ref in refs
        if ref.role == "drafter" and ref.present
        for base in _drafter_bases(ref)
    ]
    absent = [r for r in refs if not r.present and r.repo_id is None and r.role == "target"]
    out: list[ModelReference] = []
    for ref in refs:
        if ref in absent:
            named = [b for b in bases if b[0].split("/")[-1].lower() == ref.name.lower()]
            if not named and len(absent) == 1 and len({b[0] for b in bases}) == 1:
                named = bases[:1]
            if named:
                base, drafter = named[0]
                ref = replace(
                    ref, repo_id=base, identity_from=f"the base_model: of {drafter}'s model card"
                )
        out.append(ref)
    return out


def _drafter_bases(ref: ModelReference) -> tuple[str, ...]:
    card = next((path for name, path in ref.copied if name == "README.md"), None)
    return card_base_models(card.parent) if card is not None else ()


def absent_warning(ref: ModelReference) -> str:
    """The pack report's line for a model not present when packed."""
    where = f"at {ref.local_path}" if ref.local_path else "by its repository id"
    identity = (
        f"; identity {ref.repo_id}"
        + (f" @ {ref.revision}" if ref.revision else "")
        + (f" (from {ref.identity_from})" if ref.identity_from else "")
        if ref.repo_id
        else "; identity unknown (name it in repro.toml [models] as org/name)"
    )
    return (
        f"model {ref.name!r} ({ref.role}): a unit names it {where}, not present when "
        f"packed: recorded as a reference without files{identity}"
    )
