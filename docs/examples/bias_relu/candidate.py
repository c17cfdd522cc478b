"""Example candidate: the bias add and the ReLU fused into one C++ loop.

Builds its own extension with load_inline(cpp_sources=...), so it runs on the
`cpu` backend; forward calls only the compiled function.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_source = r"""
#include <torch/extension.h>

// out[r, c] = max(x[r, c] + bias[c], 0), one pass over x.
torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.dim() == 2 && bias.dim() == 1 && x.size(1) == bias.size(0), "shape mismatch");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "expected float32");
    auto xc = x.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.size(0), cols = xc.size(1);
    const float* xp = xc.data_ptr<float>();
    const float* bp = bc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const float v = xp[r * cols + c] + bp[c];
            op[r * cols + c] = v > 0.0f ? v : 0.0f;
        }
    }
    return out;
}
"""

_ext = load_inline(
    name="kbox_example_bias_relu",
    cpp_sources=_source,
    functions=["bias_relu"],
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        # Created exactly as the reference creates it, so both get the same values.
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.bias_relu(x, self.bias)
