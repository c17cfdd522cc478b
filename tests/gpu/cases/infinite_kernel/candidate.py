"""CUDA candidate whose kernel never finishes (a spin loop the compiler cannot
remove). Expected: TIMEOUT at the job's limit, every process of the job
killed, and the next job on the same GPU CORRECT."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void spin_kernel(const float* a, const float* b, float* out, int n, int* stop) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // Wait for a flag nothing ever sets. The atomic is a side effect the
    // compiler must repeat, so the loop cannot be optimised away.
    while (atomicAdd(stop, 0) == 0) {
        __nanosleep(1000);
    }
    if (i < n) out[i] = a[i] + b[i];
}

torch::Tensor spin_add(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    auto stop = torch::zeros({1}, a.options().dtype(torch::kInt32));
    int n = a.numel();
    spin_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                          out.data_ptr<float>(), n, stop.data_ptr<int>());
    return out;
}
"""

_ext = load_inline(
    name="kbox_gpu_infinite_kernel",
    cpp_sources="torch::Tensor spin_add(torch::Tensor a, torch::Tensor b);",
    cuda_sources=_cuda_src,
    functions=["spin_add"],
)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return _ext.spin_add(a, b)
