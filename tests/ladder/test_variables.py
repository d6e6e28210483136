"""Tests of repro.ladder.variables: ${REPRO_*} in a launch command."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.ladder.types import LaunchSpec
from repro.ladder.variables import fill_variables, unfilled_variables

TARGET = {"REPRO_VENV": "/srv/venv", "REPRO_HOME": "/srv/home", "REPRO_MODELS": "/models"}


def _launch(**fields: object) -> LaunchSpec:
    return LaunchSpec("serve", 30000, "sglang", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "filled"),
    [
        ("${REPRO_VENV}/bin/python", "/srv/venv/bin/python"),
        ("${REPRO_HOME}:${REPRO_MODELS}", "/srv/home:/models"),
        ("$REPRO_VENV/bin/python", "$REPRO_VENV/bin/python"),  # only the braced form
        ("${REPRO_OTHER}/x", "${REPRO_OTHER}/x"),  # not given: kept as it is
        ("${HOME}/x", "${HOME}/x"),  # not a REPRO_ variable
        ("${repro_venv}", "${repro_venv}"),
    ],
)
def test_fill_variables_fills_argv_shell_env_and_cwd(text: str, filled: str) -> None:
    launch = _launch(argv=(text, "--x"), shell=text, env={"A": text}, cwd=Path(text))
    out = fill_variables(launch, TARGET)
    assert out.argv == (filled, "--x")
    assert out.shell == filled
    assert dict(out.env) == {"A": filled}
    assert out.cwd == Path(filled)


def test_fill_variables_keeps_none_fields_and_the_rest_of_the_spec() -> None:
    launch = _launch(argv=("${REPRO_VENV}/bin/sglang",), expected_text="Paris", unit="a.service")
    out = fill_variables(launch, TARGET)
    assert out.shell is None and out.cwd is None
    assert (out.name, out.port, out.engine) == ("serve", 30000, "sglang")
    assert (out.expected_text, out.unit) == ("Paris", "a.service")
    assert launch.argv == ("${REPRO_VENV}/bin/sglang",)  # the original is unchanged


def test_a_value_holding_a_variable_is_not_expanded_again() -> None:
    out = fill_variables(_launch(argv=("${REPRO_HOME}",)), {"REPRO_HOME": "${REPRO_VENV}"})
    assert out.argv == ("${REPRO_VENV}",)


@pytest.mark.parametrize(
    ("launch", "names"),
    [
        (_launch(argv=("/bin/true",)), ()),
        (_launch(argv=("${REPRO_VENV}/bin/x", "${REPRO_VENV}")), ("REPRO_VENV",)),
        (_launch(shell="cd ${REPRO_HOME} && ${REPRO_MODELS}"), ("REPRO_HOME", "REPRO_MODELS")),
        (_launch(argv=("x",), env={"P": "${REPRO_MODELS}"}), ("REPRO_MODELS",)),
        (_launch(argv=("x",), cwd=Path("${REPRO_HOME}/w")), ("REPRO_HOME",)),
        (_launch(argv=("${HOME}", "$REPRO_VENV")), ()),
    ],
)
def test_unfilled_variables_names_each_once_sorted(
    launch: LaunchSpec, names: tuple[str, ...]
) -> None:
    assert unfilled_variables(launch) == names


def test_what_fill_leaves_is_what_unfilled_reports() -> None:
    launch = _launch(argv=("${REPRO_VENV}/bin/x", "${REPRO_MODELS}/m"), cwd=Path("${REPRO_HOME}"))
    out = fill_variables(launch, {"REPRO_VENV": "/v"})
    assert unfilled_variables(out) == ("REPRO_HOME", "REPRO_MODELS")
