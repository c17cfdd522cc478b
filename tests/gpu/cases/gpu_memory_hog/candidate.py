"""CUDA candidate that takes nearly all of the GPU's free memory when it is
built and keeps it, so that anything else on the GPU (the judge's reference)
finds none. Its kernel is an honest add.
Expected: never rewardable and never CORRECT (the reference cannot be run
beside it, so it cannot be judged); the GPU passes kboxd's device probe once
the job's processes are gone, and the honest few-shot pairs that follow on it
are CORRECT."""
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
    name="kbox_gpu_memory_hog",
    cpp_sources="torch::Tensor add(torch::Tensor a, torch::Tensor b);",
    cuda_sources=_cuda_src,
    functions=["add"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.hoard = []
        if torch.cuda.is_available():
            free, _ = torch.cuda.mem_get_info()
            # All but 64 MiB, in 256 MiB blocks (one huge block may not fit).
            block = 256 << 20
            for _ in range(max(0, (free - (64 << 20)) // block)):
                try:
                    self.hoard.append(torch.empty(block, dtype=torch.uint8, device="cuda"))
                except RuntimeError:
                    break

    def forward(self, a, b):
        return _ext.add(a, b)
