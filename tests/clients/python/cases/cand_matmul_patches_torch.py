"""Candidate for ref_matmul_relu.py that is right but patches a torch function
(rule py.patch-library); the RL adapter tests reject it with that one rule on."""
import torch
import torch.nn as nn

torch.cuda.synchronize = lambda *args, **kwargs: None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a @ b)
