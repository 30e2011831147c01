"""Stateless functions behind some transforms (the ``F.x`` side of the ``nn.X`` / ``F.x`` split).

``cat_frames`` builds the sliding windows of successive frames that :class:`CatFrames` keeps
online, for whole trajectories at once (e.g. replay-buffer samples).
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["cat_frames"]


def cat_frames(
    tensor: torch.Tensor,
    N: int,
    dim: int,
    *,
    padding: Literal["same", "constant"] = "same",
    padding_value: float = 0.0,
    time_dim: int = -1,
    done_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Concatenates, at each time step, the ``N`` last frames along ``dim``.

    Position ``t`` of the output holds frames ``t - N + 1, ..., t`` (oldest first). Frames
    before the start of a trajectory are padding: the trajectory's first frame
    (``padding="same"``) or ``padding_value`` (``"constant"``).

    Args:
        tensor: the frames; ``time_dim`` is time, ``dim`` the axis the frames are joined along.
        N: how many frames each window holds (``>= 1``).
        dim: the concatenation dim; negative (independent of leading batch dims), and not
            ``time_dim``. The output is ``N`` times larger along it.
        padding: ``"same"`` or ``"constant"``.
        padding_value: the fill of ``"constant"`` padding.
        time_dim: the time dim; negative.
        done_mask: optional bool tensor shaped like ``tensor`` up to (and including)
            ``time_dim``: ``True`` where a trajectory ends. A window never reaches back past
            the end of the previous trajectory: those frames are padding.

    Returns:
        A tensor shaped like ``tensor`` with ``dim`` multiplied by ``N``.

    Examples:
        >>> import torch
        >>> from torchrl.envs.transforms.functional import cat_frames
        >>> x = torch.arange(4.0).reshape(4, 1)  # 4 time steps, 1 feature
        >>> cat_frames(x, N=2, dim=-1, time_dim=-2)
        tensor([[0., 0.],
                [0., 1.],
                [1., 2.],
                [2., 3.]])
        >>> done = torch.tensor([False, True, False, False]).unsqueeze(-1)
        >>> cat_frames(x, N=2, dim=-1, time_dim=-2, done_mask=done)[2]  # a new trajectory
        tensor([2., 2.])
    """
    if N < 1:
        raise ValueError(f"cat_frames: N must be >= 1, got {N}")
    if dim >= 0 or time_dim >= 0:
        raise ValueError(f"cat_frames: dim and time_dim must be negative, got {dim}, {time_dim}")
    if padding not in ("same", "constant"):
        raise ValueError(f"cat_frames: padding must be 'same' or 'constant', got {padding!r}")
    ndim = tensor.ndim
    if -dim > ndim or -time_dim > ndim:
        raise ValueError(
            f"cat_frames: dim {dim} / time_dim {time_dim} out of range for a tensor of {ndim} dims"
        )
    if dim == time_dim:
        raise ValueError("cat_frames: dim and time_dim must differ")
    t_axis = ndim + time_dim
    length = tensor.shape[t_axis]
    steps = torch.arange(length, device=tensor.device)
    # Start of the trajectory each step belongs to (0 without a done mask).
    if done_mask is not None:
        mask = done_mask.to(torch.bool)
        if mask.ndim > t_axis + 1 and all(s == 1 for s in mask.shape[t_axis + 1 :]):
            mask = mask.reshape(mask.shape[: t_axis + 1])
        if mask.shape != tensor.shape[: t_axis + 1]:
            raise ValueError(
                f"cat_frames: done_mask of shape {tuple(done_mask.shape)} does not match the "
                f"tensor's leading dims {tuple(tensor.shape[: t_axis + 1])}"
            )
        # A step follows a done step: it starts a trajectory.
        starts = torch.zeros_like(mask)
        starts.narrow(-1, 1, length - 1).copy_(mask.narrow(-1, 0, length - 1))
        start_idx = torch.where(starts, steps, torch.zeros_like(steps)).cummax(-1).values
    else:
        start_idx = torch.zeros(length, dtype=torch.long, device=tensor.device)
    frames = []
    for k in range(N - 1, -1, -1):
        idx = steps - k
        before = idx < start_idx
        src = torch.maximum(idx, start_idx)
        # Gather along time with an index broadcast over the other dims.
        index_shape = [1] * ndim
        index_shape[: t_axis + 1] = list(src.shape) if src.ndim > 1 else [1] * t_axis + [length]
        src_b = src.reshape(index_shape).expand(tensor.shape)
        frame = torch.gather(tensor, t_axis, src_b)
        if padding == "constant":
            pad_mask = before.reshape(index_shape).expand(tensor.shape)
            frame = torch.where(pad_mask, torch.full_like(frame, padding_value), frame)
        frames.append(frame)
    return torch.cat(frames, dim)
