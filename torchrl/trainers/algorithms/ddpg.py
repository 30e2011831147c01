"""TorchRL's ``torchrl.trainers.algorithms.ddpg`` path; :class:`DDPGTrainer` lives in :mod:`torchrl.trainers.algorithms.off_policy`."""

from __future__ import annotations

from torchrl.trainers.algorithms.off_policy import DDPGTrainer

__all__ = ["DDPGTrainer"]
