"""Patches a workspace already keeps as files: `patches/full/<key>/<rest>` (the patched
file) and `patches/diffs/<key>/<rest>.diff`, mapped through repro.toml's
[patches.workspace] map to a distribution and its path in site-packages."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from repro.bundle.environment import EnvironmentFacts
from repro.bundle.patchset import PatchKind
from repro.config import WorkspaceTarget
from repro.errors import ConfigError
from repro.snapshot.scan.compare import PatchedFile
from repro.wheel.record import read_record


@dataclass(frozen=True)
class WorkspacePatch:
    file: PatchedFile
    content: bytes
    diff: str | None
    source: Path  # the file under patches/full/


def _target(
    rest: str, mapping: Mapping[str, WorkspaceTarget]
) -> tuple[WorkspaceTarget, str] | None:
    """The longest map key that is a directory prefix of `rest`."""
    for key in sorted(mapping, key=len, reverse=True):
        prefix = key.strip("/") + "/"
        if rest.startswith(prefix):
            return mapping[key], rest[len(prefix) :]
    return None


def load_workspace_patches(
    directory: Path,
    mapping: Mapping[str, WorkspaceTarget],
    *,
    facts: EnvironmentFacts | None = None,
) -> list[WorkspacePatch]:
    full = directory / "full"
    if not full.is_dir():
        raise ConfigError(f"{directory}: no full/ directory of patched files")
    records: dict[str, dict[str, str | None]] = {}
    patches: list[WorkspacePatch] = []
    unmapped: list[str] = []
    for path in sorted(p for p in full.rglob("*") if p.is_file()):
        rest = path.relative_to(full).as_posix()
        found = _target(rest, mapping)
        if found is None:
            unmapped.append(rest)
            continue
        target, tail = found
        site_path = f"{target.prefix}/{tail}" if target.prefix else tail
        version, pristine, listed = "", None, False
        dist_facts = facts.distribution(target.dist) if facts else None
        if dist_facts is not None:
            version = dist_facts.version
            if dist_facts.normalized_name not in records and dist_facts.has_record:
                entries = read_record(Path(dist_facts.metadata_dir) / "RECORD")
                records[dist_facts.normalized_name] = {e.path: e.sha256 for e in entries}
            record = records.get(dist_facts.normalized_name, {})
            listed = site_path in record
            pristine = record.get(site_path)
        content = path.read_bytes()
        diff_path = directory / "diffs" / f"{rest}.diff"
        diff = diff_path.read_text(encoding="utf-8") if diff_path.is_file() else None
        kind: PatchKind = "modified" if listed or facts is None else "added"
        patches.append(
            WorkspacePatch(
                file=PatchedFile(
                    dist=dist_facts.name if dist_facts else target.dist,
                    version=version,
                    path=site_path,
                    kind=kind,
                    pristine_sha256=pristine,
                    patched_sha256=hashlib.sha256(content).hexdigest(),
                    size=len(content),
                ),
                content=content,
                diff=diff,
                source=path,
            )
        )
    if unmapped:
        raise ConfigError(
            f"{full}: no [patches.workspace] map entry for: {', '.join(unmapped[:10])}",
            hint="map each directory under full/ to its distribution in repro.toml",
        )
    return patches
