"""repro.install.preflight's verdicts, in-process: the inputs are what unpack builds
them from (a BundleInfo's SourceInfo), the GPUs a GpuInventory parsed from nvidia-smi
lines (the H200 line of tests/support/doubles/nvidia_smi.py was captured on a real H200
box), the interpreters
real ones, the disk a real directory with the free bytes given."""

from __future__ import annotations

import dataclasses
import platform
import sys
from pathlib import Path

import pytest

from repro.bundle.info import BundleInfo
from repro.bundle.kernels import KernelAudit, KernelDistribution, KernelObject, KernelSource
from repro.gpu.info import GpuInventory, parse_query
from repro.install.preflight import (
    Check,
    PreflightInputs,
    Status,
    check_disk,
    check_driver,
    check_gpus,
    check_python,
    run_preflight,
)
from tests.support.bundles import bundle_info
from tests.support.doubles.nvidia_smi import h200_listing
from tests.support.nvcc import kernel_wheel

GiB = 2**30
RUNNING = platform.python_version()
MAJOR_MINOR = ".".join(RUNNING.split(".")[:2])
NEXT_MINOR = f"{sys.version_info.major}.{sys.version_info.minor + 1}"
TORCH_HINT = "install a torch build whose arch list covers this GPU, or pack on a box with it"


def info_with(
    *,
    python: str = RUNNING,
    torch_arch_list: tuple[str, ...] = (),
    torch_cuda: str | None = None,
) -> BundleInfo:
    """tests/support/bundles.py's bundle.toml with the source's Python and torch facts set."""
    info = bundle_info()
    source = dataclasses.replace(
        info.source, python=python, torch_arch_list=torch_arch_list, torch_cuda=torch_cuda
    )
    return dataclasses.replace(info, source=source)


def inputs_for(
    info: BundleInfo,
    target: Path,
    *,
    cpu: bool = False,
    python: Path | None = None,
    install_bytes: int = 0,
) -> PreflightInputs:
    """PreflightInputs from bundle.toml's source facts, as unpack builds them."""
    return PreflightInputs(
        python_version=info.source.python,
        torch_arch_list=info.source.torch_arch_list,
        torch_cuda=info.source.torch_cuda,
        distributions=frozenset(),
        vault_wheels=(),
        install_bytes=install_bytes,
        target=target,
        cpu=cpu,
        python=python,
    )


def h200s(count: int, driver_cuda: str | None = "13.0") -> GpuInventory:
    """`count` H200s as nvidia-smi lists them."""
    return GpuInventory(tuple(parse_query(h200_listing(count))), driver_cuda)


H200 = "NVIDIA H200: 9.0 (sm_90)"
GPU_CASES = [
    # (torch arch list, verdict, detail)
    (("sm_80", "sm_90"), "pass", f"{H200}: native code from sm_90"),
    (("sm_90a",), "pass", f"{H200}: native code from sm_90a"),
    (("sm_80", "sm_86"), "fail", f"{H200}: no code in the arch list runs on this device: "
     "sm_80, sm_86"),
    (("sm_100", "sm_120"), "fail", f"{H200}: no code in the arch list runs on this device: "
     "sm_100, sm_120"),
    (("sm_80", "compute_80"), "warn", f"{H200}: no native code; the driver JIT-compiles PTX "
     "compute_80 (slow first start, possibly slower kernels)"),
]  # fmt: skip


@pytest.mark.parametrize(("arch_list", "status", "detail"), GPU_CASES)
def test_each_gpu_gets_the_torch_arch_verdict(
    tmp_path: Path, arch_list: tuple[str, ...], status: Status, detail: str
) -> None:
    inputs = inputs_for(info_with(torch_arch_list=arch_list, torch_cuda="12.8"), tmp_path)
    checks = check_gpus(inputs, h200s(2))
    hint = None if status == "pass" else TORCH_HINT
    assert checks == [
        Check("gpu 0 torch", status, detail, hint),
        Check("gpu 1 torch", status, detail, hint),
    ]


