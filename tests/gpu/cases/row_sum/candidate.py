"""An honest row-sum kernel: one block of 256 threads per row, each thread a
strided partial sum, warp shuffles, then one warp over the warps' sums.
load_inline is reached through a module alias. Expected: CORRECT, and the GPU
stays in service."""
import torch
import torch.nn as nn
import torch.utils.cpp_extension as cpp_ext

_cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int cols) {
    const float* row = x + (size_t)blockIdx.x * cols;
    float acc = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffff, acc, off);
    __shared__ float warp_sums[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < (blockDim.x >> 5) ? warp_sums[lane] : 0.f;
        for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffff, acc, off);
        if (lane == 0) out[blockIdx.x] = acc;
    }
}

torch::Tensor row_sum(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kFloat, "2-D fp32 CUDA input");
    auto xc = x.contiguous();
    const int rows = xc.size(0), cols = xc.size(1);
    auto out = torch::empty({rows, 1}, xc.options());
    row_sum_kernel<<<rows, 256>>>(xc.data_ptr<float>(), out.data_ptr<float>(), cols);
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "row_sum_kernel: ", cudaGetErrorString(err));
    return out;
}
"""

_ext = cpp_ext.load_inline(
    name="kbox_gpu_row_sum",
    cpp_sources="torch::Tensor row_sum(torch::Tensor x);",
    cuda_sources=_cuda_src,
    functions=["row_sum"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.row_sum(x)
