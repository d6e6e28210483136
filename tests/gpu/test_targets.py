"""repro.gpu.targets: every form a `--gpu` value takes, and the values refused."""

from __future__ import annotations

import pytest

from repro.errors import UsageError
from repro.gpu.targets import PRODUCTS, parse_gpu, parse_gpus

CASES = [
    # (given, capability, sm, label)
    ("sm_103", (10, 3), "sm_103", "sm_103 (10.3)"),
    ("sm_103a", (10, 3), "sm_103", "sm_103a (10.3)"),
    ("sm_100f", (10, 0), "sm_100", "sm_100f (10.0)"),
    ("compute_120", (12, 0), "sm_120", "compute_120 (12.0)"),
    ("sm_120a", (12, 0), "sm_120", "sm_120a (12.0)"),
    ("sm_90", (9, 0), "sm_90", "sm_90 (9.0)"),
    ("10.3", (10, 3), "sm_103", "10.3"),
    ("12.1", (12, 1), "sm_121", "12.1"),
    ("8.6", (8, 6), "sm_86", "8.6"),
    ("B300", (10, 3), "sm_103", "B300 (10.3)"),
    ("b200", (10, 0), "sm_100", "b200 (10.0)"),
    ("H200", (9, 0), "sm_90", "H200 (9.0)"),
    ("H100", (9, 0), "sm_90", "H100 (9.0)"),
    ("RTX PRO 6000", (12, 0), "sm_120", "RTX PRO 6000 (12.0)"),
    ("NVIDIA RTX-PRO-6000", (12, 0), "sm_120", "NVIDIA RTX-PRO-6000 (12.0)"),
    ("  GB10 ", (12, 1), "sm_121", "GB10 (12.1)"),
]


@pytest.mark.parametrize(("given", "capability", "sm", "label"), CASES)
def test_parse_gpu(given: str, capability: tuple[int, int], sm: str, label: str) -> None:
    target = parse_gpu(given)
    assert (target.capability, target.sm, target.label) == (capability, sm, label)


@pytest.mark.parametrize("bad", ["", "sm_9", "9", "10.30", "sm_x0", "Z900", "ptx_90", "1.2.3"])
def test_a_value_that_names_no_gpu_is_a_usage_error_with_the_forms(bad: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_gpu(bad)
    assert repr(bad) in caught.value.message
    assert caught.value.hint is not None and "sm_103" in caught.value.hint
    assert all(name in caught.value.hint for name in ("B300", "H200", "RTXPRO6000"))


def test_parse_gpus_keeps_the_order_and_each_capability_once() -> None:
    targets = parse_gpus(["B300", "sm_120", "10.3", "H200", "sm_103a"])
    assert [t.given for t in targets] == ["B300", "sm_120", "H200"]
    assert parse_gpus([]) == ()


def test_every_product_names_a_capability_nvidia_lists() -> None:
    listed = {(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (12, 0), (12, 1)}
    assert set(PRODUCTS.values()) <= listed
