"""repro.gpu.audit: a distribution's objects judged together, the worst deciding."""

from __future__ import annotations

import pytest

from repro.bundle.kernels import KernelAudit, KernelDistribution, KernelObject, KernelSource
from repro.gpu.arch import Verdict
from repro.gpu.audit import describe, judge_audit, judge_distribution, worst

DIST = KernelDistribution(
    "kern",
    "1.0",
    (
        KernelObject("kern/_a.so", ("sm_100f", "sm_90a")),
        KernelObject("kern/_b.so", ("compute_90", "sm_120")),
        KernelObject("kern/lib/_c.so.1", ("sm_103a",)),
    ),
)
CASES = [
    # (capability, verdict, deciding object, words)
    ((9, 0), Verdict.FAIL, "kern/lib/_c.so.1", "none"),
    ((10, 0), Verdict.FAIL, "kern/lib/_c.so.1", "none"),
    ((10, 3), Verdict.WARN, "kern/_b.so", "PTX JIT (slow first start)"),
    ((12, 0), Verdict.FAIL, "kern/_a.so", "none"),
    ((8, 6), Verdict.FAIL, "kern/_a.so", "none"),
]


@pytest.mark.parametrize(("capability", "verdict", "deciding", "words"), CASES)
def test_the_worst_object_decides(
    capability: tuple[int, int], verdict: Verdict, deciding: str, words: str
) -> None:
    judged = judge_distribution(DIST, capability)
    assert (judged.verdict, judged.deciding, judged.words) == (verdict, deciding, words)
    assert judged.detail.verdict is verdict
    assert (judged.name, judged.version, judged.capability) == ("kern", "1.0", capability)
    assert not judged.rebuildable


def test_every_object_native_is_native_and_the_first_object_decides() -> None:
    dist = KernelDistribution(
        "k", "2", (KernelObject("a.so", ("sm_90",)), KernelObject("b.so", ("sm_90a",)))
    )
    judged = judge_distribution(dist, (9, 0), rebuildable=True)
    assert (judged.verdict, judged.deciding, judged.words) == (Verdict.PASS, "a.so", "native")
    assert judged.rebuildable


def test_a_distribution_without_objects_is_not_judged() -> None:
    with pytest.raises(ValueError, match="carries no GPU code"):
        judge_distribution(KernelDistribution("k", "1", ()), (9, 0))


def test_judge_audit_knows_the_carried_sources_and_orders_by_name_then_gpu() -> None:
    other = KernelDistribution("aaa", "3", (KernelObject("x.so", ("sm_90",)),))
    source = KernelSource("kern", "1.0", "tree", "/src/kern", 3, 100)
    audit = KernelAudit((DIST, other), (source,))
    judged = judge_audit(audit, [(9, 0), (10, 3), (9, 0)])
    assert [(j.name, j.capability, j.rebuildable) for j in judged] == [
        ("aaa", (9, 0), False),
        ("aaa", (10, 3), False),
        ("kern", (9, 0), True),
        ("kern", (10, 3), True),
    ]
    assert worst(judged) is Verdict.FAIL
    assert worst(judged[:1]) is Verdict.PASS
    assert worst([]) is Verdict.PASS


def test_describe_names_the_gpu_the_object_and_the_rebuild() -> None:
    judged = judge_distribution(DIST, (9, 0), rebuildable=True)
    line = describe(judged, "H200 (9.0)")
    assert line.startswith("kern 1.0 on H200 (9.0): none (kern/lib/_c.so.1: 9.0 (sm_90): ")
    assert line.endswith("the bundle carries its source, so it can be rebuilt there")
    native = judge_distribution(DIST, (10, 3))
    assert "rebuilt" not in describe(native, "B300 (10.3)")


# nvidia-cufft 12.0's libcufft.so.12 as the GPU host's audit read it: one sm_75 cubin in
# its .nv_fatbin, the kernels kept elsewhere and loaded by cuFFT itself; it runs on sm_90.
CUFFT = KernelDistribution(
    "nvidia-cufft", "12.0.0.61", (KernelObject("nvidia/cu13/lib/libcufft.so.12", ("sm_75",)),)
)


@pytest.mark.parametrize("capability", [(9, 0), (10, 3), (12, 0)])
def test_a_library_that_loads_its_kernels_itself_is_not_judged_by_its_fatbin(
    capability: tuple[int, int],
) -> None:
    judged = judge_distribution(CUFFT, capability)
    assert judged.verdict is Verdict.PASS
    assert judged.deciding == "nvidia/cu13/lib/libcufft.so.12"
    assert "loads its kernels itself" in judged.detail.message


def test_the_other_objects_of_its_distribution_are_still_judged() -> None:
    mixed = KernelDistribution(
        "nvidia-cufft",
        "12.0.0.61",
        (*CUFFT.objects, KernelObject("nvidia/cu13/lib/libother.so.1", ("sm_80",))),
    )
    judged = judge_distribution(mixed, (9, 0))
    assert judged.verdict is Verdict.FAIL
    assert judged.deciding == "nvidia/cu13/lib/libother.so.1"


def test_only_cufft_by_name_is_self_loading() -> None:
    from repro.gpu.audit import self_loading

    assert self_loading("nvidia/cu13/lib/libcufft.so.12")
    assert self_loading("nvidia/cufft/lib/libcufftw.so.11")
    assert not self_loading("nvidia/cu13/lib/libcufile.so.0")
    assert not self_loading("torch/lib/libtorch_cuda.so")
