"""Re-exports :mod:`torchrl.record.loggers.monitoring` under the trainers' path."""

from __future__ import annotations

from torchrl.record.loggers.monitoring import Every, LoggerMonitor

__all__ = ["Every", "LoggerMonitor"]
