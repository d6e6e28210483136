"""The bundle's compile caches restored where their key holds (docs/caches.md).

Each cache env/caches.toml lists is compared, part by part of its kind's key
(repro.bundle.caches.key_differences), with this box: the GPUs' capabilities as
nvidia-smi reports them (none under --cpu or without a GPU), the driver, and the
rebuilt venv's torch, Triton, torch's CUDA runtime and the engine's version, read from
its installed files (nothing of the venv runs). A cache whose key holds is copied to
TARGET/cache/<kind>/ and its variable written to TARGET/cache/caches.env, which the
rendered units read last (repro.install.deploy.services) and the server rung gives its
launch (repro.install.smoke); one whose key does not hold is left out with one line
naming each part that differs.

Triton's group files (`__grp__*.json`) name their kernels' files by absolute path; each
is rewritten to name the restored copy (a name outside the cache is dropped), or
Triton would miss every kernel at the new place. The engine writes into the restored
caches as it runs: they are not checked for drift.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.bundle import layout
from repro.bundle.caches import (
    CacheKey,
    CacheKind,
    CarriedCache,
    cache_kind,
    capabilities,
    engine_key,
    key_differences,
    load_caches,
)
from repro.errors import InstallError
from repro.gpu.info import GpuInventory
from repro.gpu.torchversion import TORCH_VERSION_FILE, read_torch_version_file
from repro.install.transaction.atomic import write_if_changed
from repro.install.venv.site import read_installed, site_packages_of
from repro.units.dropin import read_values
from repro.units.render import render_env_text

CACHE_DIR = "cache"  # TARGET/cache/<kind>/
ENV_FILE = "caches.env"  # TARGET/cache/caches.env: each restored cache's variable
# the line the units' template gets, filled in by repro.units.render like any other
ENV_FILE_TEMPLATE = f"${{REPRO_HOME}}/{CACHE_DIR}/{ENV_FILE}"


def carried_caches(bundle: Path) -> tuple[CarriedCache, ...]:
    """env/caches.toml, checked; none for a bundle packed without caches."""
    path = layout.at(bundle, layout.CACHES_TOML)
    if not path.is_file():
        return ()
    return load_caches(path.read_bytes(), source=layout.CACHES_TOML)


@dataclass(frozen=True)
class TargetFacts:
    """This box and the rebuilt venv, as far as a cache's key asks."""

    capability: tuple[str, ...]
    driver: str | None
    versions: Mapping[str, str]  # canonical distribution name -> version
    cuda: str | None  # torch's CUDA runtime

    def key(self, kind: CacheKind) -> CacheKey:
        engine = engine_key(kind, self.versions)
        return CacheKey(
            capability=self.capability,
            torch=self.versions.get("torch"),
            triton=self.versions.get("triton") or self.versions.get("pytorch-triton"),
            cuda=self.cuda,
            driver=self.driver,
            engine=engine,
        ).only(kind.parts)


def target_facts(interpreter: Path, inventory: GpuInventory, *, cpu: bool) -> TargetFacts:
    """The key's parts on this box: GPUs from `inventory` (none with `cpu`), versions
    from the venv's dist-info, torch's CUDA from its torch/version.py."""
    gpus = () if cpu else inventory.gpus
    site = site_packages_of(interpreter)
    version_file = site / TORCH_VERSION_FILE
    cuda = read_torch_version_file(version_file).cuda if version_file.is_file() else None
    return TargetFacts(
        capability=capabilities(f"{g.capability[0]}.{g.capability[1]}" for g in gpus),
        driver=next((g.driver for g in gpus if g.driver), None),
        versions=read_installed(interpreter),
        cuda=cuda,
    )


@dataclass(frozen=True)
class CacheOutcome:
    kind: str
    restored: bool
    line: str  # what unpack says of it
    directory: Path | None = None  # where it was restored
    files: int = 0

    def to_facts(self) -> dict[str, object]:
        facts: dict[str, object] = {"restored": self.restored, "line": self.line}
        if self.directory is not None:
            facts["directory"] = str(self.directory)
            facts["files"] = self.files
        return facts


