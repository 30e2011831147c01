"""TorchRL's ``torchrl.trainers.algorithms.ppo`` path; :class:`PPOTrainer` lives in :mod:`torchrl.trainers.algorithms.on_policy`."""

from __future__ import annotations

from torchrl.trainers.algorithms.on_policy import PPOTrainer

__all__ = ["PPOTrainer"]
