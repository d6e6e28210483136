"""bench/measure.py: the paired ratio every bench quotes (run i of A over run i of B,
alternated, then the median of those ratios and their range)."""

from __future__ import annotations

import pytest

from bench.measure import paired_ratios


def test_the_median_of_the_pairs_not_the_ratio_of_the_medians() -> None:
    # the ratio of the medians would say 3.0 (9 / 3); the pairs say 3, 1.5, 2.5 -> 2.5
    assert paired_ratios([9.0, 3.0, 10.0], [3.0, 2.0, 4.0]) == {
        "median": 2.5,
        "min": 1.5,
        "max": 3.0,
    }


def test_a_zero_denominator_is_left_out_and_lengths_must_agree() -> None:
    assert paired_ratios([4.0, 1.0], [2.0, 0.0]) == {"median": 2.0, "min": 2.0, "max": 2.0}
    with pytest.raises(ValueError):
        paired_ratios([1.0], [1.0, 2.0])
