"""Honest candidate for ref_clamp_scale.py whose C++ reaches load_inline
through a helper's parameter: kbox's static checks cannot read it as text, so
they defer it; the compile stage reports the string the call received and
kboxd checks that (docs/anticheat.md, "Sources kbox reads after the compile").
Before, such a candidate was REJECTED by py.unresolved-extension-source."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_source = r"""
#include <torch/extension.h>

// out[r, c] = min(max(x[r, c] * gain[c], -1), 1)
torch::Tensor clamp_scale(torch::Tensor x, torch::Tensor gain) {
    TORCH_CHECK(x.dim() == 2 && gain.dim() == 1 && x.size(1) == gain.size(0), "shape mismatch");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "expected float32");
    auto xc = x.contiguous();
    auto gc = gain.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.size(0), cols = xc.size(1);
    const float* xp = xc.data_ptr<float>();
    const float* gp = gc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            float v = xp[r * cols + c] * gp[c];
            v = v < -1.0f ? -1.0f : v;
            op[r * cols + c] = v > 1.0f ? 1.0f : v;
        }
    }
    return out;
}
"""


def _build(name, cpp):
    return load_inline(  # KBOX_IT_LOAD_INLINE
        name=name,
        cpp_sources=cpp,
        functions=["clamp_scale"],
        extra_cflags=["-O2"],
    )


_ext = _build("kbox_it_clamp_scale_helper", _source)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        # Created exactly as the reference creates its parameter: same values.
        self.gain = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return _ext.clamp_scale(x, self.gain)
