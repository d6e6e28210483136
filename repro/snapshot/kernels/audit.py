"""Which GPU architectures every installed distribution carries code for.

Every distribution the scan knows (a dist-info with RECORD) is read from its RECORD, as
the scan reads it; each file RECORD lists that is a shared object (`.so`, `.so.N`) inside
site-packages has its `.nv_fatbin` headers read by `repro.gpu.cubin.elf_archs` (pread of
a few bytes per header, never cuobjdump: torch has hundreds of them, libtorch_cuda.so
alone 1 GB), in threads. What comes back is env/kernels.toml's `[[distributions]]`: only
those with GPU code, each with the objects that carry some. Files RECORD lists but the
disk lacks, links and other non-regular files are not read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from repro.bundle.environment import DistributionFacts, EnvironmentFacts
from repro.bundle.kernels import KernelDistribution, kernel_distributions
from repro.errors import InputError
from repro.gpu.cubin import elf_archs, is_shared_object
from repro.wheel.record import join_record_path, read_record

Skipped = Callable[[str], None]
"""Told `dist: path: why` for each shared object that could not be read."""


@dataclass(frozen=True)
class _Candidate:
    name: str  # canonical
    version: str
    path: str  # relative to site-packages
    absolute: str


def _candidates(dists: Iterable[DistributionFacts], skipped: Skipped) -> list[_Candidate]:
    found = []
    for dist in dists:
        if dist.metadata_kind != "dist-info" or not dist.has_record:
            continue
        try:
            entries = read_record(Path(dist.metadata_dir) / "RECORD")
        except InputError as exc:
            skipped(f"{dist.normalized_name}: {exc.message}; its shared objects are not audited")
            continue
        prefix = os.path.normpath(dist.site_dir) + os.sep
        for entry in entries:
            if entry.path.startswith(("../", "/")) or not is_shared_object(entry.path):
                continue
            absolute = join_record_path(prefix, entry.path)
            found.append(_Candidate(dist.normalized_name, dist.version, entry.path, absolute))
    return found


def _archs(candidate: _Candidate, skipped: Skipped) -> tuple[str, ...]:
    try:
        mode = os.lstat(candidate.absolute).st_mode
        if not stat.S_ISREG(mode):
            return ()
        return tuple(sorted(elf_archs(Path(candidate.absolute))))
    except FileNotFoundError:
        return ()  # deleted since installed: the scan reports it
    except OSError as exc:
        skipped(f"{candidate.name}: {candidate.path}: cannot be read ({exc.strerror or exc})")
        return ()


def installed_kernels(
    facts: EnvironmentFacts,
    *,
    jobs: int | None = None,
    skipped: Skipped | None = None,
) -> tuple[KernelDistribution, ...]:
    """Every installed distribution with GPU code and its shared objects' archs, sorted."""
    tell: Skipped = skipped or (lambda message: None)
    candidates = _candidates(facts.distributions, tell)
    workers = max(1, min(32, jobs or (os.cpu_count() or 1) * 4, len(candidates) or 1))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kernels-") as pool:
        archs = list(pool.map(lambda c: _archs(c, tell), candidates))
    return kernel_distributions(
        (c.name, c.version, c.path, found) for c, found in zip(candidates, archs, strict=True)
    )
