"""Facts about the key modules (torch, sglang, ...) read from installed files, never imported.

Importing a CUDA torch in the target costs seconds and hundreds of MB; what pack records about it
is on disk anyway: `torch/version.py` holds `__version__`, `cuda`, `hip` and `git_version`
as plain assignments (parsed with `ast`, never executed), and `torch/lib/libtorch_cuda.so`
holds the kernels, whose architectures `repro.gpu.cubin` reads from the ELF's fat-binary headers.
`probe_target` runs the probe and fills the key modules either way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from packaging.utils import canonicalize_name

from repro.bundle.environment import DistributionFacts, EnvironmentFacts, ModuleFacts, TorchFacts
from repro.gpu.cubin import elf_archs
from repro.gpu.torchversion import TORCH_VERSION_FILE, read_torch_version_file
from repro.probe.environment import KEY_MODULES
from repro.snapshot.facts.environment import probe_environment

TORCH_CUDA_LIBRARY = Path("torch") / "lib" / "libtorch_cuda.so"
_ARCH = re.compile(r"^(sm|compute)_(\d+)([a-z]*)$")


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
