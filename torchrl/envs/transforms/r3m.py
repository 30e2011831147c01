"""TorchRL's ``torchrl.envs.transforms.r3m`` path; the transforms live in :mod:`torchrl.envs.transforms.pretrained`."""

from __future__ import annotations

from torchrl.envs.transforms.pretrained import R3MTransform

__all__ = ["R3MTransform"]
