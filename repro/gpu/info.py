"""GPUs and driver as nvidia-smi reports them (no torch, no NVML bindings)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

_CUDA_VERSION = re.compile(r"CUDA Version:\s*(?P<version>\d+\.\d+)")
QUERY = "index,name,compute_cap,driver_version,memory.total"


@dataclass(frozen=True)
class DetectedGpu:
    index: int
    name: str
    capability: tuple[int, int]
    driver: str
    memory_mib: int


@dataclass(frozen=True)
class GpuInventory:
    gpus: tuple[DetectedGpu, ...]
    driver_cuda: str | None
    error: str | None = None


def _visible(gpus: list[DetectedGpu]) -> list[DetectedGpu]:
    """Apply CUDA_VISIBLE_DEVICES when it lists indices (UUID forms are left alone)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return gpus
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        return []
    if not all(item.lstrip("-").isdigit() for item in items):
        return gpus
    chosen: list[DetectedGpu] = []
    by_index = {gpu.index: gpu for gpu in gpus}
    for item in items:
        index = int(item)
        if index < 0 or index not in by_index:
            break  # CUDA stops at the first invalid entry
        chosen.append(by_index[index])
    return chosen


def parse_query(text: str) -> list[DetectedGpu]:
    gpus = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 5:
            continue
        index, name, cap, driver, memory = fields
        major, _, minor = cap.partition(".")
        if not (index.isdigit() and major.isdigit() and minor.isdigit()):
            continue
        # repro asks for nounits; a wrapper or older tool may still print "N MiB"
        number = memory.removesuffix("MiB").strip()
        memory_mib = int(number) if number.isdigit() else 0
        gpus.append(DetectedGpu(int(index), name, (int(major), int(minor)), driver, memory_mib))
    return gpus


def query_gpus(timeout: float = 30) -> GpuInventory:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return GpuInventory((), None, "nvidia-smi not found")
    try:
        listing = subprocess.run(
            [tool, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        summary = subprocess.run(
            [tool], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GpuInventory((), None, f"nvidia-smi failed: {exc}")
    if listing.returncode != 0:
        message = (listing.stderr or listing.stdout).strip().splitlines()
        return GpuInventory((), None, f"nvidia-smi failed: {message[-1] if message else ''}")
    match = _CUDA_VERSION.search(summary.stdout)
    return GpuInventory(
        tuple(_visible(parse_query(listing.stdout))),
        match.group("version") if match else None,
    )
