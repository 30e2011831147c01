"""Re-exports :mod:`torchrl.record.loggers.mlflow` under the trainers' path."""

from __future__ import annotations

from torchrl.record.loggers.mlflow import MLFlowLogger

__all__ = ["MLFlowLogger"]
