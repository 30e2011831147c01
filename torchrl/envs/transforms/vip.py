"""TorchRL's ``torchrl.envs.transforms.vip`` path; the transforms live in :mod:`torchrl.envs.transforms.pretrained`."""

from __future__ import annotations

from torchrl.envs.transforms.pretrained import VIPRewardTransform, VIPTransform

__all__ = ["VIPTransform", "VIPRewardTransform"]
