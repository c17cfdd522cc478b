"""CUDA candidate with a deliberate nvcc error (an undeclared identifier on
the line marked ERROR-LINE). Expected: COMPILE_ERROR whose log carries nvcc's
message and this file's line number."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i] + undeclared_offset;  // ERROR-LINE
}

torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int n = a.numel();
    add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                         out.data_ptr<float>(), n);
    return out;
}
"""

_ext = load_inline(
    name="kbox_gpu_nvcc_error",
    cpp_sources="torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);",
    cuda_sources=_cuda_src,
    functions=["add_cuda"],
)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return _ext.add_cuda(a, b)
