"""The smoke-test ladder: from `python -c` to a real generation on a launched server."""

from repro.ladder.model import (
    RUNG_NAMES,
    LadderReport,
    LadderSpec,
    LaunchSpec,
    PatchedFile,
    RungResult,
    RungStatus,
    Timeouts,
)
from repro.ladder.runner import parse_rungs, run_ladder

__all__ = [
    "RUNG_NAMES",
    "LadderReport",
    "LadderSpec",
    "LaunchSpec",
    "PatchedFile",
    "RungResult",
    "RungStatus",
    "Timeouts",
    "parse_rungs",
    "run_ladder",
]
