"""nvcc from PyPI, installed once into the test cache, and fatbins it builds, cached.

NVIDIA publishes the CUDA compiler as wheels (`nvidia-cuda-nvcc`, with `nvidia-cuda-crt`
for the host-side headers, `nvidia-cuda-cccl` for CUB/Thrust/libcu++ and
`nvidia-cuda-runtime` for cudart, `nvidia-nvvm` for cicc): installed with `pip --target`, its
`nvidia/cu13/bin/nvcc` finds the rest through its own `nvcc.profile` (`$(_HERE_)/..`), so
nothing on the machine's PATH or CUDA_HOME is needed, and it builds code for any
architecture without a GPU. The versions are pinned (a CUDA 13.x that knows sm_103 and
the family-specific `f` targets); the install lives under the test cache
(`tests/support/venvs.py`'s `cache_root`, so `$REPRO_TEST_CACHE`), one directory per pin
set, made under a lock so parallel workers install it once.

`shared_object(archs)` is a real `.so` with a kernel compiled for each entry of an arch
list (`sm_90a`, `compute_120`), cached by nvcc's version and the gencodes, so a rerun
compiles nothing; `kernel_wheel` puts such objects into a real platform wheel, for pip to
install into a test venv.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.run import run
from tests.support.venvs import cache_root
from tests.support.wheels import wheel_files, write_wheel

NVCC_VERSION = "13.5.37"
PACKAGES = (
    f"nvidia-cuda-nvcc=={NVCC_VERSION}",
    f"nvidia-cuda-crt=={NVCC_VERSION}",
    f"nvidia-cuda-runtime=={NVCC_VERSION}",
    f"nvidia-nvvm=={NVCC_VERSION}",  # cicc, which nvcc-the-driver runs
    "nvidia-cuda-cccl==13.3.5.0.6",
)

KERNEL = """\
#include <cuda_runtime.h>
__global__ void add(float* x) { x[threadIdx.x] += 1.0f; }
extern "C" int launch(float* x) { add<<<1, 32>>>(x); return (int)cudaGetLastError(); }
"""


def _key(document: object) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]


def toolkit() -> Path:
    """The directory of the installed toolkit (`bin/nvcc`, `include/`, `lib/`)."""
    root = cache_root()
    install = root / f"nvcc-pypi-{_key(list(PACKAGES))}"
    marker = install / ".repro-test-complete"
    with (root / f"{install.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            if install.exists():
                shutil.rmtree(install)
            # one pip call: a second `--target` install into it would skip what exists
            run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    "--no-deps",
                    "--target",
                    str(install),
                    *PACKAGES,
                ],
                log=root / f"{install.name}.log",
                timeout=1800,
            )
            _check(install / "nvidia" / "cu13")
            marker.write_text(json.dumps({"packages": list(PACKAGES)}) + "\n")
    return install / "nvidia" / "cu13"


def nvcc() -> Path:
    """PyPI's nvcc, installed on first use; it finds its headers through nvcc.profile."""
    return toolkit() / "bin" / "nvcc"


def nvcc_env() -> dict[str, str]:
    """The environment nvcc runs in: the host compiler from PATH, CUDA_HOME the toolkit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA", "NVCC"))}
    env["CUDA_HOME"] = str(toolkit())
    env["PATH"] = f"{toolkit() / 'bin'}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    return env


def _check(home: Path) -> None:
    """The fresh install compiles a kernel that includes a runtime and a CCCL header."""
    probe = home.parent.parent / "probe"
    probe.mkdir(exist_ok=True)
    source = probe / "probe.cu"
    source.write_text("#include <cub/cub.cuh>\n" + KERNEL)
    subprocess.run(
        [
            str(home / "bin" / "nvcc"),
            "-c",
            "-o",
            str(probe / "probe.o"),
            str(source),
            "-gencode",
            "arch=compute_90,code=sm_90",
        ],
        check=True,
        capture_output=True,
        timeout=600,
        env={**os.environ, "CUDA_HOME": str(home)},
    )


def version() -> str:
    """`release 13.5, V13.5.37` as nvcc says it (the cache key of what it builds)."""
    out = subprocess.run(
        [str(nvcc()), "--version"], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    return out.strip().splitlines()[-2]


def gencode(arch: str) -> str:
    """`-gencode` for one entry of an arch list: `sm_90a` is SASS for sm_90a,
    `compute_120` PTX for compute_120."""
    kind, _, number = arch.partition("_")
    code = f"sm_{number}" if kind == "sm" else f"compute_{number}"
    return f"arch=compute_{number},code={code}"


def shared_object(archs: Sequence[str], *, name: str = "kernels") -> Path:
    """A real shared object (`lib<name>.so`) with the kernel above built for each of
    `archs` (`sm_90a`, `sm_100f`, `compute_120`), cached by nvcc's version and the list."""
    root = cache_root() / "nvcc-fatbins"
    root.mkdir(exist_ok=True)
    gencodes = [gencode(a) for a in archs]
    folder = root / _key({"nvcc": version(), "gencodes": gencodes, "kernel": KERNEL})
    library = folder / f"lib{name}.so"
    with (root / f"{folder.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if library.is_file():
            return library
        folder.mkdir(exist_ok=True)
        source = folder / "kernel.cu"
        source.write_text(KERNEL)
        argv = [str(nvcc()), "-shared", "-Xcompiler", "-fPIC", "-o", str(library) + ".tmp"]
        for code in gencodes:
            argv += ["-gencode", code]
        subprocess.run(
            [*argv, str(source)], check=True, capture_output=True, timeout=600, env=nvcc_env()
        )
        os.replace(str(library) + ".tmp", library)
    return library


def kernel_wheel(out: Path, name: str, version: str, objects: Mapping[str, Sequence[str]]) -> Path:
    """A real `linux_x86_64` wheel of distribution `name` (package `name` with `-` as
    `_`) holding, at each path of `objects`, a shared object nvcc built for its archs."""
    package = name.replace("-", "_")
    files = {f"{package}/__init__.py": b"VALUE = 1\n"}
    for path, archs in objects.items():
        files[path] = shared_object(archs).read_bytes()
    members = wheel_files(package, version, files, purelib=False)
    out.mkdir(parents=True, exist_ok=True)
    return write_wheel(out, members, package, version, tag="py3-none-linux_x86_64")
