// reprokernel._C: add_one(x) = x + 1 for a float32 CUDA tensor, one thread per element.
#include <torch/extension.h>

// c10's stream and error headers only: ATen/cuda/CUDAContext.h would also want the
// cuSPARSE and cuBLAS headers, which a CUDA install from PyPI may keep elsewhere
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

__global__ void add_one_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    y[i] = x[i] + 1.0f;
  }
}

torch::Tensor add_one(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "add_one: x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "add_one: x must be float32");
  const torch::Tensor input = x.contiguous();
  torch::Tensor out = torch::empty_like(input);
  const int64_t n = input.numel();
  if (n == 0) {
    return out;
  }
  const int threads = 256;
  const int blocks = static_cast<int>((n + threads - 1) / threads);
  add_one_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      input.data_ptr<float>(), out.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("add_one", &add_one, "x + 1 for a float32 CUDA tensor");
}
