"""Honest clamp-scale in plain torch (run with the static checks off) whose
import, in the compile stage only, writes a compile report of its own on fd 3
(the stage's result pipe, which candidate code shares there): a failed build
whose compiler was "killed from outside the job". Believed, that is kbox's
INFRA_ERROR (masked in training); kbox believes it only while the job has an
attempt left, so on the last one it is the candidate's COMPILE_ERROR."""
import json
import os
import sys

import torch.nn as nn


if "kbox_harness.compile_stage" in sys.modules:  # kbox's compile stage imports us
    os.write(3, (json.dumps({"report": {
        "outcome": "COMPILE_FAILED", "compiler_killed": True,
        "message": "extension build failed: c++: fatal error: Killed signal terminated program cc1plus"}})
        + "\n").encode())
    os._exit(0)


class ModelNew(nn.Module):
    def __init__(self, scale=1.0):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x.clamp(-1.0, 1.0) * self.scale
