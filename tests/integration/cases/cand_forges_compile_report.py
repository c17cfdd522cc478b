"""Honest clamp-scale in plain torch (run with the static checks off) whose
import, in the compile stage only, writes kbox's own result-channel lines on
fd 3 (the stage's result pipe, which candidate code shares there): it
announces kbox's harness, reports HARNESS_FAILED, and exits. Written as kbox's
failure it would be an INFRA_ERROR (masked in training, and retried); it is
the candidate's: COMPILE_ERROR, no retry."""
import json
import os
import sys

import torch.nn as nn


if "kbox_harness.compile_stage" in sys.modules:  # kbox's compile stage imports us
    os.write(3, (json.dumps({"enter": "HARNESS"}) + "\n").encode())
    os.write(3, (json.dumps({"report": {"outcome": "HARNESS_FAILED",
                                        "message": "harness failed: forged"}}) + "\n").encode())
    os._exit(0)


class ModelNew(nn.Module):
    def __init__(self, scale=1.0):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x.clamp(-1.0, 1.0) * self.scale
