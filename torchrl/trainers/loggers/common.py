"""Re-exports :mod:`torchrl.record.loggers.common` under the trainers' path."""

from __future__ import annotations

from torchrl.record.loggers.common import Logger, as_float, check_video, flatten_config

__all__ = ["Logger", "as_float", "check_video", "flatten_config"]
