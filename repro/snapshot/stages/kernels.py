"""Stage `kernels`: the GPU code of every installed distribution (env/kernels.toml),
judged before anything is written for the GPUs `--gpu` and `--require-gpu` name.

The audit reads the installed files the scan read (RECORD's shared objects,
`repro.snapshot.kernels.audit`); the kernel sources the bundle carries come from the
caller (`sources`: the stage that gathers them hands its `KernelSource` rows in), so
the judgement knows which distribution can be rebuilt on the target. `--gpu` warns for
each distribution not native there; `--require-gpu` fails the pack, nothing written,
when a distribution has no code for that GPU and the bundle does not carry its source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from repro.bundle import layout
from repro.bundle.environment import EnvironmentFacts
from repro.bundle.kernels import KernelAudit, KernelSource, dump_kernels
from repro.errors import GpuCodeMissing
from repro.gpu.arch import Verdict
from repro.gpu.audit import Judgement, describe, judge_audit
from repro.gpu.targets import GpuTarget
from repro.snapshot.kernels.audit import installed_kernels
from repro.snapshot.stages.options import Progress
from repro.snapshot.stages.probe import Start


@dataclass(frozen=True)
class Kernels:
    audit: KernelAudit
    judgements: tuple[tuple[GpuTarget, Judgement], ...]  # for --gpu and --require-gpu
    warnings: tuple[str, ...]

    def members(self) -> Mapping[str, bytes]:
        return {layout.KERNELS_TOML: dump_kernels(self.audit)}


def audit(
    start: Start,
    facts: EnvironmentFacts,
    *,
    sources: tuple[KernelSource, ...] = (),
    say: Progress,
) -> Kernels:
    """env/kernels.toml's audit of `facts`' distributions, with `sources` (the kernel
    sources the bundle carries); `GpuCodeMissing` for a --require-gpu it cannot meet."""
    options = start.options
    skipped: list[str] = []
    say("reading the GPU code of every installed shared object")
    found = installed_kernels(facts, jobs=options.jobs, skipped=skipped.append)
    result = KernelAudit(found, tuple(sorted(sources, key=lambda s: s.name)))
    say(f"  {len(found)} distribution(s) carry GPU code")
    warnings = sorted(skipped)
    targets = tuple({t.capability: t for t in (*options.require_gpus, *options.gpus)}.values())
    required = {t.capability for t in options.require_gpus}
    judged: list[tuple[GpuTarget, Judgement]] = []
    missing: list[str] = []
    for target in targets:
        for judgement in judge_audit(result, (target.capability,)):
            judged.append((target, judgement))
            if judgement.verdict is Verdict.PASS:
                continue
            line = describe(judgement, target.label)
            if judgement.verdict is Verdict.FAIL and target.capability in required:
                if not judgement.rebuildable:
                    missing.append(line)
                    continue
                line += " (--require-gpu: it will be rebuilt there at unpack)"
            warnings.append(line)
    if missing:
        raise GpuCodeMissing(
            "--require-gpu: no code for that GPU, and the bundle does not carry the source: "
            + "; ".join(missing),
            hint="install builds with code for that GPU (their arch lists), or carry the "
            "source to rebuild them there ([kernels.<dist>] source in repro.toml); "
            "`repro pack --gpu` only warns",
        )
    return Kernels(result, tuple(judged), tuple(warnings))
