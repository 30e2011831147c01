"""Re-exports :mod:`torchrl.record.loggers.tensorboard` under the trainers' path."""

from __future__ import annotations

from torchrl.record.loggers.tensorboard import TensorboardLogger

__all__ = ["TensorboardLogger"]
