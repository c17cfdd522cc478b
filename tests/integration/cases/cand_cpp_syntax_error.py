"""Candidate whose C++ does not parse: the marked line has a dangling `+`."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_source = r"""
#include <torch/extension.h>

torch::Tensor clamp_scale_broken(torch::Tensor x, torch::Tensor gain) {
    auto out = torch::empty_like(x);
    float broken = (1.0f + );  // KBOX_IT_SYNTAX_ERROR
    return out;
}
"""

_ext = load_inline(
    name="kbox_it_syntax_error",
    cpp_sources=_source,
    functions=["clamp_scale_broken"],
)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return _ext.clamp_scale_broken(x, self.gain)
