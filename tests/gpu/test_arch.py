"""NVIDIA architecture compatibility rules, as a table."""

from __future__ import annotations

import pytest

from repro.gpu.arch import Verdict, arch_compatible, parse_arch

# torch 2.11 cu130 wheels: TORCH_CUDA_ARCH_LIST="7.5;8.0;8.6;9.0;10.0;11.0;12.0+PTX"
TORCH_CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_110", "sm_120", "compute_120"]
# torch cu128 wheels (2.7-2.9): "7.0;7.5;8.0;8.6;9.0;10.0;12.0" (the PTX added only on some)
TORCH_CU128 = ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
# torch cu126 wheels: up to Hopper, with Hopper PTX
TORCH_CU126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "compute_90"]

CASES = [
    # capability, arch list, verdict, matching entry
    ((12, 0), TORCH_CU130, Verdict.PASS, "sm_120"),  # RTX PRO 6000 Blackwell
    ((10, 3), TORCH_CU130, Verdict.PASS, "sm_100"),  # B300 runs sm_100 SASS
    ((10, 0), TORCH_CU130, Verdict.PASS, "sm_100"),  # B200
    ((9, 0), TORCH_CU130, Verdict.PASS, "sm_90"),  # H100 / H200
    ((8, 9), TORCH_CU130, Verdict.PASS, "sm_86"),  # L40S: sm_86 runs on 8.9
    ((12, 1), TORCH_CU130, Verdict.PASS, "sm_120"),  # GB10
    ((11, 0), TORCH_CU130, Verdict.PASS, "sm_110"),  # Thor
    ((12, 0), TORCH_CU128, Verdict.PASS, "sm_120"),
    ((10, 3), TORCH_CU128, Verdict.PASS, "sm_100"),
    ((12, 0), TORCH_CU126, Verdict.WARN, "compute_90"),  # PTX JIT only
    ((10, 0), TORCH_CU126, Verdict.WARN, "compute_90"),
    ((9, 0), TORCH_CU126, Verdict.PASS, "sm_90"),
    ((12, 0), ["sm_90"], Verdict.FAIL, None),  # SASS never crosses majors
    ((10, 0), ["sm_90", "sm_120"], Verdict.FAIL, None),  # nor goes backwards
    ((9, 0), ["sm_90a"], Verdict.PASS, "sm_90a"),
    ((10, 0), ["sm_90a"], Verdict.FAIL, None),  # arch-specific: exactly 9.0
    ((10, 3), ["sm_100a"], Verdict.FAIL, None),  # arch-specific: not 10.3 either
    ((10, 3), ["sm_100f"], Verdict.PASS, "sm_100f"),  # family-specific: 10.x, minor >= 0
    ((10, 0), ["sm_103f"], Verdict.FAIL, None),  # family-specific: not below its minor
    ((12, 0), ["sm_100f"], Verdict.FAIL, None),  # nor outside the family
    ((12, 0), ["compute_90"], Verdict.WARN, "compute_90"),
    ((8, 0), ["compute_90"], Verdict.FAIL, None),  # PTX is not backwards either
    ((10, 0), ["compute_90a"], Verdict.FAIL, None),  # arch-specific PTX: 9.0 only
    ((10, 3), ["compute_100f"], Verdict.WARN, "compute_100f"),
    ((12, 0), ["compute_100f"], Verdict.FAIL, None),
    ((9, 0), ["sm_80", "sm_90", "sm_90a"], Verdict.PASS, "sm_90a"),
    ((9, 0), [], Verdict.FAIL, None),
]


@pytest.mark.parametrize(("capability", "arch_list", "verdict", "matched"), CASES)
def test_arch_compatible(
    capability: tuple[int, int], arch_list: list[str], verdict: Verdict, matched: str | None
) -> None:
    result = arch_compatible(capability, arch_list)
    assert result.verdict is verdict, result.message
    assert result.matched == matched
    assert f"sm_{capability[0]}{capability[1]}" in result.message


def test_warn_message_mentions_jit() -> None:
    result = arch_compatible((12, 0), ["compute_90"])
    assert "JIT" in result.message


def test_fail_message_lists_the_arch_list() -> None:
    result = arch_compatible((12, 0), ["sm_80", "sm_90"])
    assert "sm_80, sm_90" in result.message


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("sm_90a", ("sass", 9, 0, "a")),
        ("sm_120", ("sass", 12, 0, "")),
        ("compute_100f", ("ptx", 10, 0, "f")),
        ("sm_103", ("sass", 10, 3, "")),
        ("SM_86", ("sass", 8, 6, "")),
    ],
)
def test_parse_arch(entry: str, expected: tuple[str, int, int, str]) -> None:
    target = parse_arch(entry)
    assert target is not None
    assert (target.kind, target.major, target.minor, target.suffix) == expected


@pytest.mark.parametrize("entry", ["gfx90a", "sm_9", "compute", "sm_90x", ""])
def test_parse_arch_ignores_other_entries(entry: str) -> None:
    assert parse_arch(entry) is None
