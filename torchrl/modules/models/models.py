"""TorchRL's ``torchrl.modules.models.models`` path; the names live in :mod:`torchrl.modules.models`."""

from __future__ import annotations

from torchrl.modules.models.conv import (
    ConvNet,
    DuelingCnnDQNet,
)
from torchrl.modules.models.conv3d import Conv3dNet
from torchrl.modules.models.ddpg import (
    DdpgCnnActor,
    DdpgCnnQNet,
    DdpgMlpActor,
    DdpgMlpQNet,
)
from torchrl.modules.models.distributional import DistributionalDQNnet
from torchrl.modules.models.mlp import MLP

__all__ = [
    "Conv3dNet",
    "ConvNet",
    "DdpgCnnActor",
    "DdpgCnnQNet",
    "DdpgMlpActor",
    "DdpgMlpQNet",
    "DistributionalDQNnet",
    "DuelingCnnDQNet",
    "MLP",
]
