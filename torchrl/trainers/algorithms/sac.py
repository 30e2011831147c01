"""TorchRL's ``torchrl.trainers.algorithms.sac`` path; :class:`SACTrainer` lives in :mod:`torchrl.trainers.algorithms.off_policy`."""

from __future__ import annotations

from torchrl.trainers.algorithms.off_policy import SACTrainer

__all__ = ["SACTrainer"]
