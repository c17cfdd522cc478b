"""Candidate that builds nothing and never returns from forward.

It forks once first, so the stage's process group holds two spinning
processes (both carry the job directory in their argv); the daemon must kill
both at the time limit.
"""
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.features = features

    def forward(self, x):
        try:
            os.fork()
        except OSError:
            pass
        n = 0
        while True:
            n += 1
