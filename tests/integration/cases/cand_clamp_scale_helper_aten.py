"""cand_clamp_scale_helper.py's shape (the C++ reaches load_inline through a
helper's parameter, so the static checks defer it), with the work done by ATen
inside the extension: the compile stage reports the string, and kboxd rejects
it by cpp.aten-compute after the compile, before anything runs."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_source = r"""
#include <torch/extension.h>

torch::Tensor clamp_scale(torch::Tensor x, torch::Tensor gain) {
    return at::matmul(x, at::diag(gain)).clamp(-1.0, 1.0);  // KBOX_IT_ATEN
}
"""


def _build(name, cpp):
    return load_inline(  # KBOX_IT_LOAD_INLINE
        name=name,
        cpp_sources=cpp,
        functions=["clamp_scale"],
    )


_ext = _build("kbox_it_clamp_scale_helper_aten", _source)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return _ext.clamp_scale(x, self.gain)
