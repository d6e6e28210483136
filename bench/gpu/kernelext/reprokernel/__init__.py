"""reprokernel: `add_one(x)`, x + 1 computed by a CUDA kernel of this package."""

import torch  # loads libtorch and libc10 before the extension that links them

from reprokernel import _C  # the built extension


def add_one(x: torch.Tensor) -> torch.Tensor:
    """x + 1, for a float32 tensor on a CUDA device (a new tensor; x is not changed)."""
    result: torch.Tensor = _C.add_one(x)
    return result


__all__ = ["add_one"]
