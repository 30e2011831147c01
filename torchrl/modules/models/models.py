"""TorchRL's ``torchrl.modules.models.models`` path; the networks live in :mod:`torchrl.modules.models`."""

from __future__ import annotations

from torchrl.modules.models.conv import ConvNet, DuelingCnnDQNet
from torchrl.modules.models.mlp import MLP

__all__ = ["MLP", "ConvNet", "DuelingCnnDQNet"]
