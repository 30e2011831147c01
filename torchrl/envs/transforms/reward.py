"""Reward transforms: ``RewardScaling``, ``RewardClipping``, ``TargetReturn``, ``SignTransform``,
``BinarizeReward``, ``LineariseRewards``, ``SuccessReward``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from tensordict import TensorDictBase

from torchrl._keys import RESET, REWARD
from torchrl._types import NestedKey
from torchrl.data.specs import Binary, Bounded, Composite, TensorSpec, Unbounded
from torchrl.envs.transforms._utils import (
    get,
    key_list,
    key_prefix,
    missing_key_error,
    node_ndim,
    replace_last,
    set_,
    where_reset,
    with_prefix,
)
from torchrl.envs.transforms.base import ObservationTransform, Transform

__all__ = [
    "BinarizeReward",
    "LineariseRewards",
    "RewardClipping",
    "RewardScaling",
    "SignTransform",
    "SuccessReward",
    "TargetReturn",
]


def _reward_keys(transform: Transform, reward_spec: Composite, explicit: bool) -> None:
    """Points a reward transform without explicit keys at every reward of the env."""
    if not explicit:
        transform._in_keys = list(reward_spec.keys(include_nested=True, leaves_only=True))
        transform._out_keys = None
        transform._update_pairs()


class RewardScaling(Transform):
    """Rescales rewards: ``r * scale + loc``, or ``(r - loc) / scale`` with ``standard_normal``.

    Args:
        loc: the shift (a number or a tensor broadcastable to the reward).
        scale: the factor (a number or a tensor broadcastable to the reward).
        in_keys: the rewards to rescale (default: every reward key of the env, or ``"reward"``).
        out_keys: where to write them (default: in place).
        standard_normal: compute ``(r - loc) / scale`` instead.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import RewardScaling, TransformedEnv
        >>> RewardScaling(loc=1.0, scale=0.5)(TensorDict(reward=torch.tensor([4.0])))["reward"]
        tensor([3.])
        >>> env = TransformedEnv(PendulumEnv(seed=0), RewardScaling(loc=1.0, scale=0.5))
        >>> check_env_specs(env)
    """

    loc: torch.Tensor
    scale: torch.Tensor

    def __init__(
        self,
        loc: float | torch.Tensor,
        scale: float | torch.Tensor,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        standard_normal: bool = False,
    ) -> None:
        super().__init__(in_keys=in_keys if in_keys is not None else [REWARD], out_keys=out_keys)
        self._explicit = in_keys is not None
        self.standard_normal = standard_normal
        scale_t = torch.as_tensor(scale, dtype=torch.float32)
        if bool((scale_t == 0).any()):
            raise ValueError("RewardScaling: scale must not be 0")
        self.register_buffer("loc", torch.as_tensor(loc, dtype=torch.float32))
        self.register_buffer("scale", scale_t)

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        if self.standard_normal:
            return (reward - self.loc) / self.scale
        return reward * self.scale + self.loc

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        _reward_keys(self, reward_spec, self._explicit)
        for in_key, out_key in self._pairs:
            if in_key not in reward_spec:
                continue
            leaf = reward_spec[in_key]
            if isinstance(leaf, Bounded):
                a, b = self._apply_transform(leaf.low), self._apply_transform(leaf.high)
                new: TensorSpec = Bounded(
                    torch.minimum(a, b), torch.maximum(a, b), leaf.shape, leaf.device, leaf.dtype
                )
            else:
                dtype = leaf.dtype if leaf.dtype.is_floating_point else torch.float32
                new = Unbounded(shape=leaf.shape, device=leaf.device, dtype=dtype)
            reward_spec[out_key] = new
        return reward_spec

    def extra_repr(self) -> str:
        return (
            f"loc={self.loc.tolist()}, scale={self.scale.tolist()}, "
            f"standard_normal={self.standard_normal}, in_keys={self.in_keys}"
        )


class RewardClipping(Transform):
    """Clamps rewards to ``[clamp_min, clamp_max]``; the reward spec becomes ``Bounded``.

    Args:
        clamp_min: the lower bound (``None``: none).
        clamp_max: the upper bound (``None``: none).
        in_keys: the rewards (default: every reward key of the env, or ``"reward"``).
        out_keys: where to write them (default: in place).

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import RewardClipping, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), RewardClipping(-1.0, 0.0))
        >>> bool(env.rollout(10)["next", "reward"].min() >= -1.0)
        True
        >>> env.reward_spec.low, env.reward_spec.high
        (tensor([-1.]), tensor([0.]))
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        clamp_min: float | None = None,
        clamp_max: float | None = None,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        if clamp_min is None and clamp_max is None:
            raise ValueError("RewardClipping: give clamp_min, clamp_max or both")
        if clamp_min is not None and clamp_max is not None and clamp_min > clamp_max:
            raise ValueError(
                f"RewardClipping: clamp_min ({clamp_min}) must be <= clamp_max ({clamp_max})"
            )
        super().__init__(in_keys=in_keys if in_keys is not None else [REWARD], out_keys=out_keys)
        self._explicit = in_keys is not None
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        return reward.clamp(self.clamp_min, self.clamp_max)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        _reward_keys(self, reward_spec, self._explicit)
        for in_key, out_key in self._pairs:
            if in_key not in reward_spec:
                continue
            leaf = reward_spec[in_key]
            dtype = leaf.dtype if leaf.dtype.is_floating_point else torch.float32
            low = -float("inf") if self.clamp_min is None else self.clamp_min
            high = float("inf") if self.clamp_max is None else self.clamp_max
            low_t = torch.full(leaf.shape, low, dtype=dtype)
            high_t = torch.full(leaf.shape, high, dtype=dtype)
            if isinstance(leaf, Bounded):
                low_t = torch.maximum(low_t, leaf.low.to(dtype).cpu())
                high_t = torch.minimum(high_t, leaf.high.to(dtype).cpu())
            reward_spec[out_key] = Bounded(low_t, high_t, leaf.shape, leaf.device, dtype)
        return reward_spec

    def extra_repr(self) -> str:
        return f"clamp_min={self.clamp_min}, clamp_max={self.clamp_max}, in_keys={self.in_keys}"


