"""Re-exports :mod:`torchrl.record.loggers.utils` under the trainers' path."""

from __future__ import annotations

from torchrl.record.loggers.utils import generate_exp_name, get_logger

__all__ = ["generate_exp_name", "get_logger"]
