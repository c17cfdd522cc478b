"""Candidate for ref_matmul_relu.py that is wrong on purpose (an offset), in
plain PyTorch so it needs no build; run with anticheat_profile "off"."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a @ b) + 0.25
