"""Re-exports :mod:`torchrl.record.loggers.ray_logger` under the trainers' path."""

from __future__ import annotations

from torchrl.record.loggers.ray_logger import RayLogger, RayLoggerClient

__all__ = ["RayLogger", "RayLoggerClient"]
