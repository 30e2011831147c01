"""TorchRL's ``torchrl.trainers.algorithms.td3`` path; :class:`TD3Trainer` lives in :mod:`torchrl.trainers.algorithms.off_policy`."""

from __future__ import annotations

from torchrl.trainers.algorithms.off_policy import TD3Trainer

__all__ = ["TD3Trainer"]
