"""Recording transforms: ``VideoRecorder`` (frames to a logger), ``TensorDictRecorder`` (env
outputs to a file) and ``PixelRenderTransform`` (the base env's ``render()`` as an observation)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase, maybe_dense_stack

from torchrl._keys import PIXELS
from torchrl._types import NestedKey
from torchrl.data.specs import Bounded, Composite, NonTensor, TensorSpec, Unbounded
from torchrl.envs.transforms.base import Transform
from torchrl.record.loggers.common import Logger

__all__ = ["PixelRenderTransform", "TensorDictRecorder", "VideoRecorder"]


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


class TensorDictRecorder(Transform):
    """Keeps every ``skip``-th TensorDict an env outputs and saves them, stacked, on :meth:`dump`.

    Reset and step outputs are both seen (unchanged); every ``skip``-th one is copied (its
    ``in_keys`` entries, or all of them). :meth:`dump` drops the first kept TensorDict when
    ``skip_reset`` (usually the reset output, which lacks the step entries), stacks the others
    along a new first dim (a lazy stack when their keys differ) and saves it with ``torch.save``
    to ``f"{out_file_base}_{n}.pt"`` (``n``: the dump count; written to a temporary name and
    renamed). Load it back with ``torch.load(path, weights_only=False)``.

    Args:
        out_file_base: the path prefix of the files written.
        skip_reset: drop the first kept TensorDict at each dump (default ``True``).
        skip: keep one TensorDict out of ``skip`` (default 4).
        in_keys: the entries to keep (default: all of them).

    Examples:
        >>> import tempfile, torch
        >>> from torchrl.envs import PendulumEnv, TransformedEnv
        >>> from torchrl.record import TensorDictRecorder
        >>> base = tempfile.mkdtemp() + "/rollout"
        >>> recorder = TensorDictRecorder(base, skip=1, in_keys=["observation"])
        >>> env = TransformedEnv(PendulumEnv(), recorder)
        >>> _ = env.rollout(5)
        >>> recorder.dump()  # 1 reset + 5 steps, the reset dropped
        >>> torch.load(base + "_0.pt", weights_only=False)["observation"].shape
        torch.Size([5, 3])
    """

    def __init__(
        self,
        out_file_base: str | os.PathLike[str],
        skip_reset: bool = True,
        skip: int = 4,
        in_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(in_keys=in_keys)
        self.out_file_base = str(out_file_base)
        self.skip_reset = bool(skip_reset)
        self.skip = int(skip)
        if self.skip < 1:
            raise ValueError(f"TensorDictRecorder: skip must be >= 1, got {skip}")
        self._kept: list[TensorDictBase] = []
        self._seen = 0
        self.count = 0

    def _record(self, tensordict: TensorDictBase) -> None:
        if self._seen % self.skip == 0:
            if self.in_keys:
                # a reset output lacks the step entries: keep what it has
                tensordict = tensordict.select(*self.in_keys, strict=False)
            self._kept.append(tensordict.detach().clone().cpu())
        self._seen += 1

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        self._record(next_tensordict)
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        self._record(tensordict_reset)
        return tensordict_reset

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Records ``tensordict`` (module use) and returns it unchanged.

        Args:
            tensordict: the data to record.

        Returns:
            ``tensordict``.
        """
        self._record(tensordict)
        return tensordict

    def dump(self) -> None:
        """Saves the TensorDicts kept so far (one file) and clears them; no-op without any."""
        kept = self._kept[1:] if self.skip_reset else self._kept
        self._kept = []
        self._seen = 0
        if not kept:
            return
        stacked = maybe_dense_stack(kept, 0)  # lazy only when the keys differ
        path = Path(f"{self.out_file_base}_{self.count}.pt")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        torch.save(stacked, tmp)
        os.replace(tmp, path)  # a crash never leaves a half-written file under the final name
        self.count += 1

    def extra_repr(self) -> str:
        return f"out_file_base={self.out_file_base!r}, skip={self.skip}, kept={len(self._kept)}"


