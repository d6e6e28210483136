"""What `repro pack` is asked to do (PackOptions) and what it did (PackResult)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.archive.common import Compression
from repro.bundle.delta import BaseRef
from repro.gpu.targets import GpuTarget
from repro.snapshot.facts.requirements import UnmetRequirement
from repro.snapshot.vault.build import WheelsMode

__all__ = ["PackOptions", "PackResult", "Progress", "WheelsMode", "default_cache_dir"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PackOptions:
    source: Path
    python: Path | None = None
    output: Path | None = None  # a file, a directory, or None for the current directory
    to_stdout: bool = False
    name: str | None = None
    version: str | None = None
    compression: Compression | None = None
    wheels: WheelsMode = "auto"
    check_index: bool = False
    pristine: Path | None = None
    units: tuple[str, ...] = ()
    jobs: int | None = None
    download: bool = True
    tool_wheels: bool = True
    cache_dir: Path | None = None
    rehash: bool = False  # read every file, not trusting the scan cache
    hash_weights: bool = True  # False (--no-hash-weights): weights pinned by size only
    sign: Path | None = None  # private key: sign MANIFEST.sha256 with ssh-keygen -Y sign
    # import torch & co. in the target (runtime facts, devices); None: repro.toml's
    # [env] import_modules, default False: read the key modules from their files
    import_modules: bool | None = None
    sbom: bool = False  # a CycloneDX SBOM of the bundle as env/sbom.cdx.json
    # the GPUs the bundle is meant for (repro.gpu.targets.parse_gpus): --gpu warns for each
    # distribution not native there, --require-gpu fails before writing where one has none
    gpus: tuple[GpuTarget, ...] = ()
    require_gpus: tuple[GpuTarget, ...] = ()
    # --base: the bundle (archive, URL, directory) a delta is packed against; None: full
    base: str | None = None
    # --caches: carry the engine's compile caches (docs/caches.md); None for the size:
    # repro.toml's [caches] max_size, else no bound
    caches: bool = False
    caches_max_size: int | None = None


@dataclass(frozen=True)
class DeltaSummary:
    """What a delta pack carried and what it left to its base."""

    base: BaseRef
    carried_members: int  # the files written, the manifest and its signature included
    carried_bytes: int
    base_members: int  # listed in the manifest, taken from the base
    base_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "base": {
                "name": self.base.name,
                "version": self.base.version,
                "manifest_sha256": self.base.manifest_sha256,
            },
            "carried_members": self.carried_members,
            "carried_bytes": self.carried_bytes,
            "base_members": self.base_members,
            "base_bytes": self.base_bytes,
        }


@dataclass(frozen=True)
class PackResult:
    path: Path | None
    name: str
    version: str
    distributions: int
    vault_wheels: tuple[str, ...]
    patched_files: tuple[str, ...]
    units: tuple[str, ...]
    models: tuple[str, ...]
    files: tuple[str, ...]
    members: int
    bundle_bytes: int
    warnings: tuple[str, ...]
    left_out: tuple[str, ...] = ()
    unmet_requirements: tuple[UnmetRequirement, ...] = ()
    kernel_sources: tuple[str, ...] = ()  # one line per carried source tree, with its size
    caches: tuple[str, ...] = ()  # one line per carried compile cache: size, key
    delta: DeltaSummary | None = None  # packed with --base

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path) if self.path else None,
            "name": self.name,
            "version": self.version,
            "distributions": self.distributions,
            "vault_wheels": list(self.vault_wheels),
            "patched_files": list(self.patched_files),
            "units": list(self.units),
            "models": list(self.models),
            "files": list(self.files),
            "members": self.members,
            "bundle_bytes": self.bundle_bytes,
            "warnings": list(self.warnings),
            "left_out": list(self.left_out),
            "kernel_sources": list(self.kernel_sources),
            "caches": list(self.caches),
            "unmet_requirements": [u.to_json() for u in self.unmet_requirements],
            "delta": self.delta.to_json() if self.delta is not None else None,
        }


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "repro"
