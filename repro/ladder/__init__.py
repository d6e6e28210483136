"""The smoke-test ladder: from `python -c` to a real generation on a launched server."""

from repro.ladder.registry import RUNG_NAMES, RUNGS, Rung
from repro.ladder.runner import parse_rungs, run_ladder
from repro.ladder.types import (
    AppliedPatch,
    KernelCheck,
    LadderReport,
    LadderSpec,
    LaunchSpec,
    RungResult,
    RungStatus,
    Timeouts,
    UnreadyModel,
)

__all__ = [
    "RUNGS",
    "RUNG_NAMES",
    "AppliedPatch",
    "KernelCheck",
    "LadderReport",
    "LadderSpec",
    "LaunchSpec",
    "Rung",
    "RungResult",
    "RungStatus",
    "Timeouts",
    "UnreadyModel",
    "parse_rungs",
    "run_ladder",
]
