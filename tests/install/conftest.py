"""Fixtures of the unpack side's tests: the real bundle pairs an upgrade moves between
(tests/support/upgrades.py), built once for each test module that asks for them."""

from __future__ import annotations

import pytest

from tests.support.upgrades import (
    OneWheelPair,
    UpgradePair,
    build_one_wheel_pair,
    build_upgrade_pair,
)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> UpgradePair:
    """demo 1 and 2: a patch changed, a wheel upgraded, one added, one removed."""
    return build_upgrade_pair(tmp_path_factory.mktemp("upgrade-pair"))


@pytest.fixture(scope="module")
def one_wheel(tmp_path_factory: pytest.TempPathFactory) -> OneWheelPair:
    """demo 1 and 2 where only one wheel changes, in full and as a delta."""
    return build_one_wheel_pair(tmp_path_factory.mktemp("one-wheel"))
