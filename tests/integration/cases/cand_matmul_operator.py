"""Candidate for ref_matmul_relu.py that writes the relu in C++ but leaves the
matmul to PyTorch through the @ operator (rule py.matmul-operator); nothing
else in it breaks a strict rule."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_source = r"""
#include <torch/extension.h>

torch::Tensor relu_out(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* xp = xc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) op[i] = xp[i] > 0.0f ? xp[i] : 0.0f;
    return out;
}
"""

_ext = load_inline(
    name="kbox_it_matmul_operator",
    cpp_sources=_source,
    functions=["relu_out"],
    extra_cflags=["-O2"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return _ext.relu_out(a @ b)  # KBOX_IT_MATMUL
