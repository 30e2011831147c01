"""Re-exports :mod:`torchrl.record.loggers.process` under the trainers' path."""

from __future__ import annotations

from torchrl.record.loggers.process import ProcessLogger, ProcessLoggerClient

__all__ = ["ProcessLogger", "ProcessLoggerClient"]
