"""Rung 'nccl': one process per GPU, an all-reduce through torch.distributed.

Processes are started with torch.multiprocessing (spawn) and rendezvous on
127.0.0.1 at the given port.  The environment is inherited unchanged.  Rank 0
writes its measurements to --result.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

MARKER = "@@repro-rung-result@@"


def nccl_version(torch: Any) -> str:
    version = torch.cuda.nccl.version()  # a tuple in recent torch, an int in old ones
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)


def worker(rank: int, world: int, port: int, size_mb: int, iters: int, result: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    try:
        device = torch.device("cuda", rank)
        small = torch.full((1024,), float(rank + 1), device=device)
        dist.all_reduce(small)
        expected = world * (world + 1) / 2.0
        correct = bool(torch.all(small == expected))
        numel = size_mb * 1024 * 1024 // 4
        big = torch.ones(numel, dtype=torch.float32, device=device)
        for _ in range(3):
            dist.all_reduce(big)
        torch.cuda.synchronize(device)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(big)
        torch.cuda.synchronize(device)
        elapsed = (time.perf_counter() - start) / iters
        if rank == 0:
            nbytes = numel * 4
            algbw = nbytes / elapsed / 1e9
            document = {
                "world_size": world,
                "correct": correct,
                "value": float(small[0]),
                "expected": expected,
                "bytes": nbytes,
                "seconds_per_op": elapsed,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * 2 * (world - 1) / world,
                "nccl_version": nccl_version(torch),
            }
            with open(result, "w") as handle:
                json.dump(document, handle)
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--result", required=True)
    args = parser.parse_args()

    import torch.multiprocessing as mp

    mp.spawn(
        worker,
        args=(args.world, args.port, args.size_mb, args.iters, args.result),
        nprocs=args.world,
        join=True,
    )
    with open(args.result) as handle:
        facts: dict[str, Any] = json.load(handle)
    print(MARKER, json.dumps({"facts": facts}), flush=True)


if __name__ == "__main__":
    main()
