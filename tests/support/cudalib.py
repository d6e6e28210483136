"""A small CUDA library package for the kernel rebuild tests: pure setuptools, its
setup.py runs nvcc with one `-gencode` per entry of CUDAARCHS (default 80) to build
`cudalib/lib.so` (one kernel), installed as package data. Real nvcc output, no torch."""

from __future__ import annotations

from pathlib import Path

KERNEL = """\
extern "C" __global__ void add_one(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
extern "C" int cudalib_version(void) { return 1; }
"""

SETUP = """\
import os
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py


class BuildCuda(build_py):
    def run(self):
        super().run()
        archs = [a.strip() for a in os.environ.get("CUDAARCHS", "80").replace(",", ";").split(";")]
        out = os.path.join(self.build_lib, "cudalib", "lib.so")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        command = [os.environ.get("NVCC", "nvcc"), "-shared", "-Xcompiler", "-fPIC"]
        for arch in archs:
            if arch:
                command += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
        subprocess.check_call([*command, "-o", out, "csrc/kernel.cu"])


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(
    name="cudalib",
    version="0.1.0",
    packages=["cudalib"],
    cmdclass={"build_py": BuildCuda},
    distclass=BinaryDistribution,
)
"""


def write_cudalib(root: Path) -> Path:
    """The project's tree at `root`; returns it."""
    (root / "cudalib").mkdir(parents=True)
    (root / "csrc").mkdir()
    (root / "csrc" / "kernel.cu").write_text(KERNEL)
    (root / "cudalib" / "__init__.py").write_text('"""cudalib: one CUDA kernel."""\n')
    (root / "setup.py").write_text(SETUP)
    (root / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = ["setuptools", "wheel"]\n'
        'build-backend = "setuptools.build_meta"\n'
    )
    return root
