"""Re-exports :mod:`torchrl.record.loggers.wandb` under the trainers' path."""

from torchrl.record.loggers.wandb import WandbLogger

__all__ = ["WandbLogger"]
