"""repro.gpu.info: nvidia-smi's CSV listing parsed, and query_gpus against an
nvidia-smi on PATH (the test double tests/support/doubles/nvidia_smi.py: this machine
has no GPU) printing
output captured on a real H200 box (driver 580.159.04), or lines built from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.gpu.info import DetectedGpu, GpuInventory, parse_query, query_gpus
from tests.support.doubles.nvidia_smi import (
    H200_LISTING,
    H200_PROBE,
    H200_SUMMARY,
    NO_DEVICES,
    h200_listing,
    nvidia_smi_double,
)


def h200(index: int, memory_mib: int = 143771) -> DetectedGpu:
    return DetectedGpu(index, "NVIDIA H200", (9, 0), "580.159.04", memory_mib)


EIGHT = h200_listing(8)
AFTER_FIRST = "".join(EIGHT.splitlines(keepends=True)[1:])  # GPUs 1 to 7
# Captured: the listing with units, and with the header line (--format=csv).
WITH_UNITS = "0, NVIDIA H200, 9.0, 580.159.04, 143771 MiB\n"
WITH_HEADER = "index, name, compute_cap, driver_version, memory.total [MiB]\n" + WITH_UNITS
# Captured: a sixth field asked for (fan.speed, [N/A] on an H200), and a bad option.
SIX_FIELDS = "0, NVIDIA H200, 9.0, 580.159.04, 143771, [N/A]\n"
BAD_OPTION = "ERROR: Option --bogus-flag is not recognized. Please run 'nvidia-smi -h'.\n\n"

PARSE_CASES = [
    ("h200", H200_LISTING, [h200(0)]),
    ("eight-h200", EIGHT, [h200(i) for i in range(8)]),
    ("crlf", EIGHT.replace("\n", "\r\n"), [h200(i) for i in range(8)]),
    (
        "mixed-box",
        H200_LISTING + "1, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 580.159.04, 97887\n",
        [h200(0), DetectedGpu(1, "NVIDIA RTX PRO 6000 Blackwell Server Edition", (12, 0),
                              "580.159.04", 97887)],
    ),
    # memory.total in the form with units, as a wrapper or an older tool prints it
    ("N-MiB", WITH_UNITS, [h200(0)]),
    ("header-line", WITH_HEADER, [h200(0)]),
    ("memory-N/A", "0, NVIDIA H200, 9.0, 580.159.04, [N/A]\n", [h200(0, memory_mib=0)]),
    # No capability, no verdict possible: the line is skipped, the others kept.
    ("capability-N/A", "0, NVIDIA H200, [N/A], 580.159.04, 143771\n" + AFTER_FIRST,
     [h200(i) for i in range(1, 8)]),
    ("index-N/A", "[N/A], NVIDIA H200, 9.0, 580.159.04, 143771\n", []),
    ("six-fields", SIX_FIELDS, []),
    ("no-devices", NO_DEVICES, []),
    ("bad-option", BAD_OPTION, []),
    ("empty", "", []),
    ("garbage-between", H200_LISTING + "%%% not, a, gpu %%%\n" + AFTER_FIRST,
     [h200(i) for i in range(8)]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"), [case[1:] for case in PARSE_CASES], ids=[case[0] for case in PARSE_CASES]
)
def test_parse_query(text: str, expected: list[DetectedGpu]) -> None:
    """Each line of five fields whose index and capability are numbers is a GPU; any
    other line (a header, an error, [N/A] where a number belongs) is skipped."""
    assert parse_query(text) == expected


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the nvidia-smi double goes; PATH finds it first. CUDA_VISIBLE_DEVICES unset."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path / "bin"


def _install(on_path: Path, monkeypatch: pytest.MonkeyPatch, **texts: str | int) -> None:
    env = nvidia_smi_double(
        on_path,
        listing=str(texts.get("listing", "")),
        probe=H200_PROBE,
        summary=str(texts.get("summary", "")),
        code=int(texts.get("code", 0)),
    )
    monkeypatch.setenv("PATH", env["PATH"])


@pytest.mark.parametrize(
    ("listing", "summary", "code", "expected"),
    [
        (H200_LISTING, H200_SUMMARY, 0, GpuInventory((h200(0),), "13.0")),
        (EIGHT, H200_SUMMARY, 0, GpuInventory(tuple(h200(i) for i in range(8)), "13.0")),
        # A summary without the CUDA line (an old driver): the GPUs, no CUDA version.
        (H200_LISTING, "| NVIDIA-SMI 470.256.02   Driver Version: 470.256.02 |\n", 0,
         GpuInventory((h200(0),), None)),
        (NO_DEVICES, NO_DEVICES, 6,
         GpuInventory((), None, "nvidia-smi failed: No devices were found")),
        ("", "", 9, GpuInventory((), None, "nvidia-smi failed: ")),
        # It ran and printed nothing it could read: no GPU, and no error to show.
        (BAD_OPTION, H200_SUMMARY, 0, GpuInventory((), "13.0")),
    ],
    ids=["h200", "eight-h200", "no-cuda-line", "no-devices", "silent-failure", "unreadable"],
)  # fmt: skip
def test_query_gpus(
    on_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    listing: str,
    summary: str,
    code: int,
    expected: GpuInventory,
) -> None:
    _install(on_path, monkeypatch, listing=listing, summary=summary, code=code)
    assert query_gpus(timeout=10) == expected


def test_without_nvidia_smi_the_inventory_says_so(
    on_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_path.mkdir()
    monkeypatch.setenv("PATH", str(on_path))  # an empty directory: no nvidia-smi
    assert query_gpus(timeout=10) == GpuInventory((), None, "nvidia-smi not found")


@pytest.mark.parametrize(
    ("visible", "indices"),
    [
        ("1", [1]),
        ("3,1", [3, 1]),  # CUDA's order, not nvidia-smi's
        ("0,7,1", [0]),  # CUDA stops at the first index that does not exist
        ("-1", []),
        ("", []),
        (" 2 , 0 ", [2, 0]),
        ("GPU-6f6a5d4c-0d2b-11ef-9a6b-0242ac120002", [0, 1, 2, 3]),  # UUIDs: left alone
    ],
    ids=["one", "reordered", "stops-at-invalid", "minus-one", "empty", "spaces", "uuid"],
)
def test_cuda_visible_devices_picks_the_gpus(
    on_path: Path, monkeypatch: pytest.MonkeyPatch, visible: str, indices: list[int]
) -> None:
    four = "".join(EIGHT.splitlines(keepends=True)[:4])
    _install(on_path, monkeypatch, listing=four, summary=H200_SUMMARY)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert [gpu.index for gpu in query_gpus(timeout=10).gpus] == indices
