"""Rung 'torch': import torch, describe the CUDA build, check a matrix product.

On every GPU a bf16 product of random matrices is compared with a float64
reference of the same (bf16-rounded) inputs; with --cpu a float32 product on
the CPU.  The tool judges the numbers; this script only measures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from typing import Any

MARKER = "@@repro-rung-result@@"


def emit(document: dict[str, Any]) -> None:
    print(MARKER, json.dumps(document), flush=True)


def check_matmul(torch: Any, device: str, dtype: Any, size: int, iters: int) -> dict[str, Any]:
    generator = torch.Generator(device="cpu").manual_seed(1234)
    a32 = torch.randn(size, size, generator=generator, dtype=torch.float32)
    b32 = torch.randn(size, size, generator=generator, dtype=torch.float32)
    a = a32.to(device=device, dtype=dtype)
    b = b32.to(device=device, dtype=dtype)

    def sync() -> None:
        if device != "cpu":
            torch.cuda.synchronize(device)

    product = torch.matmul(a, b)
    sync()
    reference = torch.matmul(a.to(torch.float64), b.to(torch.float64))
    difference = product.to(torch.float64) - reference
    rel_err = float(torch.linalg.norm(difference) / torch.linalg.norm(reference))
    finite = bool(torch.isfinite(product).all())

    start = time.perf_counter()
    for _ in range(iters):
        torch.matmul(a, b)
    sync()
    elapsed = time.perf_counter() - start
    flops = 2.0 * size**3 * iters
    return {
        "device": device,
        "dtype": str(dtype).replace("torch.", ""),
        "size": size,
        "rel_err": rel_err if rel_err == rel_err else "nan",
        "finite": finite,
        "tflops": flops / elapsed / 1e12 if elapsed > 0 else None,
    }


def guarded(torch: Any, device: str, dtype: Any, size: int, iters: int) -> dict[str, Any]:
    try:
        return check_matmul(torch, device, dtype, size, iters)
    except Exception as exc:  # reported as a fact; the tool explains it
        return {"device": device, "error": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--iters", type=int, default=0)
    parser.add_argument("--describe-only", action="store_true")
    args = parser.parse_args()

    if importlib.util.find_spec("torch") is None:
        emit({"skip": "torch is not installed in this environment"})
        return
    import torch

    facts: dict[str, Any] = {
        "torch_version": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cuda_available": bool(torch.cuda.is_available()),
        "device_count": int(torch.cuda.device_count()) if torch.cuda.is_available() else 0,
        "arch_list": list(torch.cuda.get_arch_list()) if torch.version.cuda else [],
        "devices": [],
        "matmul": [],
    }
    for index in range(facts["device_count"]):
        major, minor = torch.cuda.get_device_capability(index)
        facts["devices"].append(
            {
                "index": index,
                "name": torch.cuda.get_device_name(index),
                "capability": [major, minor],
            }
        )
    if args.describe_only:
        pass
    elif args.cpu:
        facts["matmul"].append(
            guarded(torch, "cpu", torch.float32, args.size or 512, args.iters or 5)
        )
    elif facts["cuda_available"]:
        for index in range(facts["device_count"]):
            facts["matmul"].append(
                guarded(torch, f"cuda:{index}", torch.bfloat16, args.size or 8192, args.iters or 50)
            )
    emit({"facts": facts})


if __name__ == "__main__":
    main()
