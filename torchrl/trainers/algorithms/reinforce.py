"""TorchRL's ``torchrl.trainers.algorithms.reinforce`` path; :class:`ReinforceTrainer` lives in :mod:`torchrl.trainers.algorithms.on_policy`."""

from __future__ import annotations

from torchrl.trainers.algorithms.on_policy import ReinforceTrainer

__all__ = ["ReinforceTrainer"]
