"""Plain torch whose import, in the compile stage only, announces kbox's
harness on fd 3 (the stage's result pipe, shared with candidate code there)
and then crashes with SIGSEGV: a crash in kbox's own code would be an
INFRA_ERROR, retried. It is the candidate's crash: COMPILE_ERROR, no retry."""
import json
import os
import signal
import sys

import torch.nn as nn


if "kbox_harness.compile_stage" in sys.modules:  # kbox's compile stage imports us
    os.write(3, (json.dumps({"enter": "HARNESS"}) + "\n").encode())
    os.kill(os.getpid(), signal.SIGSEGV)


class ModelNew(nn.Module):
    def forward(self, x):
        return x