@pytest.mark.parametrize(
    ("inventory", "cpu", "expected"),
    [
        (
            GpuInventory((), None, "nvidia-smi failed: No devices were found"),
            False,
            Check(
                "gpu",
                "fail",
                "nvidia-smi failed: No devices were found",
                "run on a GPU box, check the driver with nvidia-smi, or pass --cpu "
                "for a CPU-only rebuild",
            ),
        ),
        (
            GpuInventory((), None, "nvidia-smi not found"),
            True,
            Check("gpu", "pass", "nvidia-smi not found; a CPU-only rebuild was asked for (--cpu)"),
        ),
        (
            GpuInventory((), None),  # nvidia-smi ran and listed nothing
            False,
            Check(
                "gpu",
                "fail",
                "no GPU is visible",
                "run on a GPU box, check the driver with nvidia-smi, or pass --cpu "
                "for a CPU-only rebuild",
            ),
        ),
        (h200s(8), True, Check("gpu", "pass", "8 GPU(s); no torch arch list")),
    ],
    ids=["no-devices", "no-nvidia-smi-cpu", "none-visible", "eight-gpus-no-arch-list"],
)
def test_no_gpu_fails_unless_cpu_was_asked_for(
    tmp_path: Path, inventory: GpuInventory, cpu: bool, expected: Check
) -> None:
    """A bundle packed without torch (no arch list): the GPU check is only whether
    there is one, and without one only --cpu passes."""
    inputs = inputs_for(info_with(), tmp_path, cpu=cpu)
    assert check_gpus(inputs, inventory) == [expected]


UPGRADE = "upgrade the NVIDIA driver to one that supports CUDA 12.8"


@pytest.mark.parametrize(
    ("driver_cuda", "torch_cuda", "gpus", "expected"),
    [
        ("12.4", "12.8", 1, Check("driver", "fail",
         "driver supports CUDA 12.4; torch was built for 12.8", UPGRADE)),
        ("12.8", "12.8", 1, Check("driver", "pass",
         "driver supports CUDA 12.8; torch was built for 12.8")),
        ("13.0", "12.8", 1, Check("driver", "pass",
         "driver supports CUDA 13.0; torch was built for 12.8")),
        ("12.10", "12.9", 1, Check("driver", "pass",  # versions, not strings: 12.10 > 12.9
         "driver supports CUDA 12.10; torch was built for 12.9")),
        (None, "12.8", 1, Check("driver", "warn",
         "nvidia-smi did not report the driver's CUDA version")),
        ("13.0", None, 1, None),  # no torch in the bundle: nothing to compare
        ("13.0", "12.8", 0, None),  # no GPU: the gpu check says so
    ],
    ids=["too-old", "equal", "newer", "numeric", "not-reported", "no-torch", "no-gpu"],
)  # fmt: skip
def test_driver_verdict(
    tmp_path: Path, driver_cuda: str | None, torch_cuda: str | None, gpus: int,
    expected: Check | None,
) -> None:  # fmt: skip
    inputs = inputs_for(info_with(torch_arch_list=("sm_90",), torch_cuda=torch_cuda), tmp_path)
    assert check_driver(inputs, h200s(gpus, driver_cuda)) == expected


def _shim(directory: Path, name: str) -> Path:
    """A launcher in front of the running interpreter, as pyenv's shims are."""
    directory.mkdir(exist_ok=True)
    shim = directory / name
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    shim.chmod(0o755)
    return shim


@pytest.mark.parametrize(
    ("packed_with", "given", "status", "detail", "hint"),
    [
        (RUNNING, "running", "pass", f"{{exe}} is Python {RUNNING}", None),
        (f"{MAJOR_MINOR}.0", "running", "pass", f"{{exe}} is Python {RUNNING}", None),
        (f"{MAJOR_MINOR}.99", "shim", "pass", f"{{exe}} is Python {RUNNING}", None),
        (f"{NEXT_MINOR}.1", "running", "fail",
         f"{{given}} is {RUNNING}; the bundle needs Python {NEXT_MINOR}",
         f"pass --python with a Python {NEXT_MINOR} interpreter"),
        (RUNNING, "not-python", "fail",
         f"{{given}} is not a working Python; the bundle needs Python {MAJOR_MINOR}",
         f"pass --python with a Python {MAJOR_MINOR} interpreter"),
        (RUNNING, "missing", "fail",
         f"{{given}} is not a working Python; the bundle needs Python {MAJOR_MINOR}",
         f"pass --python with a Python {MAJOR_MINOR} interpreter"),
    ],
    ids=["same", "other-patch", "through-a-shim", "other-minor", "not-python", "missing"],
)  # fmt: skip
def test_python_given_with_dash_dash_python(
    tmp_path: Path, packed_with: str, given: str, status: Status, detail: str, hint: str | None
) -> None:
    """--python: its major.minor must be the bundle's (the patch level may differ), and
    the interpreter chosen is the one behind a launcher, not the launcher."""
    not_python = tmp_path / "python"
    not_python.write_text("#!/bin/sh\necho not python\n")
    not_python.chmod(0o755)
    python = {
        "running": Path(sys.executable),
        "shim": _shim(tmp_path / "shims", f"python{MAJOR_MINOR}"),
        "not-python": not_python,
        "missing": tmp_path / "absent" / "python",
    }[given]
    inputs = inputs_for(info_with(python=packed_with), tmp_path, python=python)
    check, chosen, facts = check_python(inputs)
    exe = Path(sys.executable)
    assert check == Check(
        "python",
        status,
        detail.format(exe=exe, given=python),
        hint,
    )
    if status == "pass":
        assert chosen == exe  # never the shim: it picks its Python by the working directory
        assert facts is not None and facts["version"] == RUNNING
    else:
        assert (chosen, facts) == (None, None)