class PixelRenderTransform(Transform):
    """Calls the base env's ``render()`` after every reset and step and writes the frame.

    An alternative to ``from_pixels=True`` for envs that lack it, or to render only some envs:
    the frame returned by ``base_env.render()`` (a gymnasium env built with
    ``render_mode="rgb_array"`` returns ``[H, W, 3]`` uint8 arrays; a sequence of frames, one per
    sub-env, is stacked) goes under ``out_keys`` (``"pixels"``). A frame that cannot be a tensor
    of the env's batch shape (or any frame, with ``as_non_tensor=True``) is written as non-tensor
    data. The spec of the entry is read from one frame, rendered when the spec is first needed
    (after a reset of the base env if it cannot render yet).

    Args:
        out_keys: the key of the frame (one key; default ``["pixels"]``).
        preproc: applied to each frame before it is written (e.g. a crop or a resize).
        as_non_tensor: write frames as non-tensor data; inferred from the first frame when
            ``None``.
        render_method: the name of the base env's method to call (default ``"render"``).
        pass_tensordict: pass the env's output TensorDict to the render method (for stateless
            envs that render from their data).
        **kwargs: passed to the render method.

    Examples:
        >>> from torchrl.envs import GymEnv, TransformedEnv
        >>> from torchrl.record import PixelRenderTransform
        >>> base = GymEnv("CartPole-v1", render_mode="rgb_array")
        >>> env = TransformedEnv(base, PixelRenderTransform())
        >>> env.rollout(3)["next", "pixels"].shape
        torch.Size([3, 400, 600, 3])
    """

    def __init__(
        self,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        preproc: Callable[[Any], Any] | None = None,
        as_non_tensor: bool | None = None,
        render_method: str = "render",
        pass_tensordict: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(in_keys=[], out_keys=out_keys if out_keys is not None else [PIXELS])
        if len(self.out_keys) != 1:
            raise ValueError(f"PixelRenderTransform: expected one out_key, got {self.out_keys}")
        self.preproc = preproc
        self.as_non_tensor = as_non_tensor
        self.render_method = render_method
        self.pass_tensordict = bool(pass_tensordict)
        self.render_kwargs = kwargs
        self._frame_spec: TensorSpec | None = None

    def _update_pairs(self) -> None:
        # the frame comes from the env's render(), not from an input key
        self._pairs = []
        self._inv_pairs = []

    def _render(self, tensordict: TensorDictBase | None) -> Any:
        parent = self.parent
        if parent is None:
            raise RuntimeError(
                "PixelRenderTransform renders the env it belongs to: append it to an env "
                "(TransformedEnv(env, PixelRenderTransform())); it does nothing on its own"
            )
        base = parent.base_env
        render = getattr(base, self.render_method, None)
        if not callable(render):
            raise AttributeError(
                f"PixelRenderTransform: the base env {type(base).__name__} has no "
                f"{self.render_method}() method"
            )
        if self.pass_tensordict:
            frame = render(tensordict, **self.render_kwargs)
        else:
            frame = render(**self.render_kwargs)
        if frame is not None and self.preproc is not None:
            frame = self.preproc(frame)
        return frame

    def _as_tensor(self, frame: Any, batch: torch.Size) -> torch.Tensor | None:
        """The frame as a tensor of batch ``batch``, or ``None`` when it is not one."""
        if isinstance(frame, torch.Tensor):
            tensor = frame
        else:
            if isinstance(frame, (list, tuple)) and frame and isinstance(frame[0], np.ndarray):
                frame = np.stack(frame)
            if not isinstance(frame, np.ndarray) or frame.dtype.kind not in "biuf":
                return None
            tensor = torch.from_numpy(np.ascontiguousarray(frame))
        if tuple(tensor.shape[: len(batch)]) != tuple(batch):
            return None
        return tensor

    def _write(self, tensordict: TensorDictBase, frame: Any) -> TensorDictBase:
        key = self.out_keys[0]
        if frame is None:
            raise RuntimeError(
                f"PixelRenderTransform: {self.render_method}() returned None; a gymnasium env "
                "must be built with render_mode='rgb_array' to return frames"
            )
        tensor = None if self.as_non_tensor else self._as_tensor(frame, tensordict.batch_size)
        if tensor is None:
            if self.as_non_tensor is False:
                raise ValueError(
                    f"PixelRenderTransform: the frame ({type(frame).__name__}) is not a numeric "
                    f"array of batch shape {list(tensordict.batch_size)}; pass "
                    "as_non_tensor=True to store it as non-tensor data"
                )
            tensordict.set_non_tensor(key, frame)
        else:
            tensordict.set(key, tensor.to(tensordict.device) if tensordict.device else tensor)
        return tensordict

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._write(next_tensordict, self._render(next_tensordict))

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._write(tensordict_reset, self._render(tensordict_reset))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Renders the parent env into ``tensordict`` (only inside an env).

        Args:
            tensordict: the env output to write the frame into.

        Returns:
            ``tensordict`` with the frame.
        """
        return self._call(tensordict)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        """Adds the frame's spec, read from one rendered frame."""
        if self._frame_spec is None:
            self._frame_spec = self._make_frame_spec(observation_spec)
        observation_spec[self.out_keys[0]] = self._frame_spec.clone()
        return observation_spec

    def _make_frame_spec(self, observation_spec: Composite) -> TensorSpec:
        batch, device = observation_spec.shape, observation_spec.device
        if self.as_non_tensor:
            return NonTensor(shape=batch, device=device)
        parent = self.parent
        frame = None
        if parent is not None and not self.pass_tensordict:
            try:
                frame = self._render(None)
            except Exception:  # noqa: BLE001 (retried below; a second failure propagates)
                # many envs render nothing before their first reset (gymnasium returns None
                # or raises ResetNeeded): reset once and render again
                frame = None
        if frame is None and parent is not None:
            frame = self._render(parent.base_env.reset())
        if frame is None:
            raise RuntimeError(
                f"PixelRenderTransform: {self.render_method}() returned None; a gymnasium env "
                "must be built with render_mode='rgb_array' to return frames"
            )
        tensor = self._as_tensor(frame, batch)
        if tensor is None:
            if self.as_non_tensor is False:
                raise ValueError(
                    f"PixelRenderTransform: the frame ({type(frame).__name__}) is not a numeric "
                    f"array of batch shape {list(batch)}; pass as_non_tensor=True"
                )
            return NonTensor(shape=batch, device=device)
        if tensor.dtype is torch.uint8:
            return Bounded(0, 255, shape=tensor.shape, dtype=torch.uint8, device=device)
        return Unbounded(shape=tensor.shape, dtype=tensor.dtype, device=device)

    def set_container(self, container: object) -> None:
        """Declares the env holding this transform (the frame spec is read again there).

        Args:
            container: the env or ``Compose`` holding the transform.
        """
        super().set_container(container)
        self._frame_spec = None

    def extra_repr(self) -> str:
        return f"out_keys={self.out_keys}, render_method={self.render_method!r}"
