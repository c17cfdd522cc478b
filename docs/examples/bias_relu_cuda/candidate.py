"""Example CUDA candidate for ../bias_relu/reference.py: the bias add and the
ReLU fused into one kernel, launched on PyTorch's current stream.

Builds its own extension with load_inline(cuda_sources=...), so it runs on the
`cuda` backend (scripts/run-example picks it when kboxd reports a GPU).
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void bias_relu_kernel(const float* x, const float* bias, float* out,
                                 int64_t rows, int64_t cols) {
    const int64_t total = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = x[i] + bias[i % cols];
        out[i] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && bias.is_cuda(), "expected CUDA tensors");
    TORCH_CHECK(x.dim() == 2 && bias.dim() == 1 && x.size(1) == bias.size(0), "shape mismatch");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "expected float32");
    auto xc = x.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((xc.numel() + threads - 1) / threads, 65535);
    bias_relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), xc.size(0), xc.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kbox_example_bias_relu_cuda",
    cpp_sources="torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias);",
    cuda_sources=_cuda_source,
    functions=["bias_relu"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        # Created exactly as the reference creates it, so both get the same values.
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.bias_relu(x, self.bias)
