"""Architecture detection on real shared objects built by nvcc from PyPI (no GPU needed)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from repro.gpu.cubin import (
    MIN_INSPECTED_BYTES,
    WheelArchs,
    elf_archs,
    inspection_budget,
    wheel_archs,
)
from tests.support.nvcc import shared_object

CASES = {
    # (the arch list nvcc builds for, what the fatbin then holds)
    "generic_and_ptx": (("sm_80", "compute_90"), {"sm_80", "compute_90"}),
    "arch_specific": (("sm_90a",), {"sm_90a"}),
    "family_specific": (("sm_100f",), {"sm_100f"}),
    "blackwell_consumer": (("sm_120",), {"sm_120"}),
    "b300": (("sm_103a", "compute_120"), {"sm_103a", "compute_120"}),
}


@pytest.fixture(scope="module")
def built() -> dict[str, Path]:
    """Real shared objects from PyPI's nvcc (tests/support/nvcc.py), cached."""
    return {name: shared_object(archs) for name, (archs, _) in CASES.items()}


@pytest.mark.slow  # nvcc installed from PyPI on first use
@pytest.mark.parametrize("name", sorted(CASES))
def test_elf_archs_of_nvcc_output(built: dict[str, Path], name: str) -> None:
    assert elf_archs(built[name]) == CASES[name][1]


def test_host_only_library_has_no_archs(tmp_path: Path) -> None:
    libc = Path("/usr/lib/x86_64-linux-gnu/libc.so.6")
    assert elf_archs(libc) == set()
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not an elf at all")
    assert elf_archs(junk) == set()
    (tmp_path / "empty.so").write_bytes(b"")
    assert elf_archs(tmp_path / "empty.so") == set()


@pytest.mark.slow
def test_wheel_archs_reads_every_shared_object(built: dict[str, Path], tmp_path: Path) -> None:
    wheel = tmp_path / "kern-1.0+cu130-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(built["arch_specific"], "kern/_a.so")
        archive.write(built["generic_and_ptx"], "kern/lib/_b.so.1")
        archive.writestr("kern/__init__.py", "")
    assert wheel_archs(wheel) == WheelArchs(frozenset({"sm_90a", "sm_80", "compute_90"}))


@pytest.mark.slow
def test_wheel_archs_does_not_extract_a_deflate_bomb(
    built: dict[str, Path], tmp_path: Path
) -> None:
    """A member that inflates far past the wheel's size is named, not copied out: the
    temporary directory never holds more than the limit."""
    wheel = tmp_path / "bomb-1.0-cp311-cp311-linux_x86_64.whl"
    bomb_size = MIN_INSPECTED_BYTES + (1 << 20)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(built["arch_specific"], "bomb/_real.so")
        with archive.open("bomb/_zeros.so", "w", force_zip64=True) as member:
            chunk = bytes(1 << 20)
            for _ in range(bomb_size >> 20):
                member.write(chunk)
    assert wheel.stat().st_size < 4 << 20
    assert inspection_budget(wheel.stat().st_size) == MIN_INSPECTED_BYTES
    found = wheel_archs(wheel)
    assert found.archs == {"sm_90a"}
    assert found.not_inspected == ("bomb/_zeros.so",)
