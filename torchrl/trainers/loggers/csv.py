"""Re-exports :mod:`torchrl.record.loggers.csv` under the trainers' path."""

from __future__ import annotations

from torchrl.record.loggers.csv import CSVLogger

__all__ = ["CSVLogger"]
