"""Stage `kernel sources`: the source trees of distributions built on this box, carried
under kernels/<dist>/ with the recipe that rebuilds them on the target
(repro.snapshot.kernels.sources), for env/kernels.toml's `[[sources]]`.

`kernel_sources` is the stage; its `sources` are what env/kernels.toml lists. Until the
audit's stage (which writes env/kernels.toml with every distribution's GPU code) takes
them, `interim_kernels_toml` writes that member itself, with the GPU code of the carried
distributions alone: what the rebuild's decision at unpack reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from repro.bundle import layout
from repro.bundle.kernels import KernelSource
from repro.snapshot.kernels.sources import CarriedSource, find_sources
from repro.snapshot.stages.options import Progress
from repro.snapshot.stages.probe import Environment, Start


@dataclass(frozen=True)
class KernelSources:
    carried: tuple[CarriedSource, ...]

    @property
    def sources(self) -> tuple[KernelSource, ...]:
        """env/kernels.toml's `[[sources]]`."""
        return tuple(c.source for c in self.carried)

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(w for c in self.carried for w in c.warnings)

    def members(self) -> dict[str, Path]:
        """kernels/<dist>/<rel> -> the file, for every carried tree."""
        out: dict[str, Path] = {}
        for carried in self.carried:
            out.update(carried.members())
        return out

    def described(self) -> tuple[str, ...]:
        """One line per carried tree, for the pack report and REPRODUCE.md."""
        return tuple(describe_source(c.source) for c in self.carried)


def describe_source(source: KernelSource) -> str:
    kind = "tracked files of its git checkout" if source.kind == "git" else "the tree"
    editable = ", editable install" if source.editable else ""
    return (
        f"{source.name} {source.version}: {source.files} files, {_size(source.size)} "
        f"({kind} at {source.origin}{editable}) under {layout.kernel_source(source.name)}"
    )


def _size(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB"


def kernel_sources(start: Start, env: Environment, say: Progress) -> KernelSources:
    """The trees to carry: every distribution installed from a local directory and each
    `[kernels.<dist>] source` of repro.toml."""
    carried = find_sources(env.dists, start.config, secret_values=start.secret_values)
    for item in carried:
        say(f"carrying the source of {describe_source(item.source)}")
    return KernelSources(carried)
