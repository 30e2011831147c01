"""TorchRL's module path for replay-buffer transforms; they live in :mod:`torchrl.envs.transforms.rb`."""

from __future__ import annotations

from torchrl.envs.transforms.next_state import NextStateReconstructor
from torchrl.envs.transforms.rb import MultiStepTransform

__all__ = ["MultiStepTransform", "NextStateReconstructor"]
