"""TorchRL's ``torchrl.trainers.algorithms.fql`` path; :class:`FQLTrainer` lives in :mod:`torchrl.trainers.algorithms.off_policy`."""

from __future__ import annotations

from torchrl.trainers.algorithms.off_policy import FQLTrainer

__all__ = ["FQLTrainer"]