@pytest.mark.parametrize(
    ("on_path", "status"),
    [((), "fail"), ((f"python{MAJOR_MINOR}",), "pass"), (("python3",), "pass")],
    ids=["none", "pythonX.Y", "python3"],
)
def test_python_found_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_path: tuple[str, ...], status: str
) -> None:
    """Without --python: uv's finder (none on this PATH), then pythonX.Y and python3."""
    shims = tmp_path / "bin"
    shims.mkdir()
    for name in on_path:
        _shim(shims, name)
    monkeypatch.setenv("PATH", str(shims))
    inputs = inputs_for(info_with(python=RUNNING), tmp_path)
    check, chosen, _ = check_python(inputs)
    if status == "pass":
        assert check == Check("python", "pass", f"{sys.executable} is Python {RUNNING}")
        assert chosen == Path(sys.executable)
        return
    assert check == Check(
        "python",
        "fail",
        f"no Python {MAJOR_MINOR} interpreter found (uv python find, PATH)",
        f"install Python {MAJOR_MINOR} (or `uv python install {MAJOR_MINOR}`), or pass --python",
    )
    assert chosen is None


def test_python_on_path_of_another_minor_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shims = tmp_path / "bin"
    _shim(shims, "python3")  # the running Python, not the bundle's NEXT_MINOR
    monkeypatch.setenv("PATH", str(shims))
    check, chosen, _ = check_python(inputs_for(info_with(python=f"{NEXT_MINOR}.0"), tmp_path))
    assert (check.status, check.detail) == (
        "fail",
        f"no Python {NEXT_MINOR} interpreter found (uv python find, PATH)",
    )
    assert chosen is None


