"""Recording: the experiment loggers (:mod:`torchrl.record.loggers`) and the recording transforms
(``VideoRecorder``, ``TensorDictRecorder``, ``PixelRenderTransform``)."""

from __future__ import annotations

from torchrl.record.loggers import (
    CSVLogger,
    Logger,
    MLFlowLogger,
    ProcessLogger,
    RayLogger,
    TensorboardLogger,
    TrackioLogger,
    WandbLogger,
    generate_exp_name,
    get_logger,
)
from torchrl.record.recorder import PixelRenderTransform, TensorDictRecorder, VideoRecorder

__all__ = [
    "CSVLogger",
    "Logger",
    "MLFlowLogger",
    "PixelRenderTransform",
    "ProcessLogger",
    "RayLogger",
    "TensorDictRecorder",
    "TensorboardLogger",
    "TrackioLogger",
    "VideoRecorder",
    "WandbLogger",
    "generate_exp_name",
    "get_logger",
]
