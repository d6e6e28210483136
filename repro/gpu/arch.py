"""GPU architecture compatibility: can code built for an arch list run on a device?

NVIDIA's rules (CUDA Programming Guide, "Binary Compatibility"; CUDA 12.9 notes on
architecture- and family-specific targets):

- SASS ``sm_XY`` runs on devices of the same major version X with minor >= Y
  (``sm_80`` runs on 8.0, 8.6 and 8.9; never across majors).
- Architecture-specific SASS ``sm_XYa`` runs only on exactly X.Y.
- Family-specific SASS ``sm_XYf`` runs on the same family (major X) with
  minor >= Y (``sm_100f`` runs on 10.0 and 10.3, ``sm_103f`` only on 10.3).
- PTX ``compute_XY`` can be JIT-compiled by the driver for any device of
  capability >= X.Y (slow first start, hence a warning).  ``compute_XYa`` only
  for X.Y, ``compute_XYf`` only within family X with minor >= Y.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

_ENTRY = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


class Verdict(enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class ArchTarget:
    """One entry of an arch list, such as ``sm_90a`` or ``compute_120``."""

    text: str
    kind: str  # "sass" or "ptx"
    major: int
    minor: int
    suffix: str  # "", "a" (architecture-specific) or "f" (family-specific)

    def runs_on(self, capability: tuple[int, int]) -> bool:
        major, minor = capability
        if self.suffix == "a":
            return (major, minor) == (self.major, self.minor)
        if self.kind == "sass" or self.suffix == "f":
            return major == self.major and minor >= self.minor
        return (major, minor) >= (self.major, self.minor)


@dataclass(frozen=True)
class ArchVerdict:
    verdict: Verdict
    capability: tuple[int, int]
    matched: str | None  # the entry that makes the device work, if any
    message: str


def parse_arch(entry: str) -> ArchTarget | None:
    """Parse ``sm_90a`` / ``compute_120``; None for entries that are not NVIDIA targets."""
    match = _ENTRY.match(entry.strip().lower())
    if match is None:
        return None
    prefix, digits, suffix = match.groups()
    if len(digits) < 2:
        return None
    major, minor = int(digits[:-1]), int(digits[-1])
    return ArchTarget(entry.strip(), "sass" if prefix == "sm" else "ptx", major, minor, suffix)


def sm_name(capability: tuple[int, int]) -> str:
    """`sm_90` for a device of capability 9.0."""
    return f"sm_{capability[0]}{capability[1]}"


def format_capability(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]} (sm_{capability[0]}{capability[1]})"


def arch_compatible(capability: tuple[int, int], arch_list: Sequence[str]) -> ArchVerdict:
    """Judge whether code built for ``arch_list`` runs on a device of ``capability``."""
    targets = [t for t in (parse_arch(e) for e in arch_list) if t is not None]
    shown = format_capability(capability)
    sass = [t for t in targets if t.kind == "sass" and t.runs_on(capability)]
    if sass:
        # Prefer the closest build: the highest minor that still runs.
        best = max(sass, key=lambda t: (t.minor, t.suffix != ""))
        return ArchVerdict(
            Verdict.PASS, capability, best.text, f"{shown}: native code from {best.text}"
        )
    ptx = [t for t in targets if t.kind == "ptx" and t.runs_on(capability)]
    if ptx:
        best = max(ptx, key=lambda t: (t.major, t.minor))
        return ArchVerdict(
            Verdict.WARN,
            capability,
            best.text,
            f"{shown}: no native code; the driver JIT-compiles PTX {best.text} "
            "(slow first start, possibly slower kernels)",
        )
    listed = ", ".join(arch_list) if arch_list else "(empty)"
    return ArchVerdict(
        Verdict.FAIL,
        capability,
        None,
        f"{shown}: no code in the arch list runs on this device: {listed}",
    )
