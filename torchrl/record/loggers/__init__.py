"""Experiment loggers: one :class:`Logger` interface, CSV, TensorBoard, W&B, MLflow and Trackio
backends, logger services (:class:`ProcessLogger`, :class:`RayLogger`) and :class:`LoggerMonitor`.

A leaf utility: the loggers import nothing from envs, collectors or trainers, and each backend
imports its package only when a logger is built. :mod:`torchrl.trainers.loggers` re-exports
them under their older path.
"""

from __future__ import annotations

from torchrl.record.loggers.common import Logger
from torchrl.record.loggers.csv import CSVLogger
from torchrl.record.loggers.mlflow import MLFlowLogger
from torchrl.record.loggers.monitoring import Every, LoggerMonitor
from torchrl.record.loggers.process import ProcessLogger
from torchrl.record.loggers.ray_logger import RayLogger
from torchrl.record.loggers.tensorboard import TensorboardLogger
from torchrl.record.loggers.trackio import TrackioLogger
from torchrl.record.loggers.utils import generate_exp_name, get_logger
from torchrl.record.loggers.wandb import WandbLogger

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
