"""A broken problem: get_inputs raises, so no candidate can be judged."""
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2.0


class BrokenProblemError(Exception):
    pass


def get_inputs():
    raise BrokenProblemError("reference get_inputs is broken on purpose")


def get_init_inputs():
    return []
