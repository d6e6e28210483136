"""How the torch rung judges the facts its script measured on GPUs.

CI has no GPU, so these feed the judging functions the facts document a GPU run
produces (the shape rung_torch.py prints); the lead runs the real thing on an H200.
"""

from __future__ import annotations

from typing import Any

import pytest

from repro.ladder.rungs import check_arch, check_matmul

H200 = {"index": 0, "name": "NVIDIA H200", "capability": [9, 0]}
RTX_PRO_6000 = {"index": 1, "name": "NVIDIA RTX PRO 6000 Blackwell", "capability": [12, 0]}


def matmul(device: str, rel_err: Any, finite: bool = True) -> dict[str, Any]:
    return {
        "device": device,
        "dtype": "bfloat16",
        "size": 8192,
        "rel_err": rel_err,
        "finite": finite,
        "tflops": 612.5,
    }


@pytest.mark.parametrize(
    ("entry", "ok"),
    [
        (matmul("cuda:0", 3.1e-3), True),
        (matmul("cuda:0", 1e-2), True),
        (matmul("cuda:0", 1.5e-2), False),
        (matmul("cuda:0", "nan", finite=False), False),
        (matmul("cuda:0", 1e-3, finite=False), False),
        (
            {"device": "cuda:0", "error": "RuntimeError: CUDA error: no kernel image is available"},
            False,
        ),
    ],
)
def test_bf16_matmul_judgement(entry: dict[str, Any], ok: bool) -> None:
    errors, notes = check_matmul({"matmul": [entry]}, cpu=False)
    assert (not errors) is ok
    if ok:
        assert notes == [f"cuda:0 bfloat16 612.5 TFLOP/s err {entry['rel_err']:.1e}"]


def test_float32_cpu_tolerance_is_tighter() -> None:
    entry = {"device": "cpu", "dtype": "float32", "rel_err": 5e-4, "finite": True, "tflops": 0.01}
    errors, _ = check_matmul({"matmul": [entry]}, cpu=True)
    assert errors and "allowed 0.0001" in errors[0]


def test_arch_check_per_gpu() -> None:
    facts = {"arch_list": ["sm_80", "sm_90"], "devices": [H200, RTX_PRO_6000]}
    errors, warnings, verdicts = check_arch(facts)
    assert verdicts == [
        {"device": 0, "verdict": "pass", "match": "sm_90"},
        {"device": 1, "verdict": "fail", "match": None},
    ]
    assert errors == [
        "GPU 1 (NVIDIA RTX PRO 6000 Blackwell) 12.0 (sm_120): no code in the arch list runs "
        "on this device: sm_80, sm_90"
    ]
    assert warnings == []


def test_arch_check_warns_on_ptx_only() -> None:
    facts = {"arch_list": ["sm_90", "compute_90"], "devices": [RTX_PRO_6000]}
    errors, warnings, _ = check_arch(facts)
    assert errors == []
    assert len(warnings) == 1 and "JIT" in warnings[0]
