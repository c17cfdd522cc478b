import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

WIDTH = 8
NAME = "relu"
body = f"""
torch::Tensor {NAME}_fwd(torch::Tensor x) {{
    // width {WIDTH:>{WIDTH // 2}} and {f"{NAME!r:^12}"}
    return x.clamp_min({0.0:.1f});
}}
"""
decl = f'torch::Tensor {NAME}_fwd(torch::Tensor x);'
tag = f"{'outer' + f'{WIDTH:02d}' + f'{ {"k": 1}["k"] }'}"
msg = f"{tag=} {len(body)=:,} {'\\n'.join(['a', 'b'])!s}"
ext = load_inline(name=f"ext_{NAME}", cpp_sources=[decl + body], functions=[f"{NAME}_fwd"])


class ModelNew(nn.Module):
    def forward(self, x):
        return getattr(ext, f"{NAME}_fwd")(x)
