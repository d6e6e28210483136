"""A distribution's GPU code judged for a device: native, PTX JIT only, or none.

Every shared object of a distribution that carries GPU code must run on the device for
the distribution to: its verdict is the worst of its objects' (`repro.gpu.arch`), and the
object that decides it is the first, by path, with that verdict.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from repro.bundle.kernels import KernelAudit, KernelDistribution
from repro.gpu.arch import ArchVerdict, Verdict, arch_compatible

_ORDER = {Verdict.PASS: 0, Verdict.WARN: 1, Verdict.FAIL: 2}

# How each verdict reads in a plan of the move.
WORDS = {Verdict.PASS: "native", Verdict.WARN: "PTX JIT (slow first start)", Verdict.FAIL: "none"}


@dataclass(frozen=True)
class Judgement:
    """One distribution on one capability."""

    name: str
    version: str
    capability: tuple[int, int]
    verdict: Verdict
    deciding: str  # the shared object that decides the verdict
    detail: ArchVerdict  # that object's verdict, with its message
    rebuildable: bool  # the bundle carries its source

    @property
    def words(self) -> str:
        return WORDS[self.verdict]


# Shared objects whose `.nv_fatbin` is not where their kernels are: the library keeps
# them elsewhere and loads them itself at run time, so the section does not decide where
# it runs. Seen on the GPU host (bench/results/gpu-h200-2026-12-04-inspect): the
# 286 MB libcufft.so.12 of nvidia-cufft 12.0 holds one 672-byte fatbin with an sm_75
# cubin (cuobjdump agrees) and runs on sm_90. Matched by file name up to `.so`.
SELF_LOADING = ("libcufft", "libcufftw")


def self_loading(path: str) -> bool:
    """The object loads its kernels itself: its fatbin's architectures decide nothing."""
    base = path.rsplit("/", 1)[-1]
    return base.split(".so", 1)[0] in SELF_LOADING


def judge_distribution(
    distribution: KernelDistribution, capability: tuple[int, int], *, rebuildable: bool = False
) -> Judgement:
    if not distribution.objects:
        raise ValueError(f"{distribution.name} carries no GPU code to judge")
    judged = [o for o in distribution.objects if not self_loading(o.path)]
    if not judged:
        first = distribution.objects[0]
        detail = ArchVerdict(
            Verdict.PASS,
            capability,
            None,
            f"{first.path} loads its kernels itself at run time; its .nv_fatbin "
            f"({', '.join(first.archs)}) does not decide where it runs",
        )
        return Judgement(
            distribution.name,
            distribution.version,
            capability,
            Verdict.PASS,
            first.path,
            detail,
            rebuildable,
        )
    verdicts = [(obj.path, arch_compatible(capability, obj.archs)) for obj in judged]
    worst = max(_ORDER[v.verdict] for _, v in verdicts)
    path, detail = next((p, v) for p, v in verdicts if _ORDER[v.verdict] == worst)
    return Judgement(
        distribution.name,
        distribution.version,
        capability,
        detail.verdict,
        path,
        detail,
        rebuildable,
    )


def judge_audit(
    audit: KernelAudit, capabilities: Iterable[tuple[int, int]]
) -> tuple[Judgement, ...]:
    """Every distribution with GPU code on every capability, by name then capability."""
    carried = {s.name for s in audit.sources}
    caps = tuple(dict.fromkeys(capabilities))
    return tuple(
        judge_distribution(d, cap, rebuildable=d.name in carried)
        for d in sorted(audit.distributions, key=lambda d: d.name)
        if d.objects
        for cap in caps
    )


def worst(judgements: Iterable[Judgement]) -> Verdict:
    found = [j.verdict for j in judgements]
    return max(found, key=lambda v: _ORDER[v]) if found else Verdict.PASS


def describe(judgement: Judgement, label: str) -> str:
    """`flash-attn 2.8.3 on B300 (10.3): none (flash_attn_2_cuda.so: ...)`: one line of a
    plan, for a warning or a preflight check; `label` names the GPU as the user gave it."""
    line = (
        f"{judgement.name} {judgement.version} on {label}: {judgement.words} "
        f"({judgement.deciding}: {judgement.detail.message})"
    )
    if judgement.verdict is not Verdict.PASS and judgement.rebuildable:
        line += "; the bundle carries its source, so it can be rebuilt there"
    return line
