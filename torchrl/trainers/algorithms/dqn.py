"""TorchRL's ``torchrl.trainers.algorithms.dqn`` path; :class:`DQNTrainer` lives in :mod:`torchrl.trainers.algorithms.off_policy`."""

from __future__ import annotations

from torchrl.trainers.algorithms.off_policy import DQNTrainer

__all__ = ["DQNTrainer"]
