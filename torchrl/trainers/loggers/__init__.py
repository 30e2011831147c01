"""The experiment loggers under the trainers' path; they live in :mod:`torchrl.record.loggers`.

Each submodule here (``common``, ``csv``, ``mlflow``, ``monitoring``, ``process``,
``ray_logger``, ``tensorboard``, ``trackio``, ``utils``, ``wandb``)
re-exports the module of the same name there, so both import paths name the same objects.
"""

from __future__ import annotations

from torchrl.record.loggers import (
    CSVLogger,
    Every,
    Logger,
    LoggerMonitor,
    MLFlowLogger,
    ProcessLogger,
    RayLogger,
    TensorboardLogger,
    TrackioLogger,
    WandbLogger,
    generate_exp_name,
    get_logger,
)

__all__ = [
    "CSVLogger",
    "Every",
    "Logger",
    "LoggerMonitor",
    "MLFlowLogger",
    "ProcessLogger",
    "RayLogger",
    "TensorboardLogger",
    "TrackioLogger",
    "WandbLogger",
    "generate_exp_name",
    "get_logger",
]
