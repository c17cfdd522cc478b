"""Pure-Python candidate with nothing to build (used with the broken reference)."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x