@pytest.mark.parametrize(
    ("free", "need", "status"),
    [
        (3 * GiB, 2 * GiB, "pass"),
        (2 * GiB, 2 * GiB, "pass"),  # exactly enough is enough
        (2 * GiB - 1, 2 * GiB, "fail"),
        (GiB // 2, 40 * GiB, "fail"),
    ],
    ids=["room", "exactly", "one-byte-short", "far-short"],
)
def test_disk_verdict_names_the_numbers_and_the_directory(
    tmp_path: Path, free: int, need: int, status: Status
) -> None:
    """The free bytes are read at the target's nearest existing directory (the target
    itself does not exist yet)."""
    target = tmp_path / "srv" / "dflash"
    asked: list[Path] = []

    def free_at(path: Path) -> int:
        asked.append(path)
        return free

    check = check_disk(inputs_for(info_with(), target, install_bytes=need), free=free_at)
    assert asked == [tmp_path]
    detail = f"{free / GiB:.1f} GiB free at {tmp_path}, about {need / GiB:.1f} GiB needed"
    hint = None if status == "pass" else "free space or choose another --target"
    assert check == Check("disk", status, detail, hint)


@pytest.mark.parametrize(("need", "status"), [(0, "pass"), (2**62, "fail")])
def test_disk_verdict_reads_the_file_system_by_default(
    tmp_path: Path, need: int, status: str
) -> None:
    check = check_disk(inputs_for(info_with(), tmp_path / "t", install_bytes=need))
    assert check.status == status
    assert f" GiB free at {tmp_path}, about {need / GiB:.1f} GiB needed" in check.detail


def test_the_report_lists_every_check_and_force_turns_failures_into_warnings(
    tmp_path: Path,
) -> None:
    """The whole preflight on an 8-GPU H200 box for a bundle built for SM80 only, with a
    driver too old for its torch and the running Python given."""
    info = info_with(python=RUNNING, torch_arch_list=("sm_80",), torch_cuda="12.8")
    inputs = inputs_for(info, tmp_path, python=Path(sys.executable))
    report = run_preflight(inputs, inventory=h200s(8, "12.4"))
    names = [c.name for c in report.checks]
    assert names == ["python", *(f"gpu {i} torch" for i in range(8)), "driver", "disk"]
    assert [c.name for c in report.failed] == [*(f"gpu {i} torch" for i in range(8)), "driver"]
    assert report.python == Path(sys.executable)
    forced = report.forced()
    assert forced.failed == ()
    assert [c.status for c in forced.checks] == ["pass", *["warn"] * 9, "pass"]
    assert [c.detail for c in forced.checks] == [c.detail for c in report.checks]


# --- every distribution of env/kernels.toml, on each GPU of the box -----------------------

AUDIT = KernelAudit(
    (
        KernelDistribution("a-native", "1", (KernelObject("a/x.so", ("sm_90",)),)),
        KernelDistribution("b-ptx", "1", (KernelObject("b/x.so", ("compute_80",)),)),
        KernelDistribution("c-none", "1", (KernelObject("c/x.so", ("sm_100", "sm_120")),)),
        KernelDistribution("d-src", "2", (KernelObject("d/lib/y.so.1", ("sm_120",)),)),
        KernelDistribution("e-native", "1", (KernelObject("e/x.so", ("sm_90a",)),)),
    ),
    (KernelSource("d-src", "2", "tree", "/src/d", 3, 300),),
)


def _audit_checks(tmp_path: Path, rebuild: str) -> dict[str, Check]:
    inputs = dataclasses.replace(
        inputs_for(info_with(), tmp_path), kernels=AUDIT, rebuild_kernels=rebuild
    )
    checks = check_gpus(inputs, h200s(1))
    return {c.name: c for c in checks}


def test_each_distribution_not_native_gets_a_line_and_the_natives_one(tmp_path: Path) -> None:
    checks = _audit_checks(tmp_path, "auto")
    assert sorted(checks) == ["gpu", "gpu 0 b-ptx", "gpu 0 c-none", "gpu 0 d-src", "gpu 0 kernels"]
    assert checks["gpu 0 kernels"] == Check(
        "gpu 0 kernels", "pass", "NVIDIA H200: native code in 2 distribution(s): a-native, e-native"
    )
    ptx = checks["gpu 0 b-ptx"]
    assert ptx.status == "warn"
    assert ptx.detail.startswith(
        "NVIDIA H200: b-ptx 1 on GPU 0: PTX JIT (slow first start) (b/x.so:"
    )
    none = checks["gpu 0 c-none"]
    assert none.status == "fail" and "none (c/x.so: 9.0 (sm_90): no code" in none.detail
    assert none.hint is not None and "[kernels.<dist>] source" in none.hint
    carried = checks["gpu 0 d-src"]
    assert carried == Check(
        "gpu 0 d-src",
        "warn",
        "NVIDIA H200: d-src 2 has no code for it (d/lib/y.so.1); rebuilt from the carried "
        "source after the install",
    )


def test_rebuild_never_leaves_the_carried_distribution_failing(tmp_path: Path) -> None:
    carried = _audit_checks(tmp_path, "never")["gpu 0 d-src"]
    assert carried.status == "fail" and "none (d/lib/y.so.1:" in carried.detail
    assert carried.hint is not None and "--rebuild-kernels never" in carried.hint
    assert _audit_checks(tmp_path, "always")["gpu 0 d-src"].status == "warn"


@pytest.mark.slow
def test_vault_wheels_are_read_only_for_distributions_the_audit_lacks(tmp_path: Path) -> None:
    """An older bundle's vault wheel (no audit) is read as before; a wheel of a
    distribution the audit judged is not read again (a damaged one would fail)."""
    wheel = kernel_wheel(tmp_path / "w", "k-old", "1.0", {"k_old/_x.so": ("sm_80",)})
    damaged = tmp_path / "w" / "a_native-1-py3-none-linux_x86_64.whl"
    damaged.write_bytes(b"not a zip")
    base = dataclasses.replace(inputs_for(info_with(), tmp_path), vault_wheels=(wheel, damaged))
    with_audit = {c.name: c for c in check_gpus(dataclasses.replace(base, kernels=AUDIT), h200s(1))}
    assert with_audit["gpu 0 k_old-1.0-py3-none-linux_x86_64.whl"].status == "fail"
    assert not any("a_native" in name for name in with_audit)
    without = {c.name: c for c in check_gpus(base, h200s(1))}
    assert without["gpu archs a_native-1-py3-none-linux_x86_64.whl"].status == "fail"
