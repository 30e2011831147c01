"""Replay-buffer transforms: ``Reward2GoTransform`` and ``MultiStepTransform`` (on writes),
``BurnInTransform`` and ``RandomCropTensorDict`` (on samples).

None belongs in an env: adding them to a ``TransformedEnv`` raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from torch import nn

from torchrl._keys import DONE, NEXT, REWARD
from torchrl._recursions import reward_to_go
from torchrl._types import NestedKey
from torchrl.data.postprocs import MultiStep
from torchrl.data.specs import Composite
from torchrl.envs.transforms._utils import (
    key_list,
    key_tuple,
    missing_key_error,
    unravel_key,
)
from torchrl.envs.transforms.base import Transform

__all__ = [
    "BurnInTransform",
    "MultiStepTransform",
    "RandomCropTensorDict",
    "Reward2GoTransform",
]


class _BufferOnly(Transform):
    """A transform of replay-buffer data: appending it to an env raises a clear error."""

    def _not_in_env(self) -> RuntimeError:
        return RuntimeError(
            f"{type(self).__name__} transforms replay-buffer data; it cannot be used in an env"
        )

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        raise self._not_in_env()

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        raise self._not_in_env()


class Reward2GoTransform(_BufferOnly):
    """Writes the discounted reward-to-go of each step when data enters a replay buffer.

    Applied by ``inv`` (a replay buffer calls it on ``extend``): along the data's last batch
    dim (time), ``G_t = r_t + gamma * G_{t+1}``, restarted after every step whose ``done_key``
    is set; a trajectory cut by the end of the data sums what is left. ``forward`` (on samples)
    leaves the data alone.

    Args:
        gamma: the discount.
        in_keys: the rewards (default ``[("next", "reward")]``).
        out_keys: the results (default ``["reward_to_go"]``), shaped like the rewards.
        done_key: the end-of-trajectory flag (default ``("next", "done")``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import Reward2GoTransform
        >>> done = torch.tensor([False, False, True, False, False]).unsqueeze(-1)
        >>> data = TensorDict(next=TensorDict(reward=torch.ones(5, 1), done=done), batch_size=[5])
        >>> Reward2GoTransform(gamma=0.5).inv(data)["reward_to_go"].squeeze(-1)
        tensor([1.7500, 1.5000, 1.0000, 1.5000, 1.0000])
    """

    gamma: torch.Tensor

    def __init__(
        self,
        gamma: float | torch.Tensor = 1.0,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        done_key: NestedKey | None = None,
    ) -> None:
        in_list = key_list(in_keys if in_keys is not None else [(NEXT, REWARD)], "in_keys")
        out_list = key_list(out_keys if out_keys is not None else ["reward_to_go"], "out_keys")
        super().__init__(in_keys=in_list, out_keys=out_list)
        self.register_buffer("gamma", torch.as_tensor(gamma, dtype=torch.float32))
        self.done_key = (NEXT, DONE) if done_key is None else unravel_key(done_key)

    def _uses_step(self) -> bool:
        return False

    def _uses_inv(self) -> bool:
        return True

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.batch_dims < 1:
            raise ValueError("Reward2GoTransform needs data with a time dim (its last batch dim)")
        time_dim = tensordict.batch_dims - 1
        done = tensordict.get(self.done_key, None)
        if done is None:
            raise missing_key_error(self, self.done_key, tensordict)
        for in_key, out_key in self._pairs:
            reward = tensordict.get(in_key, None)
            if reward is None:
                raise missing_key_error(self, in_key, tensordict)
            # reward_to_go counts time from the end; a reward [*B, T, *F] has F trailing dims.
            trailing = reward.ndim - time_dim - 1
            flags = done.bool() if done.shape == reward.shape else done.bool().expand_as(reward)
            gamma = self.gamma.to(reward.dtype)
            value = reward_to_go(type(self).__name__, reward, flags, gamma, -(trailing + 1))
            tensordict.set(out_key, value)
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict

    def extra_repr(self) -> str:
        return f"gamma={self.gamma.item()}, done_key={self.done_key!r}, {super().extra_repr()}"


class BurnInTransform(_BufferOnly):
    """Runs recurrent modules over the first ``burn_in`` steps of sampled sequences.

    On a sample of batch ``[*B, T]`` (time last), the modules run (without gradients) on steps
    ``[0, burn_in)``; the result keeps steps ``[burn_in, T)``, whose first step gets the
    recurrent states the modules wrote under ``("next", key)`` at step ``burn_in - 1``.

    Args:
        modules: a TensorDict module, or a sequence of them, run in order.
        burn_in: the number of steps to burn in (``< T``).
        out_keys: the recurrent-state keys to carry (default: every ``("next", key)`` output of
            the modules, as ``key``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.envs.transforms import BurnInTransform
        >>> # A toy "recurrent" module: next hidden = hidden + cumulative sum of the inputs.
        >>> cumsum = TensorDictModule(
        ...     lambda h, x: h[..., :1, :] + x.cumsum(-2), ["hidden", "x"], [("next", "hidden")]
        ... )
        >>> data = TensorDict(x=torch.ones(2, 5, 1), hidden=torch.zeros(2, 5, 1), batch_size=[2, 5])
        >>> out = BurnInTransform(cumsum, burn_in=3)(data)
        >>> out.batch_size, out["hidden"][0, :, 0]
        (torch.Size([2, 2]), tensor([3., 0.]))
    """

    def __init__(
        self,
        modules: nn.Module | Sequence[nn.Module],
        burn_in: int,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        if isinstance(modules, nn.Module):
            modules = [modules]
        modules = list(modules)
        if not modules:
            raise ValueError("BurnInTransform needs at least one module")
        if int(burn_in) < 1:
            raise ValueError(f"BurnInTransform: burn_in must be >= 1, got {burn_in}")
        if out_keys is None:
            found: list[NestedKey] = []
            for module in modules:
                for key in getattr(module, "out_keys", []):
                    path = key_tuple(unravel_key(key))
                    if path[0] == NEXT and len(path) > 1:
                        found.append(unravel_key(path[1:]))
            if not found:
                raise ValueError(
                    "BurnInTransform: the modules write no ('next', ...) recurrent state; pass "
                    "out_keys"
                )
            out_keys = list(dict.fromkeys(found))
        super().__init__(in_keys=[], out_keys=[])
        self.burn_in_modules = nn.ModuleList(modules)
        self.burn_in = int(burn_in)
        self.burn_in_keys = key_list(out_keys, "out_keys")

    def _update_pairs(self) -> None:
        self._pairs = []
        self._inv_pairs = []

    @property
    def out_keys(self) -> list[NestedKey]:  # type: ignore[override]
        """The recurrent-state keys carried over."""
        return list(getattr(self, "burn_in_keys", []))

    @out_keys.setter
    def out_keys(self, value: Any) -> None:
        self.burn_in_keys = key_list(value, "out_keys")

    def _uses_step(self) -> bool:
        return False

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.batch_dims < 1:
            raise ValueError("BurnInTransform needs data with a time dim (its last batch dim)")
        time_dim = tensordict.batch_dims - 1
        length = tensordict.batch_size[time_dim]
        if self.burn_in >= length:
            raise ValueError(
                f"BurnInTransform: burn_in ({self.burn_in}) must be shorter than the sampled "
                f"sequences ({length} steps)"
            )
        lead = (slice(None),) * time_dim
        burn = tensordict[lead + (slice(0, self.burn_in),)].copy()
        out = tensordict[lead + (slice(self.burn_in, None),)].copy()
        with torch.no_grad():
            for module in self.burn_in_modules:
                result = module(burn)
                if result is not None:
                    burn = result
        for key in self.burn_in_keys:
            state = burn.get((NEXT, *key_tuple(key)), None)
            if state is None:
                raise missing_key_error(self, (NEXT, *key_tuple(key)), burn)
            last = state.select(time_dim, self.burn_in - 1)
            current = out.get(key, None)
            if current is None:
                current = torch.zeros(
                    (*out.batch_size, *last.shape[time_dim:]), dtype=last.dtype, device=last.device
                )
            else:
                current = current.clone()
            current.select(time_dim, 0).copy_(last)
            out.set(key, current)
        return out

    def extra_repr(self) -> str:
        return f"burn_in={self.burn_in}, out_keys={self.burn_in_keys}"


class RandomCropTensorDict(_BufferOnly):
    """Cuts a random window of ``sub_seq_len`` steps out of each sampled trajectory.

    Sampled data of batch shape ``[..., T, ...]`` becomes ``[..., sub_seq_len, ...]`` along
    ``sample_dim``; each trajectory gets its own random start. With ``mask_key``, a bool entry
    of the batch shape marking the valid steps (left-aligned), windows start within the valid
    part (from 0 when it is shorter than ``sub_seq_len``).

    Args:
        sub_seq_len: the length of the windows.
        sample_dim: the time dim, among the batch dims (default: the last one).
        mask_key: the entry marking valid steps (default: every step is valid).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import RandomCropTensorDict
        >>> td = TensorDict(obs=torch.arange(10.0).expand(3, 10), batch_size=[3, 10])
        >>> out = RandomCropTensorDict(4)(td)
        >>> out.shape
        torch.Size([3, 4])
        >>> bool((out["obs"].diff(dim=-1) == 1).all())
        True
    """

    def __init__(
        self, sub_seq_len: int, sample_dim: int = -1, mask_key: NestedKey | None = None
    ) -> None:
        if sub_seq_len < 1:
            raise ValueError(f"RandomCropTensorDict: sub_seq_len must be >= 1, got {sub_seq_len}")
        super().__init__()
        self.sub_seq_len = int(sub_seq_len)
        self.sample_dim = int(sample_dim)
        self.mask_key = mask_key

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        ndim = tensordict.batch_dims
        if not -ndim <= self.sample_dim < ndim:
            raise ValueError(
                f"RandomCropTensorDict: sample_dim {self.sample_dim} is not a batch dim of a "
                f"TensorDict with batch size {tuple(tensordict.batch_size)}"
            )
        dim = self.sample_dim % ndim
        td = tensordict if dim == ndim - 1 else tensordict.transpose(dim, ndim - 1)
        *lead, steps = td.batch_size
        length = self.sub_seq_len
        if steps < length:
            raise ValueError(
                f"RandomCropTensorDict: trajectories of {steps} steps are shorter than "
                f"sub_seq_len={length}"
            )
        if self.mask_key is not None:
            mask = td.get(self.mask_key)
            valid = mask.reshape(*lead, steps).sum(-1)
            highest = (valid - length).clamp(min=0)
        else:
            highest = torch.full(lead, steps - length, dtype=torch.int64)
        highest = highest.to("cpu", torch.int64)
        start = (torch.rand(highest.shape) * (highest + 1).to(torch.float32)).floor().long()
        start = torch.minimum(start, highest)
        index = start.unsqueeze(-1) + torch.arange(length)
        flat = td.reshape(-1, steps)
        rows = torch.arange(flat.shape[0]).unsqueeze(-1)
        out = flat[rows, index.reshape(-1, length)].reshape(*lead, length)
        if dim != ndim - 1:
            out = out.transpose(dim, ndim - 1).contiguous()
        return out

    def extra_repr(self) -> str:
        return f"sub_seq_len={self.sub_seq_len}, sample_dim={self.sample_dim}"


class MultiStepTransform(_BufferOnly):
    """n-step returns computed as data is written to a replay buffer, across batches.

    On ``inv`` (a replay buffer calls it on ``extend``), the last ``n_steps`` steps of each
    batch ``[*B, T]`` (time last) are held back: their n-step returns need steps that have
    not arrived yet. Each call returns the steps held from the previous call followed by the
    first ``T - n_steps`` new ones, rewritten by :class:`~torchrl.data.MultiStep` (reward
    summed over up to ``n_steps + 1`` steps within the trajectory, ``"next"`` entries taken
    from the last of them, ``"steps_to_next_obs"`` and ``"gamma"`` added). So, unlike the
    collector post-processing, the returns do not depend on where batches are cut. The first
    call returns ``T - n_steps`` steps; ``forward`` (on samples) leaves data alone.

    Args:
        n_steps: the number of steps looked ahead (``0``: nothing is held back). Changing the
            ``n_steps`` attribute later drops the steps held.
        gamma: the discount factor.
        reward_keys: the reward entry under ``"next"``, as a one-element list (default
            ``["reward"]``).
        done_key: the done flag under ``"next"`` that ends a trajectory (default ``"done"``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms.rb_transforms import MultiStepTransform
        >>> t = MultiStepTransform(n_steps=2, gamma=1.0)
        >>> def batch(start):
        ...     nxt = TensorDict(
        ...         reward=torch.ones(4, 1), done=torch.zeros(4, 1, dtype=torch.bool),
        ...         obs=torch.arange(start + 1.0, start + 5.0).unsqueeze(-1), batch_size=[4]
        ...     )
        ...     return TensorDict(obs=torch.arange(start, start + 4.0).unsqueeze(-1), next=nxt,
        ...                       batch_size=[4])
        >>> first = t.inv(batch(0))
        >>> first["obs"].view(-1), first["next", "reward"].view(-1), first["next", "obs"].view(-1)
        (tensor([0., 1.]), tensor([3., 3.]), tensor([3., 4.]))
        >>> t.inv(batch(4))["obs"].view(-1)
        tensor([2., 3., 4., 5.])
    """

    def __init__(
        self,
        n_steps: int,
        gamma: float,
        *,
        reward_keys: Sequence[NestedKey] | None = None,
        done_key: NestedKey | None = None,
    ) -> None:
        super().__init__()
        rewards = list(reward_keys) if reward_keys is not None else [REWARD]
        if len(rewards) != 1:
            raise ValueError(
                f"MultiStepTransform: exactly one reward key is supported, got {rewards}"
            )
        self.reward_key: NestedKey = unravel_key(rewards[0])
        self.done_key: NestedKey = DONE if done_key is None else unravel_key(done_key)
        self.gamma = float(gamma)
        self._held: TensorDictBase | None = None
        self.n_steps = n_steps

    @property
    def n_steps(self) -> int:
        """The number of steps looked ahead."""
        return self._n_steps

    @n_steps.setter
    def n_steps(self, value: int) -> None:
        if int(value) < 0:
            raise ValueError(f"MultiStepTransform: n_steps must be >= 0, got {value}")
        self._n_steps = int(value)
        self._held = None

    def reset_buffer(self) -> None:
        """Drops the steps held back (e.g. before writing data of unrelated trajectories)."""
        self._held = None

    def _uses_step(self) -> bool:
        return False

    def _uses_inv(self) -> bool:
        return True

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.batch_dims < 1:
            raise ValueError("MultiStepTransform needs data with a time dim (its last batch dim)")
        n = self._n_steps
        time_dim = tensordict.batch_dims - 1
        held = self._held
        if held is not None:
            if held.batch_size[:-1] != tensordict.batch_size[:-1]:
                raise ValueError(
                    f"MultiStepTransform: the batch {list(tensordict.batch_size)} does not "
                    f"continue the previous one (leading dims {list(held.batch_size[:-1])})"
                )
            data = cast(TensorDictBase, torch.cat([held, tensordict], time_dim))
        else:
            data = tensordict
        steps = data.batch_size[-1]
        keep = max(steps - n, 0)
        # The raw last n steps wait for the next batch; MultiStep rewrites its input in place.
        self._held = data[..., keep:].clone() if n else None
        if keep == 0:
            return data[..., :0]
        out = MultiStep(self.gamma, n, reward_key=self.reward_key, done_key=self.done_key)(
            data.clone()
        )
        return out[..., :keep]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict

    def extra_repr(self) -> str:
        return f"n_steps={self._n_steps}, gamma={self.gamma}"
