"""Experiment loggers: one :class:`Logger` interface, CSV, TensorBoard, W&B and MLflow backends.

Each backend imports its package only when a logger is built.
"""

from torchrl.trainers.loggers.common import Logger
from torchrl.trainers.loggers.csv import CSVLogger
from torchrl.trainers.loggers.mlflow import MLFlowLogger
from torchrl.trainers.loggers.tensorboard import TensorboardLogger
from torchrl.trainers.loggers.utils import generate_exp_name, get_logger
from torchrl.trainers.loggers.wandb import WandbLogger

__all__ = [
    "CSVLogger",
    "Logger",
    "MLFlowLogger",
    "TensorboardLogger",
    "WandbLogger",
    "generate_exp_name",
    "get_logger",
]
