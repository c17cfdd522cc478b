"""CUDA candidate whose kernel writes far outside its output buffer.
Expected: RUNTIME_ERROR (illegal memory access, surfaced at the device
synchronisation after forward), and the next job on the same GPU is
unaffected because every job gets a fresh process and CUDA context."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void oob_add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // 2^40 elements past the buffer: an address no allocation covers.
    if (i < n) out[i + (1LL << 40)] = a[i] + b[i];
}

torch::Tensor oob_add(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int n = a.numel();
    oob_add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                             out.data_ptr<float>(), n);
    return out;
}
"""

_ext = load_inline(
    name="kbox_gpu_oob_write",
    cpp_sources="torch::Tensor oob_add(torch::Tensor a, torch::Tensor b);",
    cuda_sources=_cuda_src,
    functions=["oob_add"],
)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return _ext.oob_add(a, b)
