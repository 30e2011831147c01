"""Batch post-processing: :class:`MultiStep` returns; :func:`split_trajectories`;
:class:`DensifyReward` (sparse rewards spread over their trajectory).

The first two work on batches whose last batch dim is time (``[*B, T]``), as collectors return them.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from torchrl._keys import COLLECTOR, DONE, MASK, NEXT, REWARD, TRAJ_IDS
from torchrl._recursions import reward_to_go
from torchrl._types import NestedKey

__all__ = ["DensifyReward", "MultiStep", "split_trajectories"]


class MultiStep(nn.Module):
    """Turns one-step transitions into n-step ones, within each trajectory of a batch.

    For each step ``t`` of a batch ``[*B, T]`` (time last), with ``m = min(n_steps, steps left
    in the trajectory and in the batch)``, the reward becomes ``sum_{k=0}^{m} gamma**k
    r[t+k]`` and every other ``"next"`` entry (observation, done flags, ...) is taken from step
    ``t + m``. The original reward is kept under ``("next", "original_reward")``;
    ``"steps_to_next_obs"`` (``m + 1``) and ``"gamma"`` (``gamma ** (m + 1)``, the discount to
    apply to the value of the new next observation) are added. A trajectory ends after a done
    step, or after its last valid step when the batch holds a ``("collector", "mask")``.
    ``n_steps=0`` leaves the data unchanged apart from the added entries. As with any
    post-processing of batches, steps near the end of a batch see fewer than ``n_steps`` steps.

    Args:
        gamma: the discount factor.
        n_steps: the number of steps looked ahead (``0``: one-step transitions).
        reward_key: the reward entry under ``"next"``.
        done_key: the done flag under ``"next"`` that ends a trajectory.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data.postprocs import MultiStep
        >>> data = TensorDict(
        ...     next=TensorDict(
        ...         reward=torch.ones(5, 1),
        ...         done=torch.tensor([False, False, True, False, False]).unsqueeze(-1),
        ...         observation=torch.arange(1.0, 6.0).unsqueeze(-1),
        ...         batch_size=[5],
        ...     ),
        ...     batch_size=[5],
        ... )
        >>> out = MultiStep(gamma=0.5, n_steps=1)(data)
        >>> out["next", "reward"].squeeze(-1)
        tensor([1.5000, 1.5000, 1.0000, 1.5000, 1.0000])
        >>> out["next", "observation"].squeeze(-1)
        tensor([2., 3., 3., 5., 5.])
        >>> out["steps_to_next_obs"]
        tensor([2, 2, 1, 2, 1])
    """

    def __init__(
        self,
        gamma: float,
        n_steps: int,
        *,
        reward_key: NestedKey = REWARD,
        done_key: NestedKey = DONE,
    ) -> None:
        super().__init__()
        if n_steps < 0:
            raise ValueError(f"MultiStep: n_steps must be >= 0, got {n_steps}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"MultiStep: gamma must be in [0, 1], got {gamma}")
        self.gamma = float(gamma)
        self.n_steps = int(n_steps)
        self.reward_key = (NEXT, *_as_tuple(reward_key))
        self.done_key = (NEXT, *_as_tuple(done_key))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Rewrites ``tensordict`` (batch ``[*B, T]``) in place into n-step transitions.

        Args:
            tensordict: a batch whose last batch dim is time.

        Returns:
            ``tensordict``, updated.
        """
        td = tensordict
        if td.batch_dims < 1:
            raise ValueError("MultiStep needs a batch with a time dim, got batch size []")
        reward = td.get(self.reward_key, None)
        done = td.get(self.done_key, None)
        if reward is None or done is None:
            missing = self.reward_key if reward is None else self.done_key
            raise KeyError(f"MultiStep: the batch has no entry {missing!r}")
        batch = td.batch_size
        time_dim = td.batch_dims - 1
        steps = batch[-1]
        ends = done.reshape(*batch, -1).any(-1)
        mask = td.get((COLLECTOR, MASK), None)
        if mask is not None:
            # the last valid step of a padded row ends its trajectory
            following = torch.cat([mask[..., 1:], torch.zeros_like(mask[..., :1])], -1)
            ends = ends | (mask & ~following)
        index = torch.arange(steps, device=ends.device)
        candidate = torch.where(ends, index, steps - 1)
        next_end = candidate.flip(-1).cummin(-1).values.flip(-1)
        look = torch.clamp(next_end - index, max=self.n_steps)

        shape_r = (*batch, *([1] * (reward.ndim - len(batch))))
        total = torch.zeros_like(reward)
        for k in range(self.n_steps + 1):
            shifted = reward.narrow(time_dim, k, steps - k) if k else reward
            if k:
                pad = torch.zeros_like(reward.narrow(time_dim, 0, k))
                shifted = torch.cat([shifted, pad], time_dim)
            keep = (look >= k).reshape(shape_r).to(reward.dtype)
            total = total + (self.gamma**k) * shifted * keep

        target = index + look
        nxt = td.get(NEXT)
        for key in list(nxt.keys(True, True)):
            full = (NEXT, *_as_tuple(key))
            if full == self.reward_key:
                continue
            value = td.get(full)
            if not isinstance(value, torch.Tensor):
                continue
            idx = target.reshape(*target.shape, *([1] * (value.ndim - len(batch))))
            td.set(full, torch.gather(value, time_dim, idx.expand_as(value)))
        td.set((*self.reward_key[:-1], "original_reward"), reward)
        td.set(self.reward_key, total)
        td.set("steps_to_next_obs", look + 1)
        td.set("gamma", self.gamma ** (look + 1).to(reward.dtype))
        return td

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, n_steps={self.n_steps}"


