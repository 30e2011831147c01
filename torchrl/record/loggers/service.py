"""What the logger services (:class:`ProcessLogger`, :class:`RayLogger`) share: worker clients.

A logger service runs one concrete logger somewhere else (a process, a Ray actor). The owner,
the driver that built it, can flush and stop it; workers get a :class:`LoggerClient`, which can
only submit ``log_*`` calls. Tensors travel as numpy arrays (on CPU), so a client never passes
shared-memory handles that would die with the worker.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from torchrl.record.loggers.common import Logger

__all__ = ["LOG_METHODS", "LoggerClient", "LoggerService", "portable"]

#: The calls a client may submit.
LOG_METHODS = ("log_scalar", "log_hparams", "log_video", "log_histogram")


def portable(value: Any) -> Any:
    """``value`` with tensors (at any depth of lists, tuples and dicts) turned into numpy arrays.

    Args:
        value: a logging argument.

    Returns:
        The same structure, tensors detached, moved to CPU and converted.

    Examples:
        >>> portable({"a": torch.ones(2)})["a"]
        array([1., 1.], dtype=float32)
    """
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(portable(v) for v in value)
    return value


class LoggerClient(ABC):
    """A worker's handle on a logger service: it can log, not flush or stop the service.

    Subclasses implement :meth:`submit`, which delivers one call to the service.
    """

    @abstractmethod
    def submit(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Delivers ``method(*args, **kwargs)`` to the service's logger.

        Args:
            method: one of :data:`LOG_METHODS`.
            args: positional arguments (already :func:`portable`).
            kwargs: keyword arguments (already :func:`portable`).
        """

    def _call(self, method: str, *args: Any, **kwargs: Any) -> None:
        self.submit(method, portable(args), portable(kwargs))

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Logs one scalar (see :meth:`Logger.log_scalar <torchrl.record.loggers.Logger.log_scalar>`).

        Args:
            name: the metric's name.
            value: a number or a one-element tensor.
            step: the x-axis value.
        """
        self._call("log_scalar", name, value, step=step)

    def log_hparams(self, cfg: object) -> None:
        """Logs the hyper-parameters (a mapping, dataclass instance or namespace).

        Args:
            cfg: the configuration; it must be picklable.
        """
        self._call("log_hparams", cfg)

    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Logs a video of uint8 frames ``[T, C, H, W]`` or ``[N, T, C, H, W]``.

        Args:
            name: the video's name.
            video: the frames.
            step: the x-axis value.
            **kwargs: backend options.
        """
        self._call("log_video", name, video, step=step, **kwargs)

    def log_histogram(
        self, name: str, data: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Logs the distribution of the values of ``data``.

        Args:
            name: the histogram's name.
            data: a tensor of any shape.
            step: the x-axis value.
            **kwargs: backend options.
        """
        self._call("log_histogram", name, data, step=step, **kwargs)


class LoggerService(Logger):
    """The owner's side of a logger service: its ``log_*`` calls go through its own client.

    Subclasses set ``_client`` (a :class:`LoggerClient`) and ``_closed``, and implement
    ``shutdown``.
    """

    _client: LoggerClient
    _closed: bool

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__}: the service was shut down")

    def shutdown(self) -> None:
        """Stops the service."""
        raise NotImplementedError

    def close(self) -> None:
        """Same as :meth:`shutdown`."""
        self.shutdown()

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Submits a scalar to the service's logger."""
        self._check_open()
        self._client.log_scalar(name, value, step=step)

    def log_hparams(self, cfg: object) -> None:
        """Submits the hyper-parameters to the service's logger."""
        self._check_open()
        self._client.log_hparams(cfg)

    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Submits a video to the service's logger."""
        self._check_open()
        self._client.log_video(name, video, step=step, **kwargs)

    def log_histogram(
        self, name: str, data: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Submits a histogram to the service's logger."""
        self._check_open()
        self._client.log_histogram(name, data, step=step, **kwargs)
