"""TEST DOUBLE of nvidia-smi (this machine has no GPU): a script on PATH that prints
given text for each of the three ways repro calls the tool.

The texts the tests give it are real nvidia-smi output where one was captured (tests
name them), or built from such a line.
"""

from __future__ import annotations

import os
from pathlib import Path

# Captured from `nvidia-smi` on an H200 box (driver 580.159.04), for the queries repro
# makes: gpu/info.py's listing (csv, noheader, nounits), pack's probe (csv, noheader,
# with units) and the first lines of the summary table, which carries the CUDA version.
H200_LISTING = "0, NVIDIA H200, 9.0, 580.159.04, 143771\n"
H200_PROBE = "NVIDIA H200, 9.0, 580.159.04, 143771 MiB\n"
H200_SUMMARY = (
    "Wed Dec  2 16:09:33 2026       \n"
    "+-----------------------------------------------------------------------------------------+\n"
    "| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |\n"
    "+-----------------------------------------+------------------------+----------------------+\n"
)


def h200_listing(count: int) -> str:
    """The listing of a box of `count` H200s: the captured line once per index."""
    return "".join(f"{index}{H200_LISTING.removeprefix('0')}" for index in range(count))


# What nvidia-smi prints, exit 6, on a box whose driver sees no GPU.
NO_DEVICES = "No devices were found\n"


def nvidia_smi_double(
    directory: Path, *, listing: str, probe: str = "", summary: str = "", code: int = 0
) -> dict[str, str]:
    """An `nvidia-smi` in `directory` that prints `listing` for gpu/info.py's query
    (`--query-gpu=index,...`), `probe` for pack's (`--query-gpu=name,...`) and `summary`
    for a bare call, each followed by exit `code`; returns the PATH that finds it first."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (("listing", listing), ("probe", probe), ("summary", summary)):
        (directory / f"nvidia-smi.{name}").write_text(text)
    script = directory / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n# test double of nvidia-smi\n"
        f'here="{directory}"\n'
        'case "$1" in\n'
        '  --query-gpu=index,*) cat "$here/nvidia-smi.listing" ;;\n'
        '  --query-gpu=*) cat "$here/nvidia-smi.probe" ;;\n'
        '  *) cat "$here/nvidia-smi.summary" ;;\n'
        "esac\n"
        f"exit {code}\n"
    )
    script.chmod(0o755)
    return {"PATH": f"{directory}{os.pathsep}{os.environ['PATH']}"}


def fake_nvidia_smi(directory: Path, capability: str | None, driver_cuda: str) -> dict[str, str]:
    """One GPU of `capability` and a driver that supports CUDA `driver_cuda`; with
    capability None, the real tool's answer on a box without GPUs."""
    if capability is None:
        return nvidia_smi_double(
            directory, listing=NO_DEVICES, probe=NO_DEVICES, summary=NO_DEVICES, code=6
        )
    return nvidia_smi_double(
        directory,
        listing=f"0, NVIDIA Test Double GPU, {capability}, 580.65.06, 97871\n",
        probe=f"NVIDIA Test Double GPU, {capability}, 580.65.06, 97871 MiB\n",
        summary="| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   "
        f"CUDA Version: {driver_cuda}     |\n",
    )
