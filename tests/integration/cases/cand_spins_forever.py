"""Candidate that builds nothing and never returns from forward.

It starts a spinning thread first (the sandbox forbids new processes once
candidate code runs), so the stage holds a busy thread and a busy main loop;
the daemon must kill the whole stage at the time limit.
"""
import threading

import torch.nn as nn


def _spin():
    n = 0
    while True:
        n += 1


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.features = features

    def forward(self, x):
        threading.Thread(target=_spin, daemon=True).start()
        n = 0
        while True:
            n += 1