def restore_caches(
    bundle: Path, target: Path, here: TargetFacts, caches: Sequence[CarriedCache]
) -> list[CacheOutcome]:
    """Each carried cache whose key holds on this box, copied under TARGET/cache/; then
    TARGET/cache/caches.env for those (removed when none is restored)."""
    outcomes: list[CacheOutcome] = []
    for cache in caches:
        kind = cache.spec
        differences = key_differences(kind, cache.key, here.key(kind))
        if differences:
            line = f"{kind.name}: left out: {'; '.join(differences)}"
            outcomes.append(CacheOutcome(kind.name, False, line))
            continue
        directory = cache_directory(target, kind)
        count = _copy_cache(bundle, target, cache, directory)
        line = (
            f"{kind.name}: restored {count} file(s) into {directory} "
            f"({', '.join(kind.variables)} in {target / CACHE_DIR / ENV_FILE})"
        )
        outcomes.append(CacheOutcome(kind.name, True, line, directory, count))
    write_env_file(target, [o for o in outcomes if o.restored])
    return outcomes


def cache_directory(target: Path, kind: CacheKind) -> Path:
    """Where the cache's files go (below TARGET/cache/<kind>, the variable's value)."""
    base = target / CACHE_DIR / kind.name
    return base / kind.subdir if kind.subdir else base


def _copy_cache(bundle: Path, target: Path, cache: CarriedCache, directory: Path) -> int:
    """The cache's files from the kept bundle, each written beside its place and renamed
    over it: a run cut short leaves whole files, and the rerun writes them again."""
    source = layout.at(bundle, layout.cache_file(cache.kind))
    _refuse_links(target, directory)
    count = 0
    for root, dirs, names in os.walk(source):
        dirs.sort()
        for name in sorted(names):
            path = Path(root, name)
            rel = path.relative_to(source)
            dest = directory / rel
            _refuse_links(directory, dest.parent)
            dest.parent.mkdir(parents=True, exist_ok=True)
            partial = dest.with_name(f".{dest.name}.repro-partial")
            if cache.kind == "triton" and name.startswith("__grp__") and name.endswith(".json"):
                partial.write_bytes(_regrouped(path.read_bytes(), cache.source, directory))
            else:
                shutil.copyfile(path, partial)
            os.replace(partial, dest)
            count += 1
    return count


def _refuse_links(top: Path, directory: Path) -> None:
    """Nothing from `top` down to `directory` is a symbolic link: a cache is never
    written through one planted in the target."""
    path = directory
    while True:
        if path.is_symlink():
            raise InstallError(
                f"{path} is a symbolic link; refusing to restore a compile cache through it",
                hint=f"remove it (the caches step writes {top} itself), then run unpack again",
            )
        if path == top or path == path.parent or top not in path.parents:
            return
        path = path.parent


def _regrouped(data: bytes, source: str, directory: Path) -> bytes:
    """A Triton group file whose `child_paths` name the restored files: each path under
    the packed cache's directory now under `directory`, any other dropped."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return data
    children = document.get("child_paths") if isinstance(document, dict) else None
    if not isinstance(children, dict):
        return data
    prefix = source.rstrip("/") + "/"
    moved: dict[str, str] = {}
    for name, path in children.items():
        if isinstance(path, str) and path.startswith(prefix):
            rel = Path(path[len(prefix) :])
            if rel.parts and ".." not in rel.parts and not rel.is_absolute():
                moved[name] = str(directory / rel)
    return json.dumps({**document, "child_paths": moved}).encode()


def write_env_file(target: Path, restored: Sequence[CacheOutcome]) -> None:
    """TARGET/cache/caches.env: each restored cache's variable set to its place, as
    systemd's environment-file parser reads it (repro.units.render)."""
    path = target / CACHE_DIR / ENV_FILE
    _refuse_links(target, path.parent)
    if not restored:
        path.unlink(missing_ok=True)
        return
    lines = [
        "# written by repro unpack: the compile caches restored for this box\n",
        *(
            f"{variable}=${{REPRO_HOME}}/{CACHE_DIR}/{o.kind}\n"
            for o in restored
            for variable in cache_kind(o.kind).variables
        ),
    ]
    text = render_env_text("".join(lines), {"REPRO_HOME": str(target)}, source=str(path))
    write_if_changed(path, text.encode("utf-8"))


def cache_environment(target: Path) -> dict[str, str]:
    """The variables TARGET/cache/caches.env sets (none when no cache was restored)."""
    path = target / CACHE_DIR / ENV_FILE
    if path.is_symlink() or not path.is_file():
        return {}
    return read_values(path.read_text(encoding="utf-8"))
