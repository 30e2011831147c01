"""Re-exports :mod:`torchrl.record.loggers.wandb` under the trainers' path."""

from __future__ import annotations

from torchrl.record.loggers.wandb import WandbLogger

__all__ = ["WandbLogger"]
