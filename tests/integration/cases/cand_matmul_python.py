"""Candidate for ref_matmul_relu.py with no kernel at all: PyTorch does all of
it. Strict rejects it on several rules; with anticheat_profile "off" it runs
(and is correct), which shows the profile really switches the checks off."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a @ b)
