"""Experiment naming and the ``get_logger`` factory."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

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
    logger_type: str | None,
    logger_name: str,
    experiment_name: str,
    *,
    service_backend: Literal["direct", "process", "ray"] = "direct",
    service_backend_options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Logger | None:
    """Builds a logger by type name, in this process or as a logger service.

    Args:
        logger_type: ``"csv"``, ``"tensorboard"``, ``"wandb"``, ``"mlflow"`` or ``"trackio"``;
            ``None`` or ``""`` returns ``None`` (no logging).
        logger_name: the folder the logger writes under (for mlflow, a local ``file:`` store;
            for trackio, the project unless ``project=`` is given).
        experiment_name: the experiment's name (see :func:`generate_exp_name`).
        service_backend: ``"direct"`` builds the logger here; ``"process"`` runs it in a
            :class:`~torchrl.record.loggers.ProcessLogger`, ``"ray"`` in a
            :class:`~torchrl.record.loggers.RayLogger` (workers log through ``.client()``).
        service_backend_options: keywords of the service: ``mp_context``, ``max_queue_size``,
            ``startup_timeout`` (process); ``ray_actor_options``, ``ray_init_config`` (ray).
        **kwargs: passed to the logger's constructor (e.g. ``project`` for wandb,
            ``video_format`` for csv).

    Returns:
        The logger, or ``None``.

    Raises:
        ValueError: an unknown ``logger_type`` or ``service_backend``.
        ImportError: the backend's package is missing (names the extra).

    Examples:
        >>> import tempfile
        >>> logger = get_logger("csv", tempfile.mkdtemp(), "exp")
        >>> type(logger).__name__
        'CSVLogger'
    """
    if service_backend not in ("direct", "process", "ray"):
        raise ValueError(
            f"service_backend must be 'direct', 'process' or 'ray', got {service_backend!r}"
        )
    if service_backend == "direct" and service_backend_options:
        raise ValueError("service_backend_options need service_backend='process' or 'ray'")
    if not logger_type:
        return None
    kind = logger_type.lower()
    logger_cls: type[Logger]
    if kind == "csv":
        from torchrl.record.loggers.csv import CSVLogger

        logger_cls = CSVLogger
        kwargs["log_dir"] = logger_name
    elif kind == "tensorboard":
        from torchrl.record.loggers.tensorboard import TensorboardLogger

        logger_cls = TensorboardLogger
        kwargs["log_dir"] = logger_name
    elif kind == "wandb":
        from torchrl.record.loggers.wandb import WandbLogger

        logger_cls = WandbLogger
        kwargs.setdefault("save_dir", logger_name)
    elif kind == "mlflow":
        from torchrl.record.loggers.mlflow import MLFlowLogger

        logger_cls = MLFlowLogger
        uri = kwargs.pop("tracking_uri", None) or Path(os.path.abspath(logger_name)).as_uri()
        kwargs["tracking_uri"] = uri
    elif kind == "trackio":
        from torchrl.record.loggers.trackio import TrackioLogger

        logger_cls = TrackioLogger
        kwargs["project"] = kwargs.pop("project", None) or logger_name
    else:
        raise ValueError(
            f"unknown logger_type {logger_type!r}: expected 'csv', 'tensorboard', 'wandb', "
            f"'mlflow' or 'trackio'"
        )
    options = dict(service_backend_options or {})
    if service_backend == "process":
        from torchrl.record.loggers.process import ProcessLogger

        return ProcessLogger(logger_cls, experiment_name, **options, **kwargs)
    if service_backend == "ray":
        from torchrl.record.loggers.ray_logger import RayLogger

        return RayLogger(logger_cls, experiment_name, **options, **kwargs)
    return logger_cls(experiment_name, **kwargs)