class TargetReturn(Transform):
    """Adds a return-to-go target (Decision Transformer): set at reset, reduced by each reward.

    Args:
        target_return: the target at the start of an episode.
        mode: ``"reduce"`` (``target -= reward`` after each step) or ``"constant"``.
        in_keys: the rewards (default ``["reward"]``).
        out_keys: the targets (default ``"target_return"`` next to each reward).
        reset_key: the ``"_reset"`` entry (default: the one of the reward's group).

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import TargetReturn, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), TargetReturn(10.0))
        >>> rollout = env.rollout(3)
        >>> rollout["target_return"][0]
        tensor([10.])
        >>> returns = rollout["next", "reward"].cumsum(0)
        >>> torch.allclose(rollout["next", "target_return"], 10.0 - returns)
        True
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        target_return: float,
        mode: Literal["reduce", "constant"] = "reduce",
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        reset_key: NestedKey | None = None,
    ) -> None:
        if mode not in ("reduce", "constant"):
            raise ValueError(f"TargetReturn: mode must be 'reduce' or 'constant', got {mode!r}")
        in_list = key_list(in_keys if in_keys is not None else [REWARD], "in_keys")
        if out_keys is None:
            out_keys = [replace_last(k, "target_return") for k in in_list]
        super().__init__(in_keys=in_list, out_keys=out_keys)
        self.target_return = float(target_return)
        self.mode = mode
        self.reset_key = reset_key
        self._specs: list[TensorSpec | None] = [None] * len(self._pairs)
        self._features: list[torch.Size] = [torch.Size()] * len(self._pairs)

    def _reset_key(self, out_key: NestedKey) -> NestedKey:
        return (
            self.reset_key
            if self.reset_key is not None
            else with_prefix(key_prefix(out_key), RESET)
        )

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        lead = tensordict_reset.batch_size
        for (_, out_key), spec, feature in zip(self._pairs, self._specs, self._features):
            if spec is None:
                raise RuntimeError("TargetReturn needs the env's reward spec: use it in an env")
            fill = torch.full(
                (*lead, *feature),
                self.target_return,
                dtype=spec.dtype,
                device=tensordict_reset.device,
            )
            mask = get(tensordict, self._reset_key(out_key))
            previous = get(tensordict, out_key)
            ndim = node_ndim(tensordict_reset, key_prefix(out_key))
            set_(tensordict_reset, out_key, where_reset(mask, fill, previous, ndim))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in self._pairs:
            target = get(tensordict, out_key)
            if target is None:
                raise missing_key_error(self, out_key, tensordict)
            if self.mode == "reduce":
                reward = get(next_tensordict, in_key)
                if reward is None:
                    raise missing_key_error(self, in_key, next_tensordict)
                target = target - reward
            set_(next_tensordict, out_key, target)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("TargetReturn tracks returns across env steps; use it in an env")

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        reward_spec = output_spec["full_reward_spec"]
        obs_spec = output_spec["full_observation_spec"]
        specs: list[TensorSpec | None] = []
        for in_key, out_key in self._pairs:
            if in_key not in reward_spec:
                raise KeyError(
                    f"TargetReturn: the reward key {in_key!r} is not in the env's reward spec"
                )
            leaf = reward_spec[in_key]
            dtype = leaf.dtype if leaf.dtype.is_floating_point else torch.float32
            spec = Unbounded(shape=leaf.shape, dtype=dtype, device=leaf.device)
            obs_spec[out_key] = spec
            specs.append(spec)
        self._specs = specs
        env_ndim = len(obs_spec.shape)
        self._features = [s.shape[env_ndim:] if s is not None else torch.Size() for s in specs]
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        state_spec = input_spec["full_state_spec"]
        for (_, out_key), spec in zip(self._pairs, self._specs):
            if spec is not None:
                state_spec[out_key] = spec.clone()
        return input_spec

    def extra_repr(self) -> str:
        return f"target_return={self.target_return}, mode={self.mode!r}"


class SignTransform(ObservationTransform):
    """Replaces entries by their sign (-1, 0 or 1), as Atari agents do with rewards.

    The entries may be rewards or observations; their specs become ``Bounded`` in ``[-1, 1]``
    with the same shape and dtype.

    Args:
        in_keys: the entries to read (default ``["reward"]``).
        out_keys: where to write their signs (default: in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import SignTransform, TransformedEnv
        >>> SignTransform()(TensorDict(reward=torch.tensor([-3.0, 0.0, 2.5])))["reward"]
        tensor([-1.,  0.,  1.])
        >>> env = TransformedEnv(PendulumEnv(seed=0), SignTransform(["reward", "observation"]))
        >>> bool(env.rollout(5)["next", "reward"].abs().le(1).all())
        True
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(in_keys=in_keys if in_keys is not None else [REWARD], out_keys=out_keys)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return torch.sign(value)

    def _sign_specs(self, spec: Composite) -> Composite:
        for in_key, out_key in self._pairs:
            if in_key not in spec:
                continue
            leaf = spec[in_key]
            spec[out_key] = Bounded(-1, 1, leaf.shape, leaf.device, leaf.dtype)
        return spec

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        return self._sign_specs(observation_spec)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        return self._sign_specs(reward_spec)


class BinarizeReward(Transform):
    """Maps each reward to 1 where it is positive and 0 elsewhere; the spec becomes ``Binary``.

    Args:
        in_keys: the rewards (default ``["reward"]``).
        out_keys: where to write the binary rewards (default: in place).
        dtype: the dtype of the binary reward (default ``torch.int8``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import BinarizeReward, TransformedEnv
        >>> BinarizeReward()(TensorDict(reward=torch.tensor([-1.0, 0.0, 0.3])))["reward"]
        tensor([0, 0, 1], dtype=torch.int8)
        >>> env = TransformedEnv(PendulumEnv(seed=0), BinarizeReward())
        >>> env.rollout(3)["next", "reward"].dtype
        torch.int8
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        dtype: torch.dtype = torch.int8,
    ) -> None:
        if dtype.is_floating_point or dtype.is_complex:
            raise ValueError(f"BinarizeReward: dtype must be an integer or bool dtype, got {dtype}")
        super().__init__(in_keys=in_keys if in_keys is not None else [REWARD], out_keys=out_keys)
        self.dtype = dtype

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        return (reward > 0).to(self.dtype)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        for in_key, out_key in self._pairs:
            if in_key not in reward_spec:
                raise KeyError(f"BinarizeReward: {in_key!r} is not in the env's reward spec")
            leaf = reward_spec[in_key]
            shape = leaf.shape if len(leaf.shape) else torch.Size([1])
            reward_spec[out_key] = Binary(shape=shape, device=leaf.device, dtype=self.dtype)
        return reward_spec

    def extra_repr(self) -> str:
        return f"dtype={self.dtype}, in_keys={self.in_keys}"


class LineariseRewards(Transform):
    """Turns a multi-objective reward ``[..., k]`` into one reward ``[..., 1]`` by a weighted sum.

    With several ``in_keys`` (one reward group per agent, say) the same weights apply to each;
    chain several ``LineariseRewards`` to weight groups differently. A ``Bounded`` reward spec
    stays ``Bounded`` (with the bounds of the weighted sum); any other becomes ``Unbounded``.

    Args:
        in_keys: the multi-objective rewards, each with the objectives on the last dim.
        out_keys: where to write the summed rewards (default: in place).
        weights: one weight per objective, shape ``[k]`` (default: all ones).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import LineariseRewards
        >>> t = LineariseRewards(in_keys=["reward"], weights=[1.0, -2.0])
        >>> t(TensorDict(reward=torch.tensor([[3.0, 1.0], [0.0, 0.5]]), batch_size=[2]))["reward"]
        tensor([[ 1.],
                [-1.]])
    """

    weights: torch.Tensor | None

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey],
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        weights: Sequence[float] | torch.Tensor | None = None,
    ) -> None:
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        if not self.in_keys:
            raise ValueError("LineariseRewards: give at least one reward key in in_keys")
        w = None if weights is None else torch.as_tensor(weights, dtype=torch.float32)
        if w is not None and w.ndim != 1:
            raise ValueError(
                f"LineariseRewards: weights must be one-dimensional, got shape {tuple(w.shape)}"
            )
        self.register_buffer("weights", w)

    def _weights_for(self, k: int, like: torch.Tensor) -> torch.Tensor:
        if self.weights is None:
            return torch.ones(k, dtype=like.dtype, device=like.device)
        if self.weights.numel() != k:
            raise ValueError(
                f"LineariseRewards: {self.weights.numel()} weights for a reward with {k} objectives"
            )
        return self.weights.to(dtype=like.dtype, device=like.device)

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        if not reward.dtype.is_floating_point:
            reward = reward.float()
        w = self._weights_for(reward.shape[-1], reward)
        return (reward * w).sum(-1, keepdim=True)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        for in_key, out_key in self._pairs:
            if in_key not in reward_spec:
                raise KeyError(f"LineariseRewards: {in_key!r} is not in the env's reward spec")
            leaf = reward_spec[in_key]
            if len(leaf.shape) == 0:
                raise ValueError(f"LineariseRewards: the reward {in_key!r} has no objective dim")
            shape = torch.Size((*leaf.shape[:-1], 1))
            dtype = leaf.dtype if leaf.dtype.is_floating_point else torch.float32
            new: TensorSpec
            if isinstance(leaf, Bounded):
                w = self._weights_for(leaf.shape[-1], leaf.low.to(dtype)).cpu()
                a, b = leaf.low.to(dtype).cpu() * w, leaf.high.to(dtype).cpu() * w
                low = torch.minimum(a, b).sum(-1, keepdim=True)
                high = torch.maximum(a, b).sum(-1, keepdim=True)
                new = Bounded(low, high, shape, leaf.device, dtype)
            else:
                new = Unbounded(shape=shape, device=leaf.device, dtype=dtype)
            reward_spec[out_key] = new
        return reward_spec

    def extra_repr(self) -> str:
        weights = None if self.weights is None else self.weights.tolist()
        return f"weights={weights}, in_keys={self.in_keys}"


class SuccessReward(Transform):
    """Writes a sparse reward from a success flag: ``scale`` where it is set, 0 elsewhere.

    For tasks that report completion apart from the reward (goal-conditioned or sparse
    robotics tasks). In an env the step reward is overwritten and the reward spec becomes
    ``Bounded`` over ``[min(0, scale), max(0, scale)]``, shaped like the success entry; nothing
    is written at reset. In a replay buffer it rewrites the reward of sampled data.

    Args:
        success_key: the success flag to read (bool or 0/1; default ``"success"``).
        reward_key: the reward to write (default ``"reward"``).
        scale: the reward on success (default 1.0).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import SuccessReward
        >>> td = TensorDict(success=torch.tensor([[True], [False]]), batch_size=[2])
        >>> SuccessReward(scale=2.0)(td)["reward"]
        tensor([[2.],
                [0.]])
    """

    def __init__(
        self,
        success_key: NestedKey = "success",
        reward_key: NestedKey = REWARD,
        *,
        scale: float = 1.0,
    ) -> None:
        super().__init__(in_keys=[success_key], out_keys=[reward_key])
        self.success_key = self.in_keys[0]
        self.reward_key = self.out_keys[0]
        self.scale = float(scale)

    def _apply_transform(self, success: torch.Tensor) -> torch.Tensor:
        return success.to(torch.float32) * self.scale

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        found = None
        for name in ("full_observation_spec", "full_done_spec", "full_reward_spec"):
            sub = output_spec.get(name, None)
            if sub is not None and self.success_key in sub:
                found = sub[self.success_key]
                break
        if found is None:
            raise KeyError(f"SuccessReward: {self.success_key!r} is in none of the env's specs")
        reward_spec = output_spec["full_reward_spec"]
        low, high = min(0.0, self.scale), max(0.0, self.scale)
        reward_spec[self.reward_key] = Bounded(low, high, found.shape, found.device, torch.float32)
        return output_spec

    def extra_repr(self) -> str:
        return (
            f"success_key={self.success_key!r}, reward_key={self.reward_key!r}, scale={self.scale}"
        )
