"""CUDA candidate that exhausts the GPU's memory in forward: it allocates
1 GiB blocks until the allocator fails, so torch raises OutOfMemoryError.
Expected: RUNTIME_ERROR, never rewardable; the GPU then passes kboxd's device
probe (its memory is freed with the candidate's process) and the honest
few-shot pairs that follow on it are CORRECT."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda_src = r"""
#include <torch/extension.h>

__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int n = a.numel();
    add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                         out.data_ptr<float>(), n);
    return out;
}
"""

_ext = load_inline(
    name="kbox_gpu_oom_raise",
    cpp_sources="torch::Tensor add(torch::Tensor a, torch::Tensor b);",
    cuda_sources=_cuda_src,
    functions=["add"],
)


class ModelNew(nn.Module):
    def forward(self, a, b):
        hoard = []
        while True:  # ends with torch.cuda.OutOfMemoryError
            hoard.append(torch.empty(1 << 30, dtype=torch.uint8, device=a.device))
        return _ext.add(a, b)
