"""Candidate that tries to start a process once candidate code runs, which the
sandbox forbids: the job must end as SANDBOX_VIOLATION. Nothing to build."""
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.features = features

    def forward(self, x):
        if os.fork() == 0:
            os._exit(0)
        return x
