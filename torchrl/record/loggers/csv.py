"""A dependency-free logger writing CSV files (one per scalar) and saved tensors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any, Literal

import torch

from torchrl._utils import import_optional
from torchrl.record.loggers.common import Logger, as_float, check_video, flatten_config

__all__ = ["CSVLogger"]


class CSVLogger(Logger):
    """Logs to plain files under ``log_dir/exp_name``; needs no optional package.

    Layout: ``scalars/<name>.csv`` (one ``step,value`` row per call, flushed at once),
    ``hparams.json``, ``videos/<name>_<step>.pt`` (or ``.mp4`` with ``video_format="mp4"``,
    which needs torchvision) and ``histograms/<name>_<step>.pt``. A ``"/"`` in a name makes a
    sub-folder. A ``step`` of ``None`` counts calls per name.

    Args:
        exp_name: the experiment's name (its folder).
        log_dir: the parent folder; defaults to ``"csv_logs"``.
        video_format: ``"pt"`` (a ``torch.save`` of the uint8 tensor) or ``"mp4"``.
        video_fps: frames per second of mp4 videos.

    Examples:
        >>> import tempfile
        >>> tmp = tempfile.mkdtemp()
        >>> logger = CSVLogger("exp", log_dir=tmp)
        >>> logger.log_scalar("reward", 1.0, step=10)
        >>> logger.log_scalar("reward", 2.0, step=20)
        >>> open(f"{tmp}/exp/scalars/reward.csv").read().split()
        ['10,1.0', '20,2.0']
        >>> logger.close()
    """

    def __init__(
        self,
        exp_name: str,
        log_dir: str | os.PathLike | None = None,
        video_format: Literal["pt", "mp4"] = "pt",
        video_fps: int = 30,
    ) -> None:
        if video_format not in ("pt", "mp4"):
            raise ValueError(f"CSVLogger: video_format must be 'pt' or 'mp4', got {video_format!r}")
        self.video_format = video_format
        self.video_fps = int(video_fps)
        self._files: dict[str, IO[str]] = {}
        self._counts: dict[str, int] = {}
        super().__init__(exp_name, str(log_dir) if log_dir is not None else "csv_logs")

    def _create_experiment(self) -> Path:
        root = Path(self.log_dir) / self.exp_name  # type: ignore[arg-type]
        root.mkdir(parents=True, exist_ok=True)
        return root

    @property
    def root(self) -> Path:
        """The experiment's folder."""
        return self.experiment

    def _next_step(self, name: str, step: int | None) -> int:
        if step is None:
            step = self._counts.get(name, 0)
        self._counts[name] = int(step) + 1
        return int(step)

    def _path(self, folder: str, name: str, suffix: str) -> Path:
        path = self.root / folder / f"{name}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Appends ``step,value`` to ``scalars/<name>.csv`` and flushes it."""
        step = self._next_step(name, step)
        handle = self._files.get(name)
        if handle is None or handle.closed:
            handle = open(self._path("scalars", name, ".csv"), "a")  # noqa: SIM115 (kept open)
            self._files[name] = handle
        handle.write(f"{step},{as_float(value)}\n")
        handle.flush()

    def log_hparams(self, cfg: object) -> None:
        """Writes the flattened configuration to ``hparams.json`` (values that JSON cannot hold
        are written as their ``repr``)."""
        flat = flatten_config(cfg)
        path = self.root / "hparams.json"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(flat, indent=2, default=repr))
        os.replace(tmp, path)

    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Saves a ``[T, C, H, W]`` (or ``[N, T, C, H, W]``) uint8 video as ``.pt`` or ``.mp4``.

        Args:
            name: the video's name.
            video: the frames.
            step: the x-axis value (part of the file name).
            **kwargs: ``fps`` overrides ``video_fps`` for mp4.
        """
        video = check_video(video, "CSVLogger.log_video").detach().cpu()
        step = self._next_step(f"video:{name}", step)
        if self.video_format == "pt":
            torch.save(video, self._path("videos", f"{name}_{step}", ".pt"))
            return
        io = import_optional("torchvision.io", extra=None)
        frames = video if video.ndim == 4 else video.flatten(0, 1)
        # torchvision wants [T, H, W, C] uint8.
        frames = frames.permute(0, 2, 3, 1)
        if frames.shape[-1] == 1:
            frames = frames.expand(*frames.shape[:-1], 3)
        io.write_video(
            str(self._path("videos", f"{name}_{step}", ".mp4")),
            frames.to(torch.uint8),
            fps=int(kwargs.get("fps", self.video_fps)),
        )

    def log_histogram(
        self, name: str, data: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Saves the values (flattened, on CPU) to ``histograms/<name>_<step>.pt``."""
        step = self._next_step(f"hist:{name}", step)
        values = torch.as_tensor(data).detach().cpu().reshape(-1)
        torch.save(values, self._path("histograms", f"{name}_{step}", ".pt"))

    def close(self) -> None:
        """Closes the open CSV files."""
        for handle in self._files.values():
            handle.close()
        self._files.clear()

    def __del__(self) -> None:
        # Files are flushed at every write; closing here only releases the handles.
        files = getattr(self, "_files", None)
        if files:
            for handle in files.values():
                try:
                    handle.close()
                except Exception:  # noqa: BLE001 (interpreter shutdown)
                    pass
