"""Action transforms: ``ActionMask``, ``ClipTransform``, ``ActionDiscretizer``, ``ActionScaling``,
``DiscreteActionProjection``."""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum

import torch
from tensordict import TensorDictBase

from torchrl._keys import ACTION, ACTION_MASK
from torchrl._types import NestedKey
from torchrl.data.specs import (
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    TensorSpec,
    Unbounded,
)
from torchrl.envs.transforms._utils import (
    float_dtype,
    get,
    map_input_specs,
    map_output_specs,
    missing_key_error,
    missing_spec_error,
    set_,
    unravel_key,
)
from torchrl.envs.transforms.base import Transform
from torchrl.envs.transforms.env import TransformedEnv

__all__ = [
    "ActionDiscretizer",
    "ActionMask",
    "ActionScaling",
    "ClipTransform",
    "DiscreteActionProjection",
]

_MASKABLE = (Categorical, OneHot, MultiCategorical, MultiOneHot)


class ActionMask(Transform):
    """Keeps the action spec's mask in sync with an action-mask observation.

    After each reset and step, the boolean mask read at ``mask_key`` is set on the env's action
    spec, so that ``env.rand_action()`` (and random policies) only pick allowed actions.

    Args:
        action_key: the (categorical or one-hot) action.
        mask_key: the boolean mask observation, ``[*B, n]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Categorical, Composite, Unbounded
        >>> from torchrl.envs import EnvBase
        >>> from torchrl.envs.transforms import ActionMask, TransformedEnv
        >>> class Masked(EnvBase):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.observation_spec = Composite(action_mask=Categorical(2, shape=(4,), dtype=torch.bool))
        ...         self.action_spec = Categorical(4)
        ...     def _reset(self, td, **kwargs):
        ...         return TensorDict(action_mask=torch.tensor([False, True, False, False]))
        ...     def _step(self, td):
        ...         return TensorDict(action_mask=torch.tensor([False, False, True, False]), reward=torch.zeros(1))
        ...     def _set_seed(self, seed):
        ...         pass
        >>> env = TransformedEnv(Masked(), ActionMask())
        >>> td = env.reset()
        >>> env.rand_action(td)["action"]
        tensor(1)
        >>> _ = env.step(td)
        >>> env.rand_action()["action"]
        tensor(2)
    """

    def __init__(self, action_key: NestedKey = ACTION, mask_key: NestedKey = ACTION_MASK) -> None:
        super().__init__(in_keys=[action_key, mask_key], out_keys=[])
        self.action_key = unravel_key(action_key)
        self.mask_key = unravel_key(mask_key)
        self._mask: torch.Tensor | None = None

    def _update_pairs(self) -> None:
        self._pairs = []
        self._inv_pairs = []

    def _uses_step(self) -> bool:
        return True

    def _apply_mask(self, tensordict: TensorDictBase) -> TensorDictBase:
        mask = get(tensordict, self.mask_key)
        if mask is None:
            if self.missing_tolerance:
                return tensordict
            raise missing_key_error(self, self.mask_key, tensordict)
        self._mask = mask
        env = self.container
        if isinstance(env, TransformedEnv):
            # The cached spec of the env holding the transform (what rand_action reads).
            spec = env._input_spec["full_action_spec"][self.action_key]
            self._set_mask(spec, mask)
        return tensordict

    @staticmethod
    def _set_mask(spec: TensorSpec, mask: torch.Tensor) -> None:
        if isinstance(spec, Categorical) and mask.shape != (*spec.shape, spec.n):
            mask = mask.reshape(*spec.shape, spec.n)
        spec.update_mask(mask.bool() if mask.dtype is not torch.bool else mask)  # type: ignore[attr-defined]

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._apply_mask(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._apply_mask(tensordict_reset)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("ActionMask updates an env's action spec; use it in a TransformedEnv")

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        if self.mask_key not in output_spec["full_observation_spec"]:
            raise missing_spec_error(self, self.mask_key, output_spec, ("full_observation_spec",))
        return output_spec

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        if self.action_key not in action_spec:
            raise KeyError(
                f"ActionMask: the action key {self.action_key!r} is not in the action spec "
                f"(keys: {list(action_spec.keys(True, True))})"
            )
        leaf = action_spec[self.action_key]
        if not isinstance(leaf, _MASKABLE):
            raise TypeError(
                f"ActionMask needs a Categorical, OneHot, MultiCategorical or MultiOneHot action "
                f"spec, got {leaf!r}"
            )
        if self._mask is not None:
            leaf = leaf.clone()
            self._set_mask(leaf, self._mask)
            action_spec[self.action_key] = leaf
        return action_spec

    def extra_repr(self) -> str:
        return f"action_key={self.action_key!r}, mask_key={self.mask_key!r}"


class ClipTransform(Transform):
    """Clamps entries to ``[low, high]`` (outputs, and inputs through the inverse keys).

    Args:
        in_keys: the outputs to clamp (observations or rewards).
        out_keys: where to write them (default: in place).
        in_keys_inv: base env inputs (e.g. actions) to clamp on the way in.
        out_keys_inv: where the outside writes them (default: ``in_keys_inv``).
        low: the lower bound (``None``: none).
        high: the upper bound (``None``: none).

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import ClipTransform, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), ClipTransform(in_keys=["thdot"], low=-0.5, high=0.5))
        >>> bool(env.rollout(20)["next", "thdot"].abs().max() <= 0.5)
        True
        >>> env.observation_spec["thdot"].low
        tensor(-0.5000)
        >>> check_env_specs(env)
    """

    low: torch.Tensor | None
    high: torch.Tensor | None

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        low: float | torch.Tensor | None = None,
        high: float | torch.Tensor | None = None,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        if low is None and high is None:
            raise ValueError("ClipTransform: give low, high or both")
        low_t = None if low is None else torch.as_tensor(low, dtype=torch.float32)
        high_t = None if high is None else torch.as_tensor(high, dtype=torch.float32)
        if low_t is not None and high_t is not None and bool((low_t > high_t).any()):
            raise ValueError(f"ClipTransform: low ({low}) must be <= high ({high})")
        self.register_buffer("low", low_t)
        self.register_buffer("high", high_t)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        low = None if self.low is None else self.low.to(value.dtype)
        high = None if self.high is None else self.high.to(value.dtype)
        return value.clamp(low, high)

    _inv_apply_transform = _apply_transform

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call_tolerant(tensordict_reset)

    def _spec(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        dtype = float_dtype(leaf)
        low = torch.full(leaf.shape, -float("inf"), dtype=dtype)
        high = torch.full(leaf.shape, float("inf"), dtype=dtype)
        if self.low is not None:
            low = torch.maximum(low, self.low.to(dtype).cpu())
        if self.high is not None:
            high = torch.minimum(high, self.high.to(dtype).cpu())
        if isinstance(leaf, Bounded):
            low = torch.maximum(low, leaf.low.to(dtype).cpu())
            high = torch.minimum(high, leaf.high.to(dtype).cpu())
        return Bounded(low, high, shape=leaf.shape, device=leaf.device, dtype=dtype)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        map_output_specs(self, output_spec, self._spec)
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        map_input_specs(self, input_spec, self._spec)
        return input_spec

    def extra_repr(self) -> str:
        low = None if self.low is None else self.low.tolist()
        high = None if self.high is None else self.high.tolist()
        return f"low={low}, high={high}, {super().extra_repr()}"


class ActionDiscretizer(Transform):
    """Exposes a continuous (``Bounded``) action as a discrete one, for DQN-style algorithms.

    Each action dim ``[low, high]`` is cut into ``num_intervals`` equal intervals; the policy
    picks an interval per dim and the inverse pass turns it into a value of the interval (its
    middle, low end, high end, or a uniform draw, following ``sampling``). A one-dim action
    becomes ``Categorical(n)`` of shape ``[*B]``; ``A`` dims become ``MultiCategorical``
    (``[*B, A]``); with ``categorical=False``, ``OneHot`` / ``MultiOneHot``.

    Args:
        num_intervals: intervals per dim: an int, or a tensor of one int per action dim.
        action_key: the base env's continuous action.
        out_action_key: the discrete action's key (default: ``action_key``; when it differs,
            the continuous action is computed for the base env and not recorded).
        sampling: a :class:`ActionDiscretizer.SamplingStrategy` (default ``MEDIAN``).
        categorical: index actions (``True``) or one-hot ones.

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import ActionDiscretizer, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), ActionDiscretizer(5))
        >>> env.action_spec
        Categorical(n=5, shape=torch.Size([]), dtype=torch.int64, device=None)
        >>> env.transform.to_continuous(torch.tensor(4))  # middle of the top interval
        tensor([1.6000])
        >>> check_env_specs(env)
    """

    num_intervals: torch.Tensor

    class SamplingStrategy(IntEnum):
        """Where in its interval a discrete action lands."""

        MEDIAN = 0
        LOW = 1
        HIGH = 2
        RANDOM = 3

    def __init__(
        self,
        num_intervals: int | torch.Tensor,
        action_key: NestedKey = ACTION,
        out_action_key: NestedKey | None = None,
        sampling: SamplingStrategy | None = None,
        categorical: bool = True,
    ) -> None:
        action_key = unravel_key(action_key)
        out_action_key = action_key if out_action_key is None else unravel_key(out_action_key)
        super().__init__(in_keys_inv=[action_key], out_keys_inv=[out_action_key])
        n = torch.as_tensor(num_intervals, dtype=torch.int64)
        if bool((n < 1).any()):
            raise ValueError(f"ActionDiscretizer: num_intervals must be >= 1, got {num_intervals}")
        self.register_buffer("num_intervals", n)
        self.action_key = action_key
        self.out_action_key = out_action_key
        self.sampling = (
            self.SamplingStrategy.MEDIAN if sampling is None else self.SamplingStrategy(sampling)
        )
        self.categorical = categorical
        self._low: torch.Tensor | None = None
        self._width: torch.Tensor | None = None
        self._nvec: list[int] = []
        self._dims = 0

    def _uses_step(self) -> bool:
        return False

    def _discrete_spec(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        if not isinstance(leaf, Bounded) or not leaf.dtype.is_floating_point:
            raise TypeError(f"ActionDiscretizer needs a float Bounded action spec, got {leaf!r}")
        if not (bool(leaf.low.isfinite().all()) and bool(leaf.high.isfinite().all())):
            raise ValueError(f"ActionDiscretizer needs finite action bounds, got {leaf!r}")
        if leaf.ndim < 1:
            raise ValueError(f"ActionDiscretizer needs an action with a feature dim, got {leaf!r}")
        dims = leaf.shape[-1]
        n = self.num_intervals.reshape(-1)
        if n.numel() == 1:
            n = n.expand(dims)
        if n.numel() != dims:
            raise ValueError(
                f"ActionDiscretizer: {n.numel()} num_intervals for an action of {dims} dims"
            )
        batch = leaf.shape[:-1]
        self._dims = dims
        self._nvec = [int(x) for x in n]
        self._low = leaf.low.clone()
        self._width = (leaf.high - leaf.low) / n.to(leaf.low)
        self._low_row = self._low.reshape(-1, dims)[0]
        self._width_row = self._width.reshape(-1, dims)[0]
        self._uniform = bool((self._low == self._low_row).all()) and bool(
            (self._width == self._width_row).all()
        )
        self._dtype = leaf.dtype
        device = leaf.device
        if dims == 1:
            if self.categorical:
                return Categorical(self._nvec[0], shape=batch, device=device)
            return OneHot(self._nvec[0], shape=(*batch, self._nvec[0]), device=device)
        if self.categorical:
            return MultiCategorical(self._nvec, shape=(*batch, dims), device=device)
        return MultiOneHot(self._nvec, shape=(*batch, sum(self._nvec)), device=device)

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        map_input_specs(self, input_spec, self._discrete_spec)
        return input_spec

    def _indices(self, action: torch.Tensor) -> torch.Tensor:
        """Per-dim interval indices ``[*B, A]`` from the policy's action."""
        dims = self._dims
        if self.categorical:
            return action.unsqueeze(-1) if dims == 1 else action
        # argmax does not take bool tensors.
        action = action if action.is_floating_point() else action.float()
        if dims == 1:
            return action.argmax(-1, keepdim=True)
        parts = action.split(self._nvec, -1)
        return torch.stack([p.argmax(-1) for p in parts], -1)

    def to_continuous(self, action: torch.Tensor) -> torch.Tensor:
        """The continuous action for a discrete one (what the base env receives).

        Args:
            action: indices ``[*B]`` / ``[*B, A]`` or one-hot vectors, as the action spec says.

        Returns:
            The continuous action, ``[*B, A]``.
        """
        if self._low is None:
            raise RuntimeError(
                "ActionDiscretizer: use it in an env first (it needs the action bounds)"
            )
        index = self._indices(action).to(self._low.dtype)
        low, width = self._low, self._width
        if index.shape[:-1] != low.shape[:-1]:
            if not self._uniform:
                raise ValueError(
                    f"ActionDiscretizer: an action of shape {tuple(action.shape)} does not match "
                    f"the env's batch, and the bounds differ across sub-envs"
                )
            low, width = self._low_row, self._width_row
        assert low is not None and width is not None
        low, width = low.to(index.device), width.to(index.device)
        if self.sampling == self.SamplingStrategy.MEDIAN:
            offset = index + 0.5
        elif self.sampling == self.SamplingStrategy.LOW:
            offset = index
        elif self.sampling == self.SamplingStrategy.HIGH:
            offset = index + 1.0
        else:
            offset = index + torch.rand_like(index)
        return (low + offset * width).to(self._dtype)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = get(tensordict, self.out_action_key)
        if action is None:
            if self.missing_tolerance:
                return tensordict
            raise missing_key_error(self, self.out_action_key, tensordict)
        set_(tensordict, self.action_key, self.to_continuous(action))
        return tensordict

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        return output_spec

    def extra_repr(self) -> str:
        return (
            f"num_intervals={self.num_intervals.tolist()}, action_key={self.action_key!r}, "
            f"out_action_key={self.out_action_key!r}, sampling={self.sampling.name}, "
            f"categorical={self.categorical}"
        )


class ActionScaling(Transform):
    """Lets the policy act in ``[-1, 1]`` (or ``[0, 1]``) and rescales to the env's action bounds.

    With a ``Bounded`` action spec ``[low, high]``, ``loc = (high + low) / 2`` and
    ``scale = (high - low) / 2`` (``standard_normal=True``), or ``loc = low`` and
    ``scale = high - low`` (``standard_normal=False``, a ``[0, 1]`` policy space). The inverse
    pass sends ``a * scale + loc`` to the env; the forward pass (``in_keys``, e.g. in a replay
    buffer) computes ``(a - loc) / scale``. Explicit ``loc`` and ``scale`` replace the spec's.

    Args:
        in_keys_inv: the env action to write (default ``["action"]``; one key).
        out_keys_inv: the policy's action (default: ``in_keys_inv``).
        in_keys: entries to normalise on the way out (default: none).
        out_keys: where to write them (default: ``in_keys``).
        loc: the shift (default: from the action spec's bounds).
        scale: the factor (default: from the action spec's bounds).
        standard_normal: a ``[-1, 1]`` policy space (``False``: ``[0, 1]``).

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import ActionScaling, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), ActionScaling())
        >>> env.action_spec.low, env.action_spec.high
        (tensor([-1.]), tensor([1.]))
        >>> env.transform.inv(env.reset().set("action", torch.tensor([0.5])))["action"]
        tensor([1.])
        >>> check_env_specs(env)
    """

    loc: torch.Tensor | None
    scale: torch.Tensor | None

    def __init__(
        self,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        loc: torch.Tensor | float | None = None,
        scale: torch.Tensor | float | None = None,
        standard_normal: bool = True,
    ) -> None:
        if in_keys_inv is None:
            in_keys_inv = [ACTION]
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        if len(self.in_keys_inv) > 1:
            raise ValueError("ActionScaling: one action key per transform; compose several")
        if (loc is None) != (scale is None):
            raise ValueError("ActionScaling: give both loc and scale, or neither")
        self._explicit = loc is not None
        self.standard_normal = standard_normal
        self.register_buffer("loc", None if loc is None else torch.as_tensor(loc).float())
        self.register_buffer("scale", None if scale is None else torch.as_tensor(scale).float())
        if self.scale is not None and bool((self.scale == 0).any()):
            raise ValueError("ActionScaling: scale must not be 0")

    def _affine(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.loc is None or self.scale is None:
            raise RuntimeError(
                "ActionScaling: loc and scale come from the env's action spec; use the "
                "transform in an env first, or pass loc and scale"
            )
        dtype = like.dtype if like.dtype.is_floating_point else torch.float32
        return self.loc.to(like.device, dtype), self.scale.to(like.device, dtype)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        loc, scale = self._affine(value)
        return (value - loc) / scale

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        loc, scale = self._affine(value)
        return value * scale + loc

    def _policy_spec(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        if not self._explicit:
            if not isinstance(leaf, Bounded):
                raise TypeError(
                    f"ActionScaling: the action {key!r} has no bounds ({type(leaf).__name__}); "
                    "pass loc and scale"
                )
            low, high = leaf.low.float(), leaf.high.float()
            if self.standard_normal:
                loc, scale = (high + low) / 2, (high - low) / 2
            else:
                loc, scale = low, high - low
            self.loc, self.scale = loc, scale
        dtype = float_dtype(leaf)
        if isinstance(leaf, Bounded):
            a, b = (
                self._apply_transform(leaf.low.to(dtype)),
                self._apply_transform(leaf.high.to(dtype)),
            )
            return Bounded(torch.minimum(a, b), torch.maximum(a, b), leaf.shape, leaf.device, dtype)
        return Unbounded(shape=leaf.shape, device=leaf.device, dtype=dtype)

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        map_input_specs(self, input_spec, self._policy_spec)
        return input_spec

    def extra_repr(self) -> str:
        return f"standard_normal={self.standard_normal}, in_keys_inv={self.in_keys_inv}"


class DiscreteActionProjection(Transform):
    """Lets a policy with ``max_actions`` one-hot actions drive an env with fewer of them.

    The policy writes a one-hot action over ``max_actions`` choices; the inverse pass sends the
    env a one-hot over its ``num_actions_effective`` choices: the same index when it is below
    ``num_actions_effective``, else a uniformly random valid one. With ``include_forward`` the
    forward pass (replay buffers) pads stored env actions with zeros up to ``max_actions``. One
    policy can so serve several discrete envs with different action counts.

    Args:
        num_actions_effective: the env's number of actions.
        max_actions: the policy's number of actions (``>= num_actions_effective``).
        action_key: the action entry (default ``"action"``).
        include_forward: also pad actions on the way out (replay buffers).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs.transforms import DiscreteActionProjection
        >>> t = DiscreteActionProjection(num_actions_effective=2, max_actions=4)
        >>> t.inv(TensorDict(action=torch.tensor([0, 1, 0, 0])))["action"]
        tensor([0, 1])
        >>> t(TensorDict(action=torch.tensor([1, 0])))["action"]
        tensor([1, 0, 0, 0])
    """

    def __init__(
        self,
        num_actions_effective: int,
        max_actions: int,
        action_key: NestedKey = ACTION,
        include_forward: bool = True,
    ) -> None:
        if num_actions_effective < 1 or max_actions < num_actions_effective:
            raise ValueError(
                "DiscreteActionProjection: need 1 <= num_actions_effective <= max_actions, got "
                f"{num_actions_effective} and {max_actions}"
            )
        in_keys = [action_key] if include_forward else []
        super().__init__(in_keys=in_keys, in_keys_inv=[action_key])
        self.num_actions_effective = int(num_actions_effective)
        self.max_actions = int(max_actions)
        self.action_key = unravel_key(action_key)
        self.include_forward = include_forward

    def _apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        if action.shape[-1] != self.num_actions_effective:
            raise ValueError(
                f"DiscreteActionProjection: expected {self.num_actions_effective} one-hot "
                f"entries, got {action.shape[-1]}"
            )
        pad = action.new_zeros((*action.shape[:-1], self.max_actions - action.shape[-1]))
        return torch.cat([action, pad], -1)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        # Step outputs hold no action: the forward pass is for stored data only.
        return next_tensordict

    def _inv_apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        if action.shape[-1] != self.max_actions:
            raise ValueError(
                f"DiscreteActionProjection: expected {self.max_actions} one-hot entries, got "
                f"{action.shape[-1]}"
            )
        # argmax has no bool kernel; one-hot actions may be bool.
        index = action.to(torch.uint8).argmax(-1)
        too_big = index >= self.num_actions_effective
        if bool(too_big.any()):
            random = torch.randint_like(index, self.num_actions_effective)
            index = torch.where(too_big, random, index)
        return torch.nn.functional.one_hot(index, self.num_actions_effective).to(action.dtype)

    def _policy_spec(self, leaf: TensorSpec, key: NestedKey) -> TensorSpec:
        if not isinstance(leaf, OneHot) or leaf.shape[-1] != self.num_actions_effective:
            raise TypeError(
                f"DiscreteActionProjection: the action {key!r} must be a OneHot spec over "
                f"{self.num_actions_effective} actions, got {leaf!r}"
            )
        shape = (*leaf.shape[:-1], self.max_actions)
        return OneHot(self.max_actions, shape=shape, device=leaf.device, dtype=leaf.dtype)

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        map_input_specs(self, input_spec, self._policy_spec)
        return input_spec

    def extra_repr(self) -> str:
        return (
            f"num_actions_effective={self.num_actions_effective}, "
            f"max_actions={self.max_actions}, action_key={self.action_key!r}"
        )
