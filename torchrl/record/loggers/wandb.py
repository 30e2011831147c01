"""A logger for Weights & Biases runs (online or offline)."""

from __future__ import annotations

import os
from typing import Any

import torch

from torchrl._utils import has_module, import_optional
from torchrl.record.loggers.common import Logger, as_float, check_video, flatten_config

__all__ = ["WandbLogger"]

_has_wandb = has_module("wandb")


class WandbLogger(Logger):
    """Logs to a Weights & Biases run (needs ``wandb``); ``offline=True`` needs no network.

    Every scalar is logged with the ``"trainer/step"`` metric next to it so that W&B plots
    against frames, whatever order the metrics arrive in.

    Args:
        exp_name: the run's name.
        offline: run in offline mode (files only; sync later with ``wandb sync``).
        save_dir: where wandb writes its files (its ``dir``); created if needed.
        id: a run id, to resume a run.
        project: the W&B project.
        **kwargs: passed to ``wandb.init`` (``entity``, ``group``, ``config``, ``mode``, ...).
            ``log_dir`` is accepted as an alias of ``save_dir``.

    Raises:
        ImportError: wandb is not installed (names the ``wandb`` extra).

    Examples:
        >>> import tempfile
        >>> logger = WandbLogger("exp", offline=True, save_dir=tempfile.mkdtemp())  # doctest: +SKIP
        >>> logger.log_scalar("reward", 1.0, step=10)  # doctest: +SKIP
    """

    def __init__(
        self,
        exp_name: str,
        offline: bool = False,
        save_dir: str | os.PathLike | None = None,
        id: str | None = None,  # noqa: A002 (TorchRL's name)
        project: str | None = None,
        **kwargs: Any,
    ) -> None:
        log_dir = kwargs.pop("log_dir", None)
        save_dir = save_dir if save_dir is not None else log_dir
        self.offline = bool(offline)
        self._init_kwargs = {
            "dir": str(save_dir) if save_dir is not None else None,
            "name": exp_name,
            "id": id,
            "project": project,
            "resume": "allow",
            **kwargs,
        }
        if self.offline:
            self._init_kwargs["mode"] = "offline"
        if self._init_kwargs["dir"] is not None:
            os.makedirs(self._init_kwargs["dir"], exist_ok=True)
        super().__init__(exp_name, self._init_kwargs["dir"])

    def _create_experiment(self) -> Any:
        wandb = import_optional("wandb", extra="wandb")
        run = wandb.init(**self._init_kwargs)
        run.define_metric("trainer/step")
        run.define_metric("*", step_metric="trainer/step")
        return run

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Logs ``{name: value}`` (with ``"trainer/step"`` when ``step`` is given)."""
        payload: dict[str, Any] = {name: as_float(value)}
        if step is not None:
            payload["trainer/step"] = int(step)
        self.experiment.log(payload)

    def log_hparams(self, cfg: object) -> None:
        """Stores the flattened configuration in the run's config."""
        self.experiment.config.update(flatten_config(cfg), allow_val_change=True)

    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Logs a ``wandb.Video`` of uint8 frames ``[T, C, H, W]`` or ``[N, T, C, H, W]``.

        Args:
            name: the video's name.
            video: the frames.
            step: the x-axis value.
            **kwargs: ``fps`` (default 30) and ``format`` (default ``"mp4"``) for ``wandb.Video``.
        """
        wandb = import_optional("wandb", extra="wandb")
        video = check_video(video, "WandbLogger.log_video").detach().cpu()
        clip = wandb.Video(
            video.numpy(), fps=int(kwargs.get("fps", 30)), format=kwargs.get("format", "mp4")
        )
        payload: dict[str, Any] = {name: clip}
        if step is not None:
            payload["trainer/step"] = int(step)
        self.experiment.log(payload)

    def log_histogram(
        self, name: str, data: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Logs a ``wandb.Histogram`` of the values (``num_bins`` may be given)."""
        wandb = import_optional("wandb", extra="wandb")
        values = torch.as_tensor(data).detach().cpu().reshape(-1).numpy()
        payload: dict[str, Any] = {
            name: wandb.Histogram(values, num_bins=kwargs.get("num_bins", 64))
        }
        if step is not None:
            payload["trainer/step"] = int(step)
        self.experiment.log(payload)

    def close(self) -> None:
        """Finishes the run."""
        self.experiment.finish()