def _as_tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(cast(tuple[str, ...], key))


def split_trajectories(
    rollout_tensordict: TensorDictBase,
    *,
    prefix: NestedKey | None = None,
    trajectory_key: NestedKey | None = None,
    done_key: NestedKey | None = None,
    as_nested: bool = False,
) -> TensorDictBase:
    """Splits a batch of adjacent trajectories into one zero-padded row per trajectory.

    Trajectories are told apart by their ids (``trajectory_key``) or, without ids, by the done
    flags (a trajectory ends after a step whose ``("next", done_key)`` is true, and at the end
    of each row). Rows come out in increasing id order, steps in their original order.

    Args:
        rollout_tensordict: a batch ``[*B, T]`` whose last batch dim is time.
        prefix: where ``"traj_ids"`` is read and ``"mask"`` written: ``"collector"`` when the
            input has a ``"collector"`` entry, else the root.
        trajectory_key: the key of the trajectory ids (default ``(prefix, "traj_ids")``).
        done_key: the done flag used when there are no ids (default ``"done"``, read under
            ``"next"``).
        as_nested: return nested (jagged) tensors of batch ``[N]`` instead of padding.

    Returns:
        A TensorDict of batch ``[N, T_max]`` (``N`` trajectories), padded with zeros, with a
        boolean ``(prefix, "mask")`` entry that is true on real steps.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.collectors.utils import split_trajectories
        >>> data = TensorDict(
        ...     obs=torch.arange(5.0),
        ...     collector=TensorDict(traj_ids=torch.tensor([0, 0, 0, 1, 1]), batch_size=[5]),
        ...     batch_size=[5],
        ... )
        >>> out = split_trajectories(data)
        >>> out["obs"]
        tensor([[0., 1., 2.],
                [3., 4., 0.]])
        >>> out["collector", "mask"]
        tensor([[ True,  True,  True],
                [ True,  True, False]])
    """
    td = rollout_tensordict
    if td.batch_dims < 1:
        raise ValueError("split_trajectories needs a batch with a time dim, got batch size []")
    if prefix is None:
        prefix = COLLECTOR if COLLECTOR in td.keys() else ()
    prefix_t = _as_tuple(prefix) if prefix != () else ()
    traj_key = _as_tuple(trajectory_key) if trajectory_key is not None else (*prefix_t, TRAJ_IDS)
    mask_key = (*traj_key[:-1], MASK)
    flat = td.reshape(-1) if td.batch_dims > 1 else td
    ids = flat.get(traj_key, None)
    if ids is None:
        ids = _ids_from_done(td, done_key).reshape(-1)
    else:
        ids = ids.reshape(-1)
    n = ids.numel()
    # Sorting by id (stable) gathers each trajectory and keeps its steps in time order.
    order = torch.sort(ids, stable=True).indices
    sorted_ids = ids[order]
    uniq, counts = torch.unique_consecutive(sorted_ids, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    row = torch.repeat_interleave(torch.arange(uniq.numel(), device=ids.device), counts)
    col = torch.arange(n, device=ids.device) - starts[row]
    n_traj, length = uniq.numel(), int(counts.max()) if n else 0
    if as_nested:
        return _nested(flat, order, counts, mask_key)

    def scatter(value: torch.Tensor) -> torch.Tensor:
        out = value.new_zeros((n_traj, length, *value.shape[1:]))
        out[row, col] = value[order]
        return out

    out = _map_leaves(flat, scatter, [n_traj, length])
    mask = torch.zeros((n_traj, length), dtype=torch.bool, device=ids.device)
    mask[row, col] = True
    out.set(mask_key, mask)
    if out.get(traj_key, None) is None:
        out.set(traj_key, uniq.unsqueeze(-1).expand(n_traj, length).clone())
    return out


def _ids_from_done(td: TensorDictBase, done_key: NestedKey | None) -> torch.Tensor:
    key = (NEXT, *_as_tuple(done_key if done_key is not None else DONE))
    done = td.get(key, None)
    if done is None:
        raise KeyError(
            f"split_trajectories: the data has neither trajectory ids nor a done flag {key!r}"
        )
    done = done.reshape(*td.batch_size, -1).any(-1).reshape(-1, td.batch_size[-1])
    steps = done.shape[-1]
    # A trajectory starts after each done step; rows never share a trajectory.
    starts = torch.cat([torch.zeros_like(done[:, :1]), done[:, :-1]], dim=-1)
    local = starts.long().cumsum(-1)
    row = torch.arange(done.shape[0], device=done.device).unsqueeze(-1)
    return (row * (steps + 1) + local).reshape(td.batch_size)


def _map_leaves(td: TensorDictBase, fn: Any, batch_size: list[int]) -> TensorDict:
    out = TensorDict(batch_size=batch_size, device=td.device)
    for key, value in td.items():
        if isinstance(value, TensorDictBase):
            if getattr(value, "_is_non_tensor", False):
                continue
            inner = _map_leaves(value, fn, [*batch_size, *value.batch_size[1:]])
            out.set(key, inner)
        elif isinstance(value, torch.Tensor):
            out.set(key, fn(value))
    return out


def _nested(
    flat: TensorDictBase, order: torch.Tensor, counts: torch.Tensor, mask_key: tuple[str, ...]
) -> TensorDict:
    sizes = counts.tolist()

    def jag(value: torch.Tensor) -> torch.Tensor:
        parts = list(torch.split(value[order], sizes))
        return torch.nested.as_nested_tensor(parts, layout=torch.jagged)

    out = TensorDict(batch_size=[len(sizes)], device=flat.device)
    for key in flat.keys(True, True):
        value = flat.get(key)
        if isinstance(value, torch.Tensor):
            out.set(key, jag(value))
    ones = torch.ones(int(counts.sum()), dtype=torch.bool, device=counts.device)
    out.set(
        mask_key, torch.nested.as_nested_tensor(list(torch.split(ones, sizes)), layout=torch.jagged)
    )
    return out


class DensifyReward(nn.Module):
    """Spreads a sparse reward over its trajectory: each step gets the reward-to-go.

    For sparse rewards (non-zero only where a trajectory ends), every step ``t`` receives
    ``G_t = r_t + discount * G_{t+1}``, restarted after each step whose done flag is set. The
    intermediate rewards, if any, are summed in too.

    Args:
        reward_key: the reward entry (read as given, e.g. ``("next", "reward")`` for TED data).
        done_key: the done flag, shaped like the reward or broadcastable to it.
        reward_key_out: where the result goes (default: ``reward_key``, overwritten).
        time_dim: the time dim of the reward tensor (negative counts from the end).
        discount: the discount factor (``1.0``: plain sums).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import DensifyReward
        >>> reward = torch.tensor([0.0, 0.0, 1.0, 0.0, 2.0]).view(1, 5, 1)
        >>> done = torch.tensor([False, False, True, False, True]).view(1, 5, 1)
        >>> data = TensorDict(reward=reward, done=done, batch_size=[1, 5])
        >>> DensifyReward(time_dim=1)(data)["reward"].view(-1)
        tensor([1., 1., 1., 2., 2.])
    """

    def __init__(
        self,
        reward_key: NestedKey = REWARD,
        done_key: NestedKey = DONE,
        reward_key_out: NestedKey | None = None,
        time_dim: int = 2,
        discount: float = 1.0,
    ) -> None:
        super().__init__()
        if not 0.0 <= discount <= 1.0:
            raise ValueError(f"DensifyReward: discount must be in [0, 1], got {discount}")
        self.reward_key = reward_key
        self.done_key = done_key
        self.reward_key_out = reward_key if reward_key_out is None else reward_key_out
        self.time_dim = int(time_dim)
        self.discount = float(discount)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the densified reward into ``tensordict`` and returns it.

        Args:
            tensordict: data holding ``reward_key`` and ``done_key``.

        Returns:
            ``tensordict``, with ``reward_key_out`` set.
        """
        reward = tensordict.get(self.reward_key, None)
        done = tensordict.get(self.done_key, None)
        if reward is None or done is None:
            missing = self.reward_key if reward is None else self.done_key
            raise KeyError(f"DensifyReward: the data has no entry {missing!r}")
        if not -reward.ndim <= self.time_dim < reward.ndim:
            raise ValueError(
                f"DensifyReward: time_dim={self.time_dim} is out of range for the reward of "
                f"shape {tuple(reward.shape)}"
            )
        try:
            flags = done.bool().expand_as(reward)
        except RuntimeError as err:
            raise ValueError(
                f"DensifyReward: the done flag of shape {tuple(done.shape)} does not broadcast to "
                f"the reward of shape {tuple(reward.shape)}"
            ) from err
        time_dim = self.time_dim - reward.ndim if self.time_dim >= 0 else self.time_dim
        gamma = torch.tensor(self.discount, dtype=reward.dtype, device=reward.device)
        dense = reward_to_go(type(self).__name__, reward, flags, gamma, time_dim)
        tensordict.set(self.reward_key_out, dense)
        return tensordict

    def extra_repr(self) -> str:
        return (
            f"reward_key={self.reward_key!r}, done_key={self.done_key!r}, "
            f"reward_key_out={self.reward_key_out!r}, time_dim={self.time_dim}, "
            f"discount={self.discount}"
        )
