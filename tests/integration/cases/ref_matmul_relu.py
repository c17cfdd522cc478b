"""Integration-test problem for the static checks: relu(a @ b).

KernelBench format: `Model`, `get_inputs()`, `get_init_inputs()`.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(torch.matmul(a, b))


M, K, N = 16, 24, 8


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
