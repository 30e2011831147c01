"""``VecNormV2``: running normalization of observations and rewards, TorchRL's newer API.

It is :class:`~torchrl.envs.transforms.VecNorm` (same statistics, sharing, freezing and
``state_dict``) with TorchRL's ``VecNormV2`` signature: explicit ``in_keys`` (rewards
included), keyword-only options, and ``reduce_batch_dims``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from tensordict import TensorDictBase

from torchrl._types import NestedKey
from torchrl.envs.transforms.norm import VecNorm

__all__ = ["VecNormV2"]


class _Lock(Protocol):
    """A ``threading``/``multiprocessing`` lock, or a manager's proxy of one."""

    def acquire(self) -> Any: ...

    def release(self) -> Any: ...


class VecNormV2(VecNorm):
    """Normalizes observations and/or rewards with running (decayed) means and variances.

    The statistics are shared by every sub-env of a batched env (and, through
    ``shared_data``, by envs in other processes); they are updated in training mode, frozen by
    ``eval()`` or :meth:`freeze`, and saved by ``state_dict``. Rewards are normalized on steps
    only (reset outputs have none).

    Args:
        in_keys: the entries, e.g. ``["observation", "reward"]``.
        out_keys: where to write them (default: in place).
        lock: a lock held while updating shared statistics.
        stateful: keep the statistics in the transform. ``False`` (statistics carried by the
            data) is not supported and raises ``NotImplementedError``.
        decay: the factor applied to past statistics at each update (``1``: plain averages).
        eps: the smallest standard deviation used.
        shared_data: a TensorDict holding the statistics (see
            :meth:`VecNorm.build_td_for_shared_vecnorm`).
        reduce_batch_dims: average each batch over its batch dims before the update (one
            sample per step) instead of counting every element.

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import TransformedEnv, VecNormV2
        >>> env = TransformedEnv(
        ...     PendulumEnv(batch_size=[4], seed=0), VecNormV2(in_keys=["observation", "reward"])
        ... )
        >>> _ = env.rollout(20)
        >>> env.transform.loc_scale("reward")[0].shape
        torch.Size([1])
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey],
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        lock: _Lock | None = None,
        stateful: bool = True,
        decay: float = 0.9999,
        eps: float = 1e-4,
        shared_data: TensorDictBase | None = None,
        reduce_batch_dims: bool = False,
    ) -> None:
        if in_keys is None:
            raise ValueError("VecNormV2: in_keys are required (e.g. ['observation', 'reward'])")
        if not stateful:
            raise NotImplementedError(
                "VecNormV2(stateful=False) is not supported: the statistics live in the "
                "transform (stateful=True)"
            )
        super().__init__(
            in_keys, out_keys, shared_data=shared_data, lock=lock, decay=decay, eps=eps
        )
        self.stateful = True
        self.reduce_batch_dims = bool(reduce_batch_dims)

    def _update(self, stats: TensorDictBase, value: torch.Tensor, batch_ndim: int) -> None:
        if self.reduce_batch_dims and batch_ndim > 0:
            value = value.reshape(-1, *value.shape[batch_ndim:]).mean(0, keepdim=True)
            batch_ndim = 1
        super()._update(stats, value, batch_ndim)

    def frozen_copy(self) -> VecNormV2:
        """A frozen copy with its own (copied) statistics, e.g. for evaluation or a buffer."""
        copy = VecNormV2(
            self._in_keys,
            self._out_keys,
            decay=self.decay,
            eps=self.eps,
            reduce_batch_dims=self.reduce_batch_dims,
        )
        copy._td = None if self._td is None else self._td.clone()
        copy.freeze()
        return copy

    def extra_repr(self) -> str:
        return f"reduce_batch_dims={self.reduce_batch_dims}, {super().extra_repr()}"
