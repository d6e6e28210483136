"""reprokernel: one CUDA op, `add_one(x)` (x + 1 for a float32 CUDA tensor), built with
torch.utils.cpp_extension. Its architectures come from TORCH_CUDA_ARCH_LIST, which
bench/gpu/kernels.sh sets to 8.0 (no +PTX), so it holds no code an H200 (9.0) can run.

    TORCH_CUDA_ARCH_LIST=8.0 python -m pip install --no-build-isolation --no-deps ./kernelext
"""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="reprokernel",
    version="0.1.0",
    description="a tiny torch CUDA extension for repro's GPU evidence",
    packages=["reprokernel"],
    ext_modules=[CUDAExtension("reprokernel._C", ["csrc/add_one.cu"])],
    cmdclass={"build_ext": BuildExtension},
    python_requires=">=3.9",
)
