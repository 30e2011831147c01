"""TorchRL's ``torchrl.envs.transforms.vc1`` path; the transforms live in :mod:`torchrl.envs.transforms.pretrained`."""

from __future__ import annotations

from torchrl.envs.transforms.pretrained import VC1Transform

__all__ = ["VC1Transform"]
