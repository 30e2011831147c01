"""TorchRL's ``torchrl.trainers.algorithms.a2c`` path; :class:`A2CTrainer` lives in :mod:`torchrl.trainers.algorithms.on_policy`."""

from __future__ import annotations

from torchrl.trainers.algorithms.on_policy import A2CTrainer

__all__ = ["A2CTrainer"]
