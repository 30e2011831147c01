"""Experiment naming and the ``get_logger`` factory."""

from __future__ import annotations

import os
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from torchrl.record.loggers.common import Logger

__all__ = ["generate_exp_name", "get_logger"]


def generate_exp_name(model_name: str, experiment_name: str) -> str:
    """Builds a unique experiment name: model, experiment, a short random id and the time.

    Args:
        model_name: e.g. ``"SAC"``.
        experiment_name: e.g. ``"pendulum"``.

    Returns:
        ``"<model>_<experiment>_<8 hex digits>_<yy_mm_dd-HH_MM_SS>"``.

    Examples:
        >>> name = generate_exp_name("SAC", "pendulum")
        >>> name.startswith("SAC_pendulum_"), len(name.split("_")[2])
        (True, 8)
    """
    stamp = datetime.now().strftime("%y_%m_%d-%H_%M_%S")
    return f"{model_name}_{experiment_name}_{uuid.uuid4().hex[:8]}_{stamp}"


def get_logger(
    logger_type: str | None, logger_name: str, experiment_name: str, **kwargs: Any
) -> Logger | None:
    """Builds a logger by type name.

    Args:
        logger_type: ``"csv"``, ``"tensorboard"``, ``"wandb"``, ``"mlflow"`` or ``"trackio"``;
            ``None`` or ``""`` returns ``None`` (no logging).
        logger_name: the folder the logger writes under (for mlflow, a local ``file:`` store;
            for trackio, the project unless ``project=`` is given).
        experiment_name: the experiment's name (see :func:`generate_exp_name`).
        **kwargs: passed to the logger's constructor (e.g. ``project`` for wandb,
            ``video_format`` for csv).

    Returns:
        The logger, or ``None``.

    Raises:
        ValueError: an unknown ``logger_type``.
        ImportError: the backend's package is missing (names the extra).

    Examples:
        >>> import tempfile
        >>> logger = get_logger("csv", tempfile.mkdtemp(), "exp")
        >>> type(logger).__name__
        'CSVLogger'
    """
    if not logger_type:
        return None
    kind = logger_type.lower()
    if kind == "csv":
        from torchrl.record.loggers.csv import CSVLogger

        return CSVLogger(experiment_name, log_dir=logger_name, **kwargs)
    if kind == "tensorboard":
        from torchrl.record.loggers.tensorboard import TensorboardLogger

        return TensorboardLogger(experiment_name, log_dir=logger_name, **kwargs)
    if kind == "wandb":
        from torchrl.record.loggers.wandb import WandbLogger

        kwargs.setdefault("save_dir", logger_name)
        return WandbLogger(experiment_name, **kwargs)
    if kind == "mlflow":
        from torchrl.record.loggers.mlflow import MLFlowLogger

        uri = kwargs.pop("tracking_uri", None) or Path(os.path.abspath(logger_name)).as_uri()
        return MLFlowLogger(experiment_name, tracking_uri=uri, **kwargs)
    if kind == "trackio":
        from torchrl.record.loggers.trackio import TrackioLogger

        project = kwargs.pop("project", None) or logger_name
        return TrackioLogger(experiment_name, project=project, **kwargs)
    raise ValueError(
        f"unknown logger_type {logger_type!r}: expected 'csv', 'tensorboard', 'wandb', 'mlflow' "
        f"or 'trackio'"
    )
