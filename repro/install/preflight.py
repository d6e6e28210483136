"""Checks run before anything is installed: Python, GPU, driver, JIT toolchain, disk.

Each check is a line of the report with pass / warn / fail and, where it
fails, what to do. `--force` turns failures into warnings.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from repro.bundle import layout
from repro.bundle.kernels import KernelAudit
from repro.errors import PreflightError, UnreadableWheel
from repro.gpu.arch import Verdict, arch_compatible
from repro.gpu.audit import describe as describe_judgement
from repro.gpu.audit import judge_audit
from repro.gpu.cubin import inspection_budget, wheel_archs
from repro.gpu.info import GpuInventory, query_gpus
from repro.interpreter import run_target_script

Status = Literal["pass", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    hint: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "hint": self.hint}


@dataclass(frozen=True)
class PreflightInputs:
    python_version: str
    torch_arch_list: tuple[str, ...]
    torch_cuda: str | None
    distributions: frozenset[str]
    vault_wheels: tuple[Path, ...]
    install_bytes: int
    target: Path
    cpu: bool = False
    python: Path | None = None
    # env/kernels.toml: every distribution's GPU code (None: a bundle packed before it)
    kernels: KernelAudit | None = None
    # --rebuild-kernels: a distribution with no code for a GPU here whose source the
    # bundle carries is rebuilt after the install unless "never"
    rebuild_kernels: str = "auto"


@dataclass(frozen=True)
class PreflightReport:
    checks: tuple[Check, ...]
    python: Path | None

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    def forced(self) -> PreflightReport:
        return PreflightReport(
            tuple(replace(c, status="warn") if c.status == "fail" else c for c in self.checks),
            self.python,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "checks": [c.to_json() for c in self.checks],
            "python": str(self.python) if self.python else None,
        }


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _python_facts(python: Path) -> dict[str, str] | None:
    """repro/probe/python_facts.py's answer, or None when `python` is no working Python."""
    try:
        result = run_target_script(python, "python_facts.py", timeout=60, error=PreflightError)
        data = json.loads(result.stdout) if result.returncode == 0 else None
    except (PreflightError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _candidates(version: str) -> list[Path]:
    """Interpreters that may be Python `version`: uv's finder, then PATH."""
    found: list[Path] = []
    uv = shutil.which("uv")
    if uv is not None:
        try:
            result = subprocess.run(
                [uv, "python", "find", version],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if result.returncode == 0 and result.stdout.strip():
                found.append(Path(result.stdout.strip()))
        except (OSError, subprocess.TimeoutExpired):
            pass
    for name in (f"python{version}", "python3"):
        path = shutil.which(name)
        if path is not None:
            found.append(Path(path))
    return found


def _choose_python(want: str, python: Path | None) -> tuple[Path, dict[str, str]] | None:
    """The first candidate (--python alone when given) that is Python `want`, and its
    facts: the interpreter itself, not a launcher in front of it (a pyenv shim picks
    its Python by the working directory, so it may not be this one later)."""
    for candidate in [python] if python else _candidates(want):
        facts = _python_facts(candidate)
        if facts is not None and _major_minor(facts["version"]) == want:
            return Path(facts.get("executable") or candidate), facts
    return None


def find_python(python_version: str, python: Path | None) -> Path | None:
    """The interpreter the python check would choose for a bundle of `python_version`."""
    found = _choose_python(_major_minor(python_version), python)
    return found[0] if found is not None else None


def check_python(inputs: PreflightInputs) -> tuple[Check, Path | None, dict[str, str] | None]:
    want = _major_minor(inputs.python_version)
    found = _choose_python(want, inputs.python)
    if found is not None:
        chosen, facts = found
        return Check("python", "pass", f"{chosen} is Python {facts['version']}"), chosen, facts
    if inputs.python is not None:
        given = _python_facts(inputs.python)
        seen = given["version"] if given else "not a working Python"
        return (
            Check(
                "python",
                "fail",
                f"{inputs.python} is {seen}; the bundle needs Python {want}",
                hint=f"pass --python with a Python {want} interpreter",
            ),
            None,
            None,
        )
    return (
        Check(
            "python",
            "fail",
            f"no Python {want} interpreter found (uv python find, PATH)",
            hint=f"install Python {want} (or `uv python install {want}`), or pass --python",
        ),
        None,
        None,
    )


def check_gpus(inputs: PreflightInputs, inventory: GpuInventory) -> list[Check]:
    if not inventory.gpus:
        reason = inventory.error or "no GPU is visible"
        if inputs.cpu:
            return [Check("gpu", "pass", f"{reason}; a CPU-only rebuild was asked for (--cpu)")]
        return [
            Check(
                "gpu",
                "fail",
                reason,
                hint="run on a GPU box, check the driver with nvidia-smi, or pass --cpu "
                "for a CPU-only rebuild",
            )
        ]
    checks: list[Check] = []
    if inputs.torch_arch_list:
        for gpu in inventory.gpus:
            verdict = arch_compatible(gpu.capability, inputs.torch_arch_list)
            checks.append(
                Check(
                    f"gpu {gpu.index} torch",
                    verdict.verdict.value,
                    f"{gpu.name}: {verdict.message}",
                    hint=None
                    if verdict.verdict is Verdict.PASS
                    else "install a torch build whose arch list covers this GPU, "
                    "or pack on a box with it",
                )
            )
    else:
        checks.append(Check("gpu", "pass", f"{len(inventory.gpus)} GPU(s); no torch arch list"))
    audited: set[str] = set()
    if inputs.kernels is not None:
        audited = {d.name for d in inputs.kernels.distributions}
        checks += _audit_checks(inputs.kernels, inventory, inputs.rebuild_kernels)
    for wheel in inputs.vault_wheels:
        if canonicalize_name(wheel.name.split("-", 1)[0]) in audited:
            continue  # judged by the audit, from the files it was made of
        try:
            found = wheel_archs(wheel, shown=layout.wheel(wheel.name))
        except UnreadableWheel as exc:
            # a failed check like any other: listed with the rest, nothing installed
            checks.append(Check(f"gpu archs {wheel.name}", "fail", exc.message, exc.hint))
            continue
        if found.not_inspected:
            checks.append(
                Check(
                    f"gpu archs {wheel.name}",
                    "warn",
                    f"{wheel}: {len(found.not_inspected)} shared object(s) not inspected "
                    f"(over the {inspection_budget(wheel.stat().st_size) >> 20} MiB limit "
                    f"on bytes extracted for inspection): {', '.join(found.not_inspected)}",
                    hint="a wheel whose members unpack to far more than its size is "
                    "suspect; rebuild it or check where it came from",
                )
            )
        archs = sorted(found.archs)
        if not archs:
            continue
        for gpu in inventory.gpus:
            verdict = arch_compatible(gpu.capability, archs)
            checks.append(
                Check(
                    f"gpu {gpu.index} {wheel.name}",
                    verdict.verdict.value,
                    f"{gpu.name}: {verdict.message}",
                    hint=None
                    if verdict.verdict is Verdict.PASS
                    else f"rebuild {wheel.name} with code for this GPU's architecture",
                )
            )
    return checks


def _audit_checks(audit: KernelAudit, inventory: GpuInventory, rebuild: str) -> list[Check]:
    """Each distribution of the audit on each GPU: one line per one not native there,
    and one line naming those that are. No code, but the source carried (and the
    rebuild not refused): a warning, since the rebuild after the install makes it."""
    checks: list[Check] = []
    for gpu in inventory.gpus:
        natives = []
        for judgement in judge_audit(audit, (gpu.capability,)):
            if judgement.verdict is Verdict.PASS:
                natives.append(judgement.name)
                continue
            status: Status = judgement.verdict.value
            detail = f"{gpu.name}: " + describe_judgement(judgement, f"GPU {gpu.index}")
            hint: str | None = (
                f"install a {judgement.name} built with code for this GPU's architecture, "
                "or pack it with its source ([kernels.<dist>] source in repro.toml) so "
                "unpack rebuilds it here"
            )
            if judgement.verdict is Verdict.FAIL and judgement.rebuildable and rebuild != "never":
                status = "warn"
                detail = (
                    f"{gpu.name}: {judgement.name} {judgement.version} has no code for it "
                    f"({judgement.deciding}); rebuilt from the carried source after the install"
                )
                hint = None
            elif judgement.rebuildable and judgement.verdict is Verdict.FAIL:
                hint = "the bundle carries its source: without --rebuild-kernels never, it "
                hint += "is rebuilt here"
            elif judgement.rebuildable:
                hint = "the bundle carries its source: --rebuild-kernels always rebuilds it "
                hint += "with native code for this GPU"
            checks.append(Check(f"gpu {gpu.index} {judgement.name}", status, detail, hint))
        if natives:
            checks.append(
                Check(
                    f"gpu {gpu.index} kernels",
                    "pass",
                    f"{gpu.name}: native code in {len(natives)} distribution(s): "
                    + ", ".join(natives),
                )
            )
    return checks


def check_driver(inputs: PreflightInputs, inventory: GpuInventory) -> Check | None:
    if not inventory.gpus or not inputs.torch_cuda:
        return None
    if inventory.driver_cuda is None:
        return Check("driver", "warn", "nvidia-smi did not report the driver's CUDA version")
    try:
        ok = Version(inventory.driver_cuda) >= Version(inputs.torch_cuda)
    except InvalidVersion:
        return Check("driver", "warn", f"cannot compare {inventory.driver_cuda!r}")
    detail = (
        f"driver supports CUDA {inventory.driver_cuda}; torch was built for {inputs.torch_cuda}"
    )
    if ok:
        return Check("driver", "pass", detail)
    return Check(
        "driver",
        "fail",
        detail,
        hint=f"upgrade the NVIDIA driver to one that supports CUDA {inputs.torch_cuda}",
    )


def check_toolchain(inputs: PreflightInputs, facts: dict[str, str] | None) -> list[Check]:
    checks: list[Check] = []
    if "triton" in inputs.distributions:
        if facts is not None:
            header = Path(facts["include"]) / "Python.h"
            if header.exists():
                checks.append(Check("Python.h", "pass", str(header)))
            else:
                version = _major_minor(facts["version"])
                checks.append(
                    Check(
                        "Python.h",
                        "fail",
                        f"{header} is missing; Triton's JIT compiles a launcher against it",
                        hint=f"apt install python{version}-dev (or your distribution's "
                        "Python headers package)",
                    )
                )
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if compiler:
            checks.append(Check("C compiler", "pass", compiler))
        else:
            checks.append(
                Check(
                    "C compiler",
                    "fail",
                    "no C compiler (cc, gcc, $CC); Triton's JIT needs one",
                    hint="apt install gcc (build-essential)",
                )
            )
    if "flashinfer-python" in inputs.distributions or "flashinfer" in inputs.distributions:
        nvcc = shutil.which("nvcc")
        cuda_home = os.environ.get("CUDA_HOME")
        if nvcc or (cuda_home and (Path(cuda_home) / "bin" / "nvcc").exists()):
            checks.append(Check("nvcc", "pass", nvcc or f"{cuda_home}/bin/nvcc"))
        else:
            checks.append(
                Check(
                    "nvcc",
                    "warn",
                    "no nvcc on PATH and no CUDA_HOME; flashinfer JIT-compiles kernels with it",
                    hint="install the CUDA toolkit (cuda-nvcc) and set CUDA_HOME",
                )
            )
    return checks


def _nvcc() -> Path | None:
    found = shutil.which("nvcc")
    if found is not None:
        return Path(found)
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidate = Path(cuda_home) / "bin" / "nvcc" if cuda_home else None
    return candidate if candidate is not None and candidate.is_file() else None


def _nvcc_includes(nvcc: Path) -> list[Path]:
    """The include directories nvcc itself compiles with (its `--dryrun` says them:
    `INCLUDES="-I..."`), which holds for a wrapper script on PATH too."""
    try:
        result = subprocess.run(
            [str(nvcc), "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = []
    for line in (result.stdout + result.stderr).splitlines():
        _, marker, rest = line.partition("INCLUDES=")
        if marker and not line.lstrip("#$ ").startswith("SYSTEM_"):
            words = [w.strip('"') for w in rest.split()]
            found += [Path(w[2:]) for w in words if w.startswith("-I")]
    return found


def _cuda_header(nvcc: Path) -> Path | None:
    """cuda_runtime.h in an include directory of nvcc (its own word, the toolkit beside
    it, or CUDA_HOME's)."""
    roots = [nvcc.resolve().parent.parent]
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        roots.append(Path(cuda_home))
    includes = [
        *(i for root in roots for i in (root / "include", *sorted(root.glob("targets/*/include")))),
        *_nvcc_includes(nvcc),
    ]
    return next((i / "cuda_runtime.h" for i in includes if (i / "cuda_runtime.h").is_file()), None)


def check_kernel_toolchain(rebuilds: Sequence[str], python: Path | None) -> list[Check]:
    """What the kernels step needs to build `rebuilds` (distribution names) here: nvcc
    (PATH or CUDA_HOME/bin), the CUDA headers beside it, Python.h of the target's Python
    and a C/C++ compiler; each missing one fails up front, naming the distributions."""
    if not rebuilds:
        return []
    names = ", ".join(rebuilds)
    why = f"to rebuild {names} for this box's GPUs (--rebuild-kernels)"
    never = "or pass --rebuild-kernels never (the preflight then names what has no code)"
    checks: list[Check] = []
    nvcc = _nvcc()
    if nvcc is None:
        checks.append(
            Check(
                "kernels nvcc",
                "fail",
                f"no nvcc on PATH and none in $CUDA_HOME/bin, needed {why}",
                hint=f"install the CUDA toolkit and put nvcc on PATH or set CUDA_HOME, {never}",
            )
        )
    else:
        header = _cuda_header(nvcc)
        checks.append(Check("kernels nvcc", "pass", str(nvcc)))
        checks.append(
            Check("kernels CUDA headers", "pass", str(header))
            if header is not None
            else Check(
                "kernels CUDA headers",
                "fail",
                f"no cuda_runtime.h beside {nvcc} (its include/), needed {why}",
                hint=f"install the CUDA toolkit's headers (cuda-cudart-dev), {never}",
            )
        )
    facts = _python_facts(python) if python is not None else None
    if facts is not None:
        header = Path(facts["include"]) / "Python.h"
        checks.append(
            Check("kernels Python.h", "pass", str(header))
            if header.exists()
            else Check(
                "kernels Python.h",
                "fail",
                f"{header} is missing, needed {why}",
                hint=f"apt install python{_major_minor(facts['version'])}-dev, {never}",
            )
        )
    compiler = next(
        (
            found
            for found in (
                os.environ.get("CXX"),
                shutil.which("c++"),
                shutil.which("g++"),
                shutil.which("clang++"),
            )
            if found
        ),
        None,
    )
    checks.append(
        Check("kernels compiler", "pass", compiler)
        if compiler
        else Check(
            "kernels compiler",
            "fail",
            f"no C++ compiler ($CXX, c++, g++, clang++), needed {why}",
            hint=f"apt install g++ (build-essential), {never}",
        )
    )
    return checks


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def check_disk(inputs: PreflightInputs, *, free: Callable[[Path], int] = free_bytes) -> Check:
    """Room for the install at the target's nearest existing directory; `free` reads
    the free bytes there (the file system's, unless a test passes its own numbers)."""
    probe = inputs.target
    while not probe.exists():
        probe = probe.parent
    free_now = free(probe)
    need = inputs.install_bytes
    detail = f"{free_now / 2**30:.1f} GiB free at {probe}, about {need / 2**30:.1f} GiB needed"
    if free_now >= need:
        return Check("disk", "pass", detail)
    return Check("disk", "fail", detail, hint="free space or choose another --target")


def run_preflight(
    inputs: PreflightInputs, *, inventory: GpuInventory | None = None
) -> PreflightReport:
    python_check, python, facts = check_python(inputs)
    inventory = inventory if inventory is not None else query_gpus()
    checks: list[Check] = [python_check]
    checks += check_gpus(inputs, inventory)
    driver = check_driver(inputs, inventory)
    if driver is not None:
        checks.append(driver)
    checks += check_toolchain(inputs, facts)
    checks.append(check_disk(inputs))
    return PreflightReport(tuple(checks), python)


def describe(checks: Sequence[Check]) -> str:
    return "\n".join(
        f"  - {c.name}: {c.detail}" + (f" ({c.hint})" if c.hint else "") for c in checks
    )
