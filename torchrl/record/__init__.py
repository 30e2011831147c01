"""Recording: the experiment loggers (:mod:`torchrl.record.loggers`) and ``VideoRecorder``."""

from __future__ import annotations

from torchrl.record.loggers import (
    CSVLogger,
    Logger,
    MLFlowLogger,
    TensorboardLogger,
    WandbLogger,
    generate_exp_name,
    get_logger,
)
from torchrl.record.recorder import VideoRecorder

__all__ = [
    "CSVLogger",
    "Logger",
    "MLFlowLogger",
    "TensorboardLogger",
    "VideoRecorder",
    "WandbLogger",
    "generate_exp_name",
    "get_logger",
]
