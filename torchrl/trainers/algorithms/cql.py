"""TorchRL's ``torchrl.trainers.algorithms.cql`` path; :class:`CQLTrainer` lives in :mod:`torchrl.trainers.algorithms.off_policy`."""

from __future__ import annotations

from torchrl.trainers.algorithms.off_policy import CQLTrainer

__all__ = ["CQLTrainer"]
