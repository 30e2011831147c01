"""The ``Logger`` interface every experiment logger implements."""

from __future__ import annotations

import argparse
import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, SupportsFloat

import torch

__all__ = ["Logger", "as_float", "check_video", "flatten_config"]


class Logger(ABC):
    """Base class of the experiment loggers (CSV, TensorBoard, W&B, MLflow).

    A logger writes scalars, hyper-parameters, videos and histograms of one experiment
    ``exp_name`` under ``log_dir``. Subclasses create their backend in :meth:`_create_experiment`
    (called once, by the constructor) and implement the four ``log_*`` methods.

    Args:
        exp_name: the experiment's name (a folder or run name in the backend).
        log_dir: where the backend writes (its meaning depends on the backend).

    Examples:
        >>> class PrintLogger(Logger):
        ...     def _create_experiment(self):
        ...         return []
        ...     def log_scalar(self, name, value, step=None):
        ...         self.experiment.append((name, float(value), step))
        ...     def log_hparams(self, cfg):
        ...         pass
        ...     def log_video(self, name, video, step=None, **kwargs):
        ...         pass
        ...     def log_histogram(self, name, data, step=None, **kwargs):
        ...         pass
        >>> logger = PrintLogger("exp", log_dir=None)
        >>> logger.log_scalar("reward", 1.5, step=10)
        >>> logger.experiment
        [('reward', 1.5, 10)]
    """

    def __init__(self, exp_name: str, log_dir: str | None) -> None:
        if not isinstance(exp_name, str) or not exp_name:
            raise ValueError(
                f"{type(self).__name__}: exp_name must be a non-empty str, got {exp_name!r}"
            )
        self.exp_name = exp_name
        self.log_dir = log_dir
        self.experiment = self._create_experiment()

    @abstractmethod
    def _create_experiment(self) -> Any:
        """Creates the backend object (a writer, a run) that the ``log_*`` methods use."""

    @abstractmethod
    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Logs one scalar value.

        Args:
            name: the metric's name (``"/"`` groups metrics in backends that support it).
            value: a number or a one-element tensor.
            step: the x-axis value (frames collected, usually); ``None`` lets the backend count.
        """

    @abstractmethod
    def log_hparams(self, cfg: object) -> None:
        """Logs the hyper-parameters of the experiment.

        Args:
            cfg: a mapping, a dataclass instance, an ``argparse.Namespace`` or any object whose
                ``vars()`` are its settings; nested values are flattened into ``"a.b"`` names.
        """

    @abstractmethod
    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Logs a video.

        Args:
            name: the video's name.
            video: a ``uint8`` tensor of shape ``[T, C, H, W]`` or ``[N, T, C, H, W]``.
            step: the x-axis value.
            **kwargs: backend options (e.g. ``fps``).
        """

    @abstractmethod
    def log_histogram(
        self, name: str, data: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Logs the distribution of the values of a tensor.

        Args:
            name: the histogram's name.
            data: a tensor of any shape (flattened).
            step: the x-axis value.
            **kwargs: backend options (e.g. ``bins``).
        """

    def close(self) -> None:  # noqa: B027 (optional to override)
        """Flushes and releases what the logger holds (files, runs); the default does nothing."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(exp_name={self.exp_name!r}, log_dir={self.log_dir!r})"


def flatten_config(cfg: object, prefix: str = "") -> dict[str, Any]:
    """Turns a configuration object into a flat ``{"a.b": value}`` dict.

    Args:
        cfg: a mapping, a dataclass instance, an ``argparse.Namespace``, an object with
            ``__dict__``, or an OmegaConf config (anything with ``items()``).
        prefix: prepended to every name (used for nesting).

    Returns:
        A dict from dotted names to leaf values (numbers, strings, bools, ``None`` or other leaves).

    Raises:
        TypeError: ``cfg`` is none of the above.

    Examples:
        >>> flatten_config({"lr": 0.1, "net": {"depth": 2, "cells": 64}})
        {'lr': 0.1, 'net.depth': 2, 'net.cells': 64}
    """
    items: Any
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        items = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}.items()
    elif isinstance(cfg, argparse.Namespace):
        items = vars(cfg).items()
    elif isinstance(cfg, Mapping) or hasattr(cfg, "items"):
        items = cfg.items()
    elif hasattr(cfg, "__dict__"):
        items = vars(cfg).items()
    else:
        raise TypeError(
            f"cannot read hyper-parameters from a {type(cfg).__name__}: pass a dict, a dataclass "
            f"instance or an argparse.Namespace"
        )
    out: dict[str, Any] = {}
    for key, value in items:
        name = f"{prefix}{key}"
        nested = (
            isinstance(value, Mapping)
            or isinstance(value, argparse.Namespace)
            or (dataclasses.is_dataclass(value) and not isinstance(value, type))
        )
        if nested:
            out.update(flatten_config(value, prefix=f"{name}."))
        else:
            out[name] = value
    return out


def as_float(value: SupportsFloat) -> float:
    """Converts a number or a one-element tensor/array to a Python float."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"a scalar needs one element, got a tensor of shape {tuple(value.shape)}"
            )
        return float(value.detach().reshape(()).item())
    if hasattr(value, "item"):
        return float(value.item())
    return float(value)


def check_video(video: object, who: str) -> torch.Tensor:
    """Validates a video tensor (``[T, C, H, W]`` or ``[N, T, C, H, W]``) and returns it."""
    if not isinstance(video, torch.Tensor):
        video = torch.as_tensor(video)
    if video.ndim not in (4, 5):
        raise ValueError(
            f"{who}: a video is a [T, C, H, W] or [N, T, C, H, W] tensor, got shape {tuple(video.shape)}"
        )
    return video
