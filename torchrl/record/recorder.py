"""``VideoRecorder``: an env transform that collects pixel frames and writes them through a logger."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from torchrl._keys import PIXELS
from torchrl._types import NestedKey
from torchrl.envs.transforms.base import Transform
from torchrl.record.loggers.common import Logger

__all__ = ["VideoRecorder"]


class VideoRecorder(Transform):
    """Keeps every ``skip``-th pixel frame an env produces and logs them as a video on :meth:`dump`.

    Frames are read from ``in_keys`` (``"pixels"``) on reset and on every step, and left
    unchanged. They may be ``[*B, C, H, W]`` or channel-last ``[*B, H, W, C]`` (``C`` of 1, 3 or
    4), uint8 or float in ``[0, 1]``. :meth:`dump` stacks them into a ``[T, C, H, W]`` uint8
    video (``[N, T, C, H, W]`` for batched envs, or one ``[T, C, H, W']`` row of tiles with
    ``make_grid=True``), calls ``logger.log_video(tag, video, step=<dump count>, fps=fps)`` and
    starts a new video.

    Args:
        logger: the logger to write to.
        tag: the video's name.
        in_keys: the pixel entry (one key).
        skip: keep one frame out of ``skip`` (default 2).
        center_crop: crop frames to a centred ``center_crop x center_crop`` square.
        make_grid: tile the frames of a batched env side by side into one video.
        out_keys: unused (the data is not changed); kept for TorchRL compatibility.
        fps: frames per second passed to the logger (default 30).

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from torchrl.record.loggers import CSVLogger
        >>> logger = CSVLogger("exp", log_dir=tempfile.mkdtemp())
        >>> recorder = VideoRecorder(logger, "rollout", skip=1)
        >>> for _ in range(3):
        ...     _ = recorder(TensorDict(pixels=torch.zeros(8, 8, 3, dtype=torch.uint8)))
        >>> recorder.dump()
        >>> torch.load(logger.root / "videos" / "rollout_0.pt").shape
        torch.Size([3, 3, 8, 8])
    """

    def __init__(
        self,
        logger: Logger,
        tag: str,
        in_keys: Sequence[NestedKey] | None = None,
        skip: int | None = None,
        center_crop: int | None = None,
        make_grid: bool | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        fps: int | None = None,
        **kwargs: Any,
    ) -> None:
        in_keys = list(in_keys) if in_keys is not None else [PIXELS]
        if len(in_keys) != 1:
            raise ValueError(f"VideoRecorder: expected one pixel key, got {in_keys}")
        super().__init__(in_keys=in_keys)
        if not isinstance(logger, Logger):
            raise TypeError(
                f"VideoRecorder: logger must be a torchrl Logger, got {type(logger).__name__}"
            )
        self.logger = logger
        self.tag = tag
        self.skip = int(skip) if skip is not None else 2
        if self.skip < 1:
            raise ValueError(f"VideoRecorder: skip must be >= 1, got {skip}")
        self.center_crop = center_crop
        self.make_grid = bool(make_grid)
        self.fps = int(fps) if fps is not None else 30
        self._frames: list[torch.Tensor] = []
        self._seen = 0
        self.count = 0

    def _frame(self, pixels: torch.Tensor) -> torch.Tensor:
        if pixels.ndim < 3:
            raise ValueError(
                f"VideoRecorder: {self.in_keys[0]!r} must be [*B, C, H, W] or [*B, H, W, C] pixels, "
                f"got shape {tuple(pixels.shape)}"
            )
        if pixels.shape[-1] in (1, 3, 4) and pixels.shape[-3] not in (1, 3, 4):
            pixels = pixels.movedim(-1, -3)
        if pixels.is_floating_point():
            pixels = (pixels.clamp(0, 1) * 255).round()
        pixels = pixels.to(torch.uint8)
        if self.center_crop is not None:
            h, w = pixels.shape[-2:]
            c = int(self.center_crop)
            top, left = max((h - c) // 2, 0), max((w - c) // 2, 0)
            pixels = pixels[..., top : top + c, left : left + c]
        return pixels.detach().cpu().clone()

    def _record(self, tensordict: TensorDictBase) -> None:
        pixels = tensordict.get(self.in_keys[0], None)
        if pixels is None:
            return
        if self._seen % self.skip == 0:
            self._frames.append(self._frame(pixels))
        self._seen += 1

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        self._record(next_tensordict)
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        self._record(tensordict_reset)
        return tensordict_reset

    def dump(self, suffix: str | None = None) -> None:
        """Writes the frames kept so far as one video and clears them (no-op without frames).

        Args:
            suffix: appended to the tag.
        """
        if not self._frames:
            return
        video = torch.stack(self._frames, 0)  # [T, *B, C, H, W]
        if video.ndim > 4:
            video = video.flatten(1, -4).movedim(0, 1)  # [N, T, C, H, W]
            if self.make_grid:
                video = torch.cat(video.unbind(0), dim=-1)  # [T, C, H, N*W]
        tag = self.tag if suffix is None else f"{self.tag}_{suffix}"
        self.logger.log_video(tag, video, step=self.count, fps=self.fps)
        self.count += 1
        self._frames = []
        self._seen = 0

    def extra_repr(self) -> str:
        return f"tag={self.tag!r}, in_keys={self.in_keys}, skip={self.skip}, frames={len(self._frames)}"
