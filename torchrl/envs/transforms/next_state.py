"""``NextStateReconstructor``: rebuilds ``("next", key)`` entries of sampled transitions.

Data stored without its ``("next", observation)`` entries (they repeat the root entries of the
following step) gets them back at sampling time: the next entry of position ``i`` of a flat
sample is the root entry of position ``i + 1`` when that is the next step of the same
trajectory, and a fill value otherwise. A replay-buffer transform: it refuses to run in an env.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tensordict import TensorDictBase

from torchrl._keys import COLLECTOR, DONE, NEXT, OBSERVATION, TRAJ_IDS
from torchrl._types import NestedKey
from torchrl.data.specs import Composite
from torchrl.envs.transforms._utils import key_tuple, missing_key_error
from torchrl.envs.transforms.base import Transform

__all__ = ["NextStateReconstructor"]


class NextStateReconstructor(Transform):
    """Writes ``("next", k)`` of a flat sample from the root ``k`` of the following position.

    For each key ``k`` and position ``i`` of a sample of batch ``[B]``, ``("next", k)[i]`` is
    ``k[i + 1]`` when position ``i + 1`` continues the same trajectory, else ``fill_value``.
    Position ``i + 1`` continues it when it exists, has the same trajectory id (``traj_key``),
    position ``i`` is not done (``done_key``) and, with ``step_count_key``, its step count is one
    more. Marker entries may have trailing dims: ids and counts are read at their first element,
    a done flag counts when any of its elements is set. A replay-buffer transform (sampled data
    with contiguous slices, e.g. from a ``SliceSampler``); in an env it raises.

    Args:
        keys: the root keys whose ``("next", k)`` entries are rebuilt (default
            ``("observation",)``).
        traj_key: the trajectory id entry (default ``("collector", "traj_ids")``); ``None``:
            the whole sample is one trajectory.
        done_key: the done flag of each step (default ``("next", "done")``); ``None``: unused.
        step_count_key: a step counter entry checked to grow by one (default ``None``).
        fill_value: what the positions without a next step get (default NaN, which needs
            floating-point entries: pass an integer for integer entries).
        strict: raise when a marker entry is missing from the sample (default); ``False``: skip
            that check.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import NextStateReconstructor
        >>> td = TensorDict(
        ...     {
        ...         "observation": torch.arange(5.0).unsqueeze(-1),
        ...         ("next", "done"): torch.tensor([[False], [True], [False], [False], [False]]),
        ...         ("collector", "traj_ids"): torch.tensor([0, 0, 1, 1, 2]),
        ...     },
        ...     batch_size=[5],
        ... )
        >>> NextStateReconstructor()(td)["next", "observation"].squeeze(-1)
        tensor([1., nan, 3., nan, nan])
    """

    def __init__(
        self,
        keys: Sequence[NestedKey] = (OBSERVATION,),
        *,
        traj_key: NestedKey | None = (COLLECTOR, TRAJ_IDS),
        done_key: NestedKey | None = (NEXT, DONE),
        step_count_key: NestedKey | None = None,
        fill_value: float | int = float("nan"),
        strict: bool = True,
    ) -> None:
        keys = [keys] if isinstance(keys, str) else list(keys)
        if not keys:
            raise ValueError("NextStateReconstructor: keys must name at least one entry")
        super().__init__()
        self.keys = list(keys)
        self.traj_key = traj_key
        self.done_key = done_key
        self.step_count_key = step_count_key
        self.fill_value = fill_value
        self.strict = bool(strict)

    def _marker(self, tensordict: TensorDictBase, key: NestedKey, size: int) -> torch.Tensor | None:
        value = tensordict.get(key, None)
        if value is None:
            if self.strict:
                raise KeyError(
                    f"NextStateReconstructor: the marker entry {key!r} is missing from the "
                    "sample; pass its keyword as None to leave that check out, or strict=False"
                )
            return None
        if not isinstance(value, torch.Tensor) or value.shape[:1] != (size,):
            raise ValueError(
                f"NextStateReconstructor: the marker entry {key!r} must be a tensor of leading "
                f"dim {size} (the sample's batch), got "
                f"{tuple(value.shape) if isinstance(value, torch.Tensor) else type(value)}"
            )
        return value.reshape(size, -1)

    def _continues(self, tensordict: TensorDictBase, size: int) -> torch.Tensor:
        """Bool ``[size - 1]``: whether position ``i + 1`` is the next step of position ``i``."""
        follows = torch.ones(max(size - 1, 0), dtype=torch.bool, device=tensordict.device)
        if self.traj_key is not None:
            ids = self._marker(tensordict, self.traj_key, size)
            if ids is not None:
                follows &= (ids[1:, 0] == ids[:-1, 0]).to(follows.device)
        if self.done_key is not None:
            done = self._marker(tensordict, self.done_key, size)
            if done is not None:
                follows &= ~done[:-1].to(torch.bool).any(-1).to(follows.device)
        if self.step_count_key is not None:
            count = self._marker(tensordict, self.step_count_key, size)
            if count is not None:
                follows &= (count[1:, 0] == count[:-1, 0] + 1).to(follows.device)
        return follows

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.batch_dims != 1:
            raise ValueError(
                "NextStateReconstructor: expects a flat sample of batch [B], got batch "
                f"{list(tensordict.batch_size)}; reshape it to one dim first"
            )
        size = tensordict.batch_size[0]
        if size == 0:
            return tensordict
        follows = self._continues(tensordict, size)
        for key in self.keys:
            root = tensordict.get(key, None)
            if root is None:
                raise missing_key_error(self, key, tensordict)
            nan_fill = isinstance(self.fill_value, float) and math.isnan(self.fill_value)
            if nan_fill and not root.is_floating_point():
                raise TypeError(
                    f"NextStateReconstructor: the entry {key!r} has dtype {root.dtype}, which "
                    "cannot hold the NaN fill_value; pass an integer fill_value"
                )
            fill = torch.full_like(root[:1], self.fill_value)
            shifted = torch.cat([root[1:], fill], 0)
            keep = torch.cat([follows, follows.new_zeros(1)]).to(root.device)
            keep = keep.reshape(size, *([1] * (root.ndim - 1)))
            tensordict.set((NEXT, *key_tuple(key)), torch.where(keep, shifted, fill))
        return tensordict

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(
            "NextStateReconstructor rebuilds sampled replay-buffer data; it cannot run in an env"
        )

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        raise RuntimeError(
            "NextStateReconstructor rebuilds sampled replay-buffer data; it cannot run in an env"
        )

    def extra_repr(self) -> str:
        return f"keys={self.keys}, traj_key={self.traj_key!r}, done_key={self.done_key!r}"
