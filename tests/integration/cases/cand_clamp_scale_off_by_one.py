"""Wrong candidate for ref_clamp_scale.py: adds 1.0 to every 7th element (flat index)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_source = r"""
#include <torch/extension.h>

torch::Tensor clamp_scale_bad(torch::Tensor x, torch::Tensor gain) {
    TORCH_CHECK(x.dim() == 2 && gain.dim() == 1 && x.size(1) == gain.size(0), "shape mismatch");
    auto xc = x.contiguous();
    auto gc = gain.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.size(0), cols = xc.size(1);
    const float* xp = xc.data_ptr<float>();
    const float* gp = gc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t i = r * cols + c;
            float v = xp[i] * gp[c];
            v = v < -1.0f ? -1.0f : (v > 1.0f ? 1.0f : v);
            op[i] = (i % 7 == 0) ? v + 1.0f : v;  // the bug: off by +1 on every 7th element
        }
    }
    return out;
}
"""

_ext = load_inline(
    name="kbox_it_clamp_scale_bad",
    cpp_sources=_source,
    functions=["clamp_scale_bad"],
    extra_cflags=["-O2"],
)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return _ext.clamp_scale_bad(x, self.gain)
