"""A GPU named on the command line (`--gpu`): an architecture, a capability or a product.

`sm_103`, `sm_103a`, `compute_103`, `10.3` and `B300` all name a device of compute
capability 10.3; the product names are the table below (NVIDIA's "CUDA GPUs - Compute
Capability" page). A device is a capability: `sm_120a` names a 12.0 device, and what runs
on it is judged by `repro.gpu.arch`'s rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from repro.errors import UsageError
from repro.gpu.arch import parse_arch, sm_name

# Products by the names people give them, normalised (upper case, no spaces, hyphens or
# a leading NVIDIA), to their compute capability.
PRODUCTS: dict[str, tuple[int, int]] = {
    "B300": (10, 3),
    "GB300": (10, 3),
    "B200": (10, 0),
    "GB200": (10, 0),
    "H200": (9, 0),
    "H100": (9, 0),
    "GH200": (9, 0),
    "RTXPRO6000": (12, 0),
    "RTX5090": (12, 0),
    "GB10": (12, 1),
    "L40S": (8, 9),
    "L4": (8, 9),
    "A100": (8, 0),
    "A10": (8, 6),
}

_CAPABILITY = re.compile(r"^(\d{1,2})\.(\d)$")


@dataclass(frozen=True)
class GpuTarget:
    """One `--gpu` value: what was given and the capability it names."""

    given: str
    capability: tuple[int, int]

    @property
    def sm(self) -> str:
        return sm_name(self.capability)

    @property
    def label(self) -> str:
        """`B300 (10.3)`, or `10.3` when the value was the capability itself."""
        shown = f"{self.capability[0]}.{self.capability[1]}"
        return shown if self.given == shown else f"{self.given} ({shown})"


def _product_key(text: str) -> str:
    key = re.sub(r"[\s_-]+", "", text.upper())
    return key.removeprefix("NVIDIA")


def parse_gpu(text: str) -> GpuTarget:
    """The capability `text` names; `UsageError` naming the accepted forms otherwise."""
    given = text.strip()
    capability = _CAPABILITY.match(given)
    if capability is not None:
        return GpuTarget(given, (int(capability.group(1)), int(capability.group(2))))
    arch = parse_arch(given)
    if arch is not None:
        return GpuTarget(given, (arch.major, arch.minor))
    product = PRODUCTS.get(_product_key(given))
    if product is not None:
        return GpuTarget(given, product)
    names = ", ".join(sorted(PRODUCTS))
    raise UsageError(
        f"--gpu {text!r}: not an architecture, a compute capability or a known product",
        hint=f"give sm_103, sm_120a, 10.3, or one of {names}",
    )


def parse_gpus(values: tuple[str, ...] | list[str]) -> tuple[GpuTarget, ...]:
    """Every `--gpu` value, in order, each capability once."""
    seen: set[tuple[int, int]] = set()
    targets = []
    for value in values:
        target = parse_gpu(value)
        if target.capability not in seen:
            seen.add(target.capability)
            targets.append(target)
    return tuple(targets)
