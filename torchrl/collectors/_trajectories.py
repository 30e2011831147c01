"""Trajectory ids: ``("collector", "traj_ids")`` numbers every trajectory a collector sees."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from torchrl._keys import DONE, NEXT
from torchrl._types import DeviceLike
from torchrl.collectors._buffer import TRAJ_KEY

__all__ = ["TrajectoryIds"]


class TrajectoryIds:
    """Hands out trajectory ids to the steps of a collector's batches, from their done flags.

    A trajectory starts at the first step of the collector, after every done step, and after a
    reset between batches (:meth:`start`). New ids are handed out in time order, then sub-env
    order, from a counter; a multi-process worker ``offset`` of ``stride`` workers writes
    ``id * stride + offset``, so that ids of different workers never collide. Steps before the
    first start of a row continue the row's trajectory from the previous batch.

    Args:
        batch_size: the env's batch size ``B``.
        device: where the ids are kept (the batches' device).
        offset: this worker's index (0 outside multi-process collectors).
        stride: the number of workers (1 outside multi-process collectors).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> ids = TrajectoryIds(torch.Size([1]), None)
        >>> done = torch.tensor([[[False], [True], [False]]])
        >>> batch = TensorDict({"next": {"done": done}}, batch_size=[1, 3])
        >>> ids.assign(batch)
        >>> batch["collector", "traj_ids"]
        tensor([[0, 0, 1]])
    """

    def __init__(
        self, batch_size: torch.Size, device: DeviceLike, offset: int = 0, stride: int = 1
    ) -> None:
        self.batch_dims = len(batch_size)
        self.current = torch.zeros(batch_size, dtype=torch.int64, device=device)
        self.pending_start = torch.ones(batch_size, dtype=torch.bool, device=device)
        #: ids handed out so far (by this worker)
        self.counter = 0
        self.offset = offset
        self.stride = stride

    def start(self, mask: torch.Tensor | None = None) -> None:
        """Starts new trajectories at the next step, in every sub-env or those in ``mask``."""
        if mask is None:
            self.pending_start.fill_(True)
        else:
            self.pending_start |= mask.to(self.pending_start.device)

    def assign(self, batch: TensorDictBase) -> None:
        """Writes ``("collector", "traj_ids")`` for a ``[*B, T]`` batch, from its done flags."""
        nb = self.batch_dims
        ends = None
        for key in batch.get(NEXT).keys(True, True):
            key_t = (key,) if isinstance(key, str) else tuple(key)
            if key_t[-1] == DONE:
                flag = batch.get((NEXT, *key_t))
                flag = flag.reshape(*flag.shape[: nb + 1], -1).any(-1)
                ends = flag if ends is None else ends | flag
        steps = batch.batch_size[nb]
        if ends is None:
            ends = torch.zeros(batch.batch_size[: nb + 1], dtype=torch.bool)
        ends = ends.to(self.current.device)
        starts = torch.empty_like(ends)
        starts[..., 0] = self.pending_start
        starts[..., 1:] = ends[..., :-1]
        flat = starts.reshape(-1, steps)  # [n_env, T]
        n_starts = int(flat.sum())
        if n_starts == 0:  # every row goes on with its trajectory (most batches of long episodes)
            ids = self.current.reshape(-1, 1).expand(-1, steps).clone()
        else:
            # Rank of each start in (time, sub-env) order: the starts at earlier times, plus
            # those at the same time in earlier or the same sub-envs, minus one.
            per_time = flat.sum(0)
            rank = flat.cumsum(0) + (per_time.cumsum(0) - per_time - 1)
            last = torch.where(flat, rank, -1).cummax(1).values
            fresh = (self.counter + last) * self.stride + self.offset
            ids = torch.where(last >= 0, fresh, self.current.reshape(-1, 1))
        self.counter += n_starts
        ids = ids.reshape(batch.batch_size[: nb + 1])
        current = batch.get(TRAJ_KEY, None)
        if current is None or current.shape != ids.shape:
            batch.set(TRAJ_KEY, ids)
        else:
            current.copy_(ids)
        self.current.copy_(ids[..., -1])
        self.pending_start = ends[..., -1].clone()
