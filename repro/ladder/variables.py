"""${REPRO_VENV}, ${REPRO_HOME} and ${REPRO_MODELS} in a launch command: the target's
paths, filled in when the ladder reads the command and checked before it launches."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from repro.ladder.types import LaunchSpec
from repro.units.render import place_models

_VARIABLE = re.compile(r"\$\{(REPRO_[A-Z]+)\}")


def fill_variables(launch: LaunchSpec, variables: Mapping[str, str]) -> LaunchSpec:
    """${REPRO_VENV}, ${REPRO_HOME} and ${REPRO_MODELS} filled in argv, shell, env and
    cwd from `variables`; those it does not give stay as they are."""

    def fill(text: str) -> str:
        text = place_models(text, variables)  # a model's unit text: where it was found
        return _VARIABLE.sub(lambda m: variables.get(m.group(1), m.group(0)), text)

    return replace(
        launch,
        argv=tuple(fill(arg) for arg in launch.argv) if launch.argv is not None else None,
        shell=fill(launch.shell) if launch.shell is not None else None,
        env={name: fill(value) for name, value in launch.env.items()},
        cwd=Path(fill(str(launch.cwd))) if launch.cwd is not None else None,
    )


def unfilled_variables(launch: LaunchSpec) -> tuple[str, ...]:
    """The ${REPRO_*} variables a launch still names."""
    texts = [*(launch.argv or ()), launch.shell or "", *launch.env.values(), str(launch.cwd or "")]
    return tuple(sorted({m.group(1) for text in texts for m in _VARIABLE.finditer(text)}))
