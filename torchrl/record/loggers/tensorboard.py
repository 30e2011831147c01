"""A logger writing TensorBoard event files through ``torch.utils.tensorboard``."""

from __future__ import annotations

import os
from typing import Any

import torch

from torchrl._utils import has_module, import_optional
from torchrl.record.loggers.common import Logger, as_float, check_video, flatten_config

__all__ = ["TensorboardLogger"]

_has_tensorboard = has_module("tensorboard")


class TensorboardLogger(Logger):
    """Logs to TensorBoard event files in ``log_dir/exp_name`` (needs ``tensorboard``).

    The ``SummaryWriter`` is imported when the logger is built, so importing torchrl never needs
    tensorboard. Videos go through ``SummaryWriter.add_video`` (which itself needs ``moviepy``).

    Args:
        exp_name: the experiment's name (its folder).
        log_dir: the parent folder; defaults to ``"tb_logs"``.

    Raises:
        ImportError: tensorboard is not installed (names the ``tensorboard`` extra).

    Examples:
        >>> import tempfile
        >>> logger = TensorboardLogger("exp", log_dir=tempfile.mkdtemp())  # doctest: +SKIP
        >>> logger.log_scalar("reward", 1.0, step=10)  # doctest: +SKIP
    """

    def __init__(self, exp_name: str, log_dir: str | os.PathLike | None = None) -> None:
        self._has_imported_moviepy = False
        super().__init__(exp_name, str(log_dir) if log_dir is not None else "tb_logs")

    def _create_experiment(self) -> Any:
        import_optional("tensorboard", extra="tensorboard")
        writer_mod = import_optional("torch.utils.tensorboard", extra="tensorboard")
        return writer_mod.SummaryWriter(log_dir=os.path.join(self.log_dir, self.exp_name))  # type: ignore[arg-type]

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Writes one scalar (``add_scalar``)."""
        self.experiment.add_scalar(name, as_float(value), global_step=step)

    def log_hparams(self, cfg: object) -> None:
        """Writes the flattened configuration as TensorBoard hyper-parameters.

        Values that are not numbers, strings or bools are written as their ``str``.
        """
        flat = {
            k: v if isinstance(v, (int, float, str, bool)) else str(v)
            for k, v in flatten_config(cfg).items()
        }
        self.experiment.add_hparams(flat, {}, run_name=".")

    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Writes a video (``add_video``); a ``[T, C, H, W]`` video gets a leading batch dim.

        Args:
            name: the video's name.
            video: uint8 frames, ``[T, C, H, W]`` or ``[N, T, C, H, W]``.
            step: the x-axis value.
            **kwargs: passed to ``add_video`` (e.g. ``fps``).
        """
        video = check_video(video, "TensorboardLogger.log_video").detach().cpu()
        if video.ndim == 4:
            video = video.unsqueeze(0)
        self.experiment.add_video(name, video, global_step=step, **kwargs)

    def log_histogram(
        self, name: str, data: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Writes a histogram of the values (``add_histogram``); ``bins`` may be given."""
        values = torch.as_tensor(data).detach().cpu().reshape(-1)
        self.experiment.add_histogram(name, values, global_step=step, **kwargs)

    def close(self) -> None:
        """Flushes and closes the event file."""
        self.experiment.close()
