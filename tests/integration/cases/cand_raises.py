"""Candidate that builds nothing and raises its own exception type in forward."""
import torch.nn as nn


class KboxIntegrationError(Exception):
    pass


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.features = features

    def forward(self, x):
        raise KboxIntegrationError("deliberate failure from the integration test")  # KBOX_IT_RAISE
