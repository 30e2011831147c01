"""Re-exports :mod:`torchrl.record.loggers.mlflow` under the trainers' path."""

from torchrl.record.loggers.mlflow import MLFlowLogger

__all__ = ["MLFlowLogger"]
