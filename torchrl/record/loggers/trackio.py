"""A logger for Trackio runs (Hugging Face's local-first experiment tracker)."""

from __future__ import annotations

from typing import Any

import torch

from torchrl._utils import has_module, import_optional
from torchrl.record.loggers.common import Logger, as_float, check_video, flatten_config

__all__ = ["TrackioLogger"]

_has_trackio = has_module("trackio")


class TrackioLogger(Logger):
    """Logs to a Trackio run (needs ``trackio``: ``pip install "torchrl[trackio]"``).

    The run is opened with ``trackio.init(project=..., name=exp_name, ...)`` when the logger is
    built; every ``log_*`` call becomes one ``trackio.log(metrics, step=step)`` and
    :meth:`close` calls ``trackio.finish()``. Trackio stores runs locally unless told to sync
    to a Space (``space_id=...``).

    Args:
        exp_name: the run's name.
        project: the Trackio project the run belongs to (also the logger's ``log_dir``).
        video_fps: frames per second of the videos logged by :meth:`log_video`.
        **kwargs: passed to ``trackio.init`` (``config``, ``group``, ``space_id``,
            ``resume``, ...).

    Raises:
        ImportError: trackio is not installed (names the ``trackio`` extra).

    Examples:
        >>> logger = TrackioLogger("run-1", project="cartpole")  # doctest: +SKIP
        >>> logger.log_scalar("reward", 1.0, step=10)  # doctest: +SKIP
        >>> logger.close()  # doctest: +SKIP
    """

    def __init__(self, exp_name: str, project: str, *, video_fps: int = 32, **kwargs: Any) -> None:
        if not isinstance(project, str) or not project:
            raise ValueError(f"TrackioLogger: project must be a non-empty str, got {project!r}")
        if int(video_fps) <= 0:
            raise ValueError(f"TrackioLogger: video_fps must be > 0, got {video_fps!r}")
        self.project = project
        self.video_fps = int(video_fps)
        self._init_kwargs = {"project": project, "name": exp_name, **kwargs}
        self._trackio: Any = None
        super().__init__(exp_name, project)

    def _create_experiment(self) -> Any:
        self._trackio = import_optional("trackio", extra="trackio")
        return self._trackio.init(**self._init_kwargs)

    def _log(self, payload: dict[str, Any], step: int | None) -> None:
        self._trackio.log(payload, step=None if step is None else int(step))

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Logs ``{name: value}`` at ``step`` (Trackio counts steps itself when ``None``)."""
        self._log({name: as_float(value)}, step)

    def log_hparams(self, cfg: object) -> None:
        """Stores the flattened configuration in the run's ``config``.

        Args:
            cfg: a mapping, dataclass instance or ``argparse.Namespace`` (see
                :func:`~torchrl.record.loggers.common.flatten_config`).
        """
        config = getattr(self.experiment, "config", None)
        if config is None:
            raise RuntimeError(
                "TrackioLogger.log_hparams: the trackio run has no 'config' to update; pass "
                "config=... to the logger's constructor instead"
            )
        config.update(flatten_config(cfg))

    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Logs a ``trackio.Video`` of uint8 frames ``[T, C, H, W]`` or ``[N, T, C, H, W]``.

        Args:
            name: the video's name.
            video: the frames.
            step: the x-axis value.
            **kwargs: ``fps`` overrides ``video_fps``; others go to ``trackio.Video``
                (``caption``, ``format``).
        """
        video = check_video(video, "TrackioLogger.log_video").detach().cpu()
        fps = int(kwargs.pop("fps", self.video_fps))
        clip = self._trackio.Video(video.numpy(), fps=fps, **kwargs)
        self._log({name: clip}, step)

    def log_histogram(
        self, name: str, data: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Logs a ``trackio.Histogram`` of the values of ``data`` (flattened).

        Args:
            name: the histogram's name.
            data: a tensor of any shape.
            step: the x-axis value.
            **kwargs: ``num_bins`` (default 64).
        """
        values = torch.as_tensor(data).detach().cpu().reshape(-1).numpy()
        num_bins = int(kwargs.get("num_bins", 64))
        self._log({name: self._trackio.Histogram(values, num_bins=num_bins)}, step)

    def close(self) -> None:
        """Finishes the run (``trackio.finish()``)."""
        self._trackio.finish()

    def __repr__(self) -> str:
        return f"TrackioLogger(exp_name={self.exp_name!r}, project={self.project!r})"
