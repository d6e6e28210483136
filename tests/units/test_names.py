"""Tests of repro.units.names: systemd unit names a bundle carries."""

from __future__ import annotations

import pytest

from repro.errors import InputError
from repro.units.names import UNIT_NAME_MAX, UNIT_SUFFIXES, VARIABLES, validate_unit_name


@pytest.mark.parametrize(
    "name",
    [
        "sglang.service",
        "sglang@0.service",
        "sglang@.service",
        "bench-nightly.timer",
        "model_cache.path",
        "srv.socket",
        "serving.target",
        "data-models.mount",
        "a:b.service",
        "x" * (UNIT_NAME_MAX - len(".service")) + ".service",
    ],
)
def test_accepted_names(name: str) -> None:
    validate_unit_name(name, source="services/")


@pytest.mark.parametrize(
    "name",
    [
        "sglang",
        "sglang.conf",
        "sglang.slice",
        ".service",
        "-.mount",
        "-sglang.service",
        "sg lang.service",
        "sg/lang.service",
        "../sglang.service",
        "sglang@a@b.service",
        "séance.service",
        "x" * (UNIT_NAME_MAX - len(".service") + 1) + ".service",
    ],
)
def test_refused_names_name_the_source_and_the_name(name: str) -> None:
    with pytest.raises(InputError) as caught:
        validate_unit_name(name, source="ws/services")
    assert (
        caught.value.message == f"ws/services: {name!r} is not a systemd unit name repro installs"
    )
    assert caught.value.hint is not None and ".service" in caught.value.hint


def test_constants() -> None:
    assert set(UNIT_SUFFIXES) == {".service", ".socket", ".timer", ".path", ".target", ".mount"}
    assert VARIABLES == ("REPRO_VENV", "REPRO_HOME", "REPRO_MODELS")
