"""Integration-test problem: scale by a learned per-feature gain, then clamp to [-1, 1].

KernelBench format: `Model`, `get_inputs()`, `get_init_inputs()`.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.clamp(x * self.gain, -1.0, 1.0)


rows = 64
features = 70


def get_inputs():
    return [torch.randn(rows, features)]


def get_init_inputs():
    return [features]
