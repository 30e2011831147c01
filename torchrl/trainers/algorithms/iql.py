"""TorchRL's ``torchrl.trainers.algorithms.iql`` path; :class:`IQLTrainer` lives in :mod:`torchrl.trainers.algorithms.off_policy`."""

from __future__ import annotations

from torchrl.trainers.algorithms.off_policy import IQLTrainer

__all__ = ["IQLTrainer"]
