"""Facts about the key modules (torch, sglang, ...) read from installed files, never imported.

Importing a CUDA torch in the target costs seconds and hundreds of MB; what pack records about it
is on disk anyway: `torch/version.py` holds `__version__`, `cuda`, `hip` and `git_version`
as plain assignments (parsed with `ast`, never executed), and `torch/lib/libtorch_cuda.so`
holds the kernels, whose architectures `repro.gpu.cubin` reads from the ELF's fat-binary headers.
`probe_target` runs the probe and fills the key modules either way.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.utils import canonicalize_name

from repro.bundle.environment import DistributionFacts, EnvironmentFacts, ModuleFacts, TorchFacts
from repro.gpu.cubin import elf_archs
from repro.probe.environment import KEY_MODULES
from repro.snapshot.facts.environment import probe_environment

TORCH_VERSION_FILE = Path("torch") / "version.py"
TORCH_CUDA_LIBRARY = Path("torch") / "lib" / "libtorch_cuda.so"
VERSION_FILE_LIMIT = 1 << 20  # torch's is < 1 KiB; anything this large is not a version file
_VERSION_NAMES = ("__version__", "cuda", "hip", "git_version")
_ARCH = re.compile(r"^(sm|compute)_(\d+)([a-z]*)$")


@dataclass(frozen=True)
class TorchVersionFile:
    """The string assignments of torch/version.py (None: absent or not a string)."""

    version: str | None = None
    cuda: str | None = None
    hip: str | None = None
    git_version: str | None = None
    error: str | None = None


def read_torch_version_file(path: Path) -> TorchVersionFile:
    """Parse torch/version.py without executing it: module-level `NAME = 'text'` (or
    `NAME: T = 'text'`) for __version__, cuda, hip and git_version. The last assignment of a
    name wins, as it would when the file runs; any other value reads as None."""
    try:
        with path.open("rb") as stream:
            data = stream.read(VERSION_FILE_LIMIT + 1)
    except OSError as exc:
        return TorchVersionFile(error=f"{path}: cannot read: {exc.strerror or exc}")
    if len(data) > VERSION_FILE_LIMIT:
        return TorchVersionFile(error=f"{path}: larger than {VERSION_FILE_LIMIT} bytes")
    try:
        tree = ast.parse(data, filename=str(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return TorchVersionFile(error=f"{path}: not valid Python: {exc}")
    found: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        text = value.value if isinstance(value, ast.Constant) else None
        for target in targets:
            if isinstance(target, ast.Name) and target.id in _VERSION_NAMES:
                found[target.id] = text if isinstance(text, str) else None
    return TorchVersionFile(
        version=found.get("__version__"),
        cuda=found.get("cuda"),
        hip=found.get("hip"),
        git_version=found.get("git_version"),
    )


def arch_sort_key(arch: str) -> tuple[int, int, str, int, str]:
    """sm_75 < sm_80 < sm_90 < sm_90a < compute_90 < sm_100 < sm_120: by number, then
    suffix, SASS before PTX; entries of another shape last, by text."""
    match = _ARCH.match(arch)
    if match is None:
        return (1, 0, "", 0, arch)
    prefix, number, suffix = match.groups()
    return (0, int(number), suffix, 0 if prefix == "sm" else 1, arch)


def sorted_archs(archs: set[str]) -> tuple[str, ...]:
    return tuple(sorted(archs, key=arch_sort_key))


def _site_dirs(facts: EnvironmentFacts, dist: DistributionFacts) -> list[Path]:
    dirs: list[Path] = []
    for text in (dist.site_dir, facts.python.purelib, facts.python.platlib):
        if text and Path(text) not in dirs:
            dirs.append(Path(text))
    return dirs


def _package_dir(module: str, site_dirs: list[Path]) -> tuple[Path, Path] | None:
    """(site dir, the module's __init__.py or module file) of the first site dir holding it."""
    for site in site_dirs:
        for candidate in (site / module / "__init__.py", site / f"{module}.py"):
            if candidate.is_file():
                return site, candidate
    return None


def torch_facts_from_files(site: Path) -> tuple[str | None, TorchFacts]:
    """torch's `__version__` and build facts from the files under `site`."""
    version_file = read_torch_version_file(site / TORCH_VERSION_FILE)
    library = site / TORCH_CUDA_LIBRARY
    archs: set[str] = set()
    error = version_file.error
    if library.is_file():
        try:
            archs = elf_archs(library)
        except OSError as exc:
            error = f"{library}: cannot read: {exc.strerror or exc}"
    return version_file.version, TorchFacts(
        cuda=version_file.cuda,
        hip=version_file.hip,
        git_version=version_file.git_version,
        arch_list=sorted_archs(archs),
        cuda_available=False,
        device_count=0,
        devices=(),
        error=error,
    )


def module_facts_from_files(facts: EnvironmentFacts) -> tuple[ModuleFacts, ...]:
    """A ModuleFacts (probed="files") for each key module whose distribution is installed."""
    by_name: Mapping[str, DistributionFacts] = {d.normalized_name: d for d in facts.distributions}
    modules = []
    for module, dist_names in KEY_MODULES:
        dist = next(
            (by_name[n] for n in map(canonicalize_name, dist_names) if n in by_name),
            None,
        )
        if dist is None:
            continue
        located = _package_dir(module, _site_dirs(facts, dist))
        version = None
        torch = None
        if module == "torch" and located is not None:
            version, torch = torch_facts_from_files(located[0])
        modules.append(
            ModuleFacts(
                module=module,
                distribution=dist.name,
                distribution_version=dist.version,
                version=version,
                file=str(located[1]) if located else None,
                error=None,
                torch=torch,
                probed="files",
            )
        )
    modules.sort(key=lambda m: m.module)
    return tuple(modules)


def with_module_files(facts: EnvironmentFacts) -> EnvironmentFacts:
    """`facts` with its key modules read from installed files (replacing any it had)."""
    return replace(facts, modules=module_facts_from_files(facts))


def probe_target(
    python: Path,
    *,
    import_modules: bool = False,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
) -> EnvironmentFacts:
    """Probe the environment of `python`, its key modules imported in the target
    (`import_modules`: runtime versions, CUDA availability, devices, torch's own arch list)
    or, by default, read from their installed files (nothing of the target is imported)."""
    if import_modules:
        return probe_environment(python, timeout=timeout, env=env, imports=True)
    return with_module_files(probe_environment(python, timeout=timeout, env=env, imports=False))


def probed_by_import(facts: EnvironmentFacts | None) -> bool:
    """Whether the key modules of `facts` were imported (bundles made before files-only
    probing say nothing, and always imported)."""
    return facts is not None and any(m.probed == "import" for m in facts.modules)
