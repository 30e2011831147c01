"""Re-exports :mod:`torchrl.record.loggers.trackio` under the trainers' path."""

from __future__ import annotations

from torchrl.record.loggers.trackio import TrackioLogger

__all__ = ["TrackioLogger"]
