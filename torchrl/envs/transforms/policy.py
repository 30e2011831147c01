"""Transforms that act with or around a policy: ``ConditionalPolicySwitch``, ``ConditionalSkip``,
``ModuleTransform``, ``MultiAction`` and ``MeanActionSelector``.

They step the env below them more than once (a second policy's moves, a sequence of actions),
leave some steps out, or run a module on the data. Those that step the env need a
``TransformedEnv`` and refuse to run as a plain module (e.g. in a replay buffer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, NEXT, OBSERVATION
from torchrl._types import DeviceLike, NestedKey
from torchrl.data.specs import Composite, TensorSpec, Unbounded
from torchrl.envs._writes import STEP_MASK, step_mask
from torchrl.envs.transforms._utils import (
    expand_right,
    get,
    missing_key_error,
    shallow_copy,
    unravel_key,
)
from torchrl.envs.transforms.base import Transform

__all__ = [
    "ConditionalPolicySwitch",
    "ConditionalSkip",
    "MeanActionSelector",
    "ModuleTransform",
    "MultiAction",
]


def _input_at_level(transform: Transform, tensordict: TensorDictBase) -> TensorDictBase:
    """A step input as the env below ``transform`` sees it (the later inverses applied)."""
    inverses = [t for t in reversed(transform._following()) if t._uses_inv()]
    td = shallow_copy(tensordict)
    for t in inverses:
        td = t._inv_call(td)
    return td


def _condition_mask(
    owner: Transform, value: bool | torch.Tensor, batch_size: torch.Size
) -> torch.Tensor:
    """A condition's result as a bool tensor of the env's batch shape."""
    mask = torch.as_tensor(value, dtype=torch.bool)
    # A trailing singleton (a done-like ``[*B, 1]``) is accepted.
    if mask.ndim == len(batch_size) + 1 and mask.shape[-1] == 1:
        mask = mask.squeeze(-1)
    if mask.ndim == 0:
        return mask.expand(batch_size)
    if mask.shape != batch_size:
        raise ValueError(
            f"{type(owner).__name__}: the condition returned a tensor of shape "
            f"{tuple(mask.shape)}; expected a bool, or a tensor of the env's batch shape "
            f"{tuple(batch_size)} (optionally with a trailing 1)"
        )
    return mask


def _needs_parent(transform: Transform) -> Any:
    parent = transform.parent
    if parent is None:
        raise RuntimeError(f"{type(transform).__name__} steps the env: use it in a TransformedEnv")
    return parent


class ConditionalPolicySwitch(Transform):
    """Lets a second policy act whenever a condition holds on the env's output.

    After each step (and each reset), ``condition`` is evaluated on the data; while it holds,
    ``policy`` writes an action and the env below this transform steps with it. The outer
    policy only sees the data once the condition no longer holds (or the episode ended): e.g.
    the opponent's moves in a two-player game. The data returned is that of the last inner step.

    In a batched env the condition must hold for every sub-env or for none (the sub-envs cannot
    step separately); a mixed result raises a ``ValueError``.

    Args:
        policy: a callable on a TensorDict that writes the action(s) (e.g. a
            ``TensorDictModule``).
        condition: a callable on a TensorDict returning a bool or a bool tensor of the env's
            batch shape: whether ``policy`` acts next.

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.transforms import ConditionalPolicySwitch, StepCounter, TransformedEnv
        >>> def zero_torque(td):
        ...     return td.set("action", torch.zeros(*td.batch_size, 1))
        >>> env = TransformedEnv(PendulumEnv(seed=0), StepCounter())
        >>> env.append_transform(
        ...     ConditionalPolicySwitch(zero_torque, lambda td: td["step_count"] % 2 == 1)
        ... )  # doctest: +ELLIPSIS
        TransformedEnv(...)
        >>> env.rollout(3)["next", "step_count"].squeeze(-1)  # the inner policy plays odd steps
        tensor([2, 4, 6])
    """

    def __init__(
        self,
        policy: Callable[[TensorDictBase], TensorDictBase],
        condition: Callable[[TensorDictBase], bool | torch.Tensor],
    ) -> None:
        if not callable(policy) or not callable(condition):
            raise TypeError("ConditionalPolicySwitch: policy and condition must be callables")
        super().__init__()
        self.policy = policy
        self.condition = condition

    def _holds(self, td: TensorDictBase, parent: Any) -> bool:
        mask = _condition_mask(self, self.condition(td), td.batch_size)
        if bool(mask.all()):
            return True
        if bool(mask.any()):
            raise ValueError(
                "ConditionalPolicySwitch: the condition holds for some sub-envs only; in a "
                "batched env it must hold for all of them or none"
            )
        return False

    def _play(self, state: TensorDictBase, parent: Any) -> TensorDictBase | None:
        """Runs the inner policy from ``state`` (a root-level TensorDict); the last ``next``."""
        cache = parent._cache or parent._spec_cache()
        groups = cache.done_groups
        last = None
        while not groups.any_done(state) and self._holds(state, parent):
            td_in = shallow_copy(state)
            out = self.policy(td_in)
            td_in = td_in if out is None else out
            last = parent._step(td_in)
            groups.complete(last)
            state = shallow_copy(state)
            state.update(last)
        return last

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        parent = _needs_parent(self)
        state = _input_at_level(self, tensordict).exclude(NEXT)
        state.update(next_tensordict)
        last = self._play(state, parent)
        return next_tensordict if last is None else last

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        parent = _needs_parent(self)
        last = self._play(tensordict_reset, parent)
        if last is None:
            return tensordict_reset
        out = shallow_copy(tensordict_reset)
        out.update(last)
        return out

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("ConditionalPolicySwitch steps the env; use it in a TransformedEnv")


class ConditionalSkip(Transform):
    """Leaves out the env step for the sub-envs where ``cond`` holds on the step's input.

    For a skipped sub-env the step returns its input unchanged: the same observations (and
    state entries), a zero reward and the input's done flags. The env below gets a boolean
    ``"_step"`` mask (``False`` where skipped, see :meth:`EnvBase.step`): a stateful batched env
    (``SerialEnv``, ``ParallelEnv``) steps only the other sub-envs, so the skipped ones keep
    their state; a stateless env (``batch_locked=False``) steps all and the skipped entries are
    put back. Another stateful env with a batch of several sub-envs raises a ``ValueError``
    when only some of them are skipped. Transforms before this one see the skipped step's
    input (their results are replaced too); transforms after it see every step.

    Args:
        cond: a callable on the step's input TensorDict returning a bool or a bool tensor of the
            env's batch shape (``True``: skip the step).

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.transforms import ConditionalSkip, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), ConditionalSkip(lambda td: td["step_count"] % 2 == 1))
        >>> env.append_transform(StepCounter())  # after the skip: it counts every step
        TransformedEnv(...)
        >>> r = env.rollout(4)
        >>> bool((r["next", "th"][1] == r["th"][1]).all())  # step 1 was skipped
        True
    """

    def __init__(self, cond: Callable[[TensorDictBase], bool | torch.Tensor]) -> None:
        if not callable(cond):
            raise TypeError("ConditionalSkip: cond must be a callable")
        super().__init__()
        self.cond = cond

    def _mask(self, tensordict: TensorDictBase) -> torch.Tensor:
        return _condition_mask(self, self.cond(tensordict), tensordict.batch_size)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        _needs_parent(self)
        skip = self._mask(tensordict)
        if bool(skip.any()):
            # The env below steps only where the mask holds (EnvBase.step's "_step" contract).
            step = ~skip
            previous = tensordict.get(STEP_MASK, None)
            if previous is not None:
                step = step & step_mask(type(self).__name__, previous, skip.shape)
            tensordict.set(STEP_MASK, step)
        return tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        mask = self._mask(tensordict)
        if not bool(mask.any()):
            return next_tensordict
        parent = _needs_parent(self)
        spec = parent.output_spec
        out = next_tensordict
        for name in ("full_observation_spec", "full_done_spec", "full_reward_spec"):
            for key in spec[name].keys(include_nested=True, leaves_only=True):
                new = out.get(key, None)
                if new is None:
                    continue
                if name == "full_reward_spec":
                    old = torch.zeros_like(new)
                else:
                    old = tensordict.get(key, None)
                    if old is None:
                        continue
                where = expand_right(mask, new.ndim)
                out.set(key, torch.where(where, old.to(new.dtype), new))
        return out

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("ConditionalSkip skips env steps; use it in a TransformedEnv")


SpecTransform = TensorSpec | Callable[[TensorSpec], TensorSpec] | None


class ModuleTransform(Transform):
    """Runs a TensorDict module on the env's outputs (or, with ``inverse=True``, its inputs).

    Args:
        module: the module (a callable on a TensorDict, e.g. a ``TensorDictModule``).
        module_factory: a callable building the module (exclusive with ``module``).
        no_grad: run the module under ``torch.no_grad()``.
        inverse: run the module on the step's input (before the base env) instead of its output.
        device: move the module to this device, and the data to it for the call.
        use_ray_service: run the module in a Ray actor (not supported: raises).
        observation_spec_transform: the new observation spec (a ``Composite``) or a function
            rewriting it.
        done_spec_transform: the same for the done spec.
        reward_spec_transform: the same for the reward spec.
        state_spec_transform: the same for the state spec.
        action_spec_transform: the same for the action spec.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.data import Unbounded
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import ModuleTransform, TransformedEnv
        >>> module = TensorDictModule(lambda x: x.sum(-1, keepdim=True), ["observation"], ["obs_sum"])
        >>> def add_spec(spec):
        ...     spec["obs_sum"] = Unbounded(shape=(*spec.shape, 1))
        ...     return spec
        >>> env = TransformedEnv(
        ...     PendulumEnv(seed=0),
        ...     ModuleTransform(module=module, no_grad=True, observation_spec_transform=add_spec),
        ... )
        >>> env.rollout(3)["next", "obs_sum"].shape
        torch.Size([3, 1])
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        *,
        module: Callable[[TensorDictBase], TensorDictBase] | None = None,
        module_factory: Callable[[], Callable[[TensorDictBase], TensorDictBase]] | None = None,
        no_grad: bool = False,
        inverse: bool = False,
        device: DeviceLike | None = None,
        use_ray_service: bool = False,
        observation_spec_transform: SpecTransform = None,
        done_spec_transform: SpecTransform = None,
        reward_spec_transform: SpecTransform = None,
        state_spec_transform: SpecTransform = None,
        action_spec_transform: SpecTransform = None,
    ) -> None:
        super().__init__()
        if use_ray_service:
            raise NotImplementedError(
                "ModuleTransform(use_ray_service=True) is not supported: the module runs in the "
                "env's process"
            )
        if (module is None) == (module_factory is None):
            raise ValueError("ModuleTransform: give exactly one of module and module_factory")
        if module is None:
            assert module_factory is not None
            module = module_factory()
        if not callable(module):
            raise TypeError(f"ModuleTransform: the module must be callable, got {module!r}")
        self.device = None if device is None else torch.device(device)
        if self.device is not None and isinstance(module, torch.nn.Module):
            module = module.to(self.device)
        self.module = module
        self.no_grad = bool(no_grad)
        self.inverse = bool(inverse)
        self._spec_fns = {
            "full_observation_spec": observation_spec_transform,
            "full_done_spec": done_spec_transform,
            "full_reward_spec": reward_spec_transform,
            "full_state_spec": state_spec_transform,
            "full_action_spec": action_spec_transform,
        }

    def _run(self, tensordict: TensorDictBase) -> TensorDictBase:
        device = self.device
        source = tensordict.device
        td = tensordict if device is None or source == device else tensordict.to(device)
        if self.no_grad:
            with torch.no_grad():
                out = self.module(td)
        else:
            out = self.module(td)
        if out is None:
            out = td
        if not isinstance(out, TensorDictBase):
            raise TypeError(
                f"ModuleTransform: the module must return a TensorDict, got {type(out).__name__}"
            )
        if device is not None and source != device:
            out = out.to(source) if source is not None else out
        return out

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self.inverse:
            return next_tensordict
        return self._run(next_tensordict)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        if self.inverse:
            return tensordict_reset
        return self._run(tensordict_reset)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not self.inverse:
            return tensordict
        return self._run(tensordict)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Runs the module on ``tensordict`` (``inverse=False``); returns it otherwise."""
        return self._call(tensordict)

    def _apply_spec(self, name: str, spec: Composite) -> Composite:
        fn = self._spec_fns[name]
        if fn is None:
            return spec
        if isinstance(fn, TensorSpec):
            if not isinstance(fn, Composite):
                raise TypeError(
                    f"ModuleTransform: the {name} replacement must be a Composite, got "
                    f"{type(fn).__name__}"
                )
            return fn.clone()
        new = fn(spec)
        if not isinstance(new, Composite):
            raise TypeError(
                f"ModuleTransform: the {name} function must return a Composite, got "
                f"{type(new).__name__}"
            )
        return new

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        return self._apply_spec("full_observation_spec", observation_spec)

    def transform_done_spec(self, done_spec: Composite) -> Composite:
        return self._apply_spec("full_done_spec", done_spec)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        return self._apply_spec("full_reward_spec", reward_spec)

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        return self._apply_spec("full_state_spec", state_spec)

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        return self._apply_spec("full_action_spec", action_spec)

    def extra_repr(self) -> str:
        return f"no_grad={self.no_grad}, inverse={self.inverse}, device={self.device}"


_AGGREGATIONS = ("last", "stack", "sum", "mean")


class MultiAction(Transform):
    """Runs a sequence of actions in one step: the actions are stacked along a new dim.

    An action with one dim more than the base env's action (at ``dim`` past the batch dims)
    is unbound: the first action goes through the base env's step, the others through more
    steps of the env below this transform. The sequence stops early once a sub-env is done (in
    a batched env, for every sub-env, as the sub-envs cannot step separately). An action with
    the base shape is a plain step. Transforms before this one run on every inner step, those
    after it once per outer step. Other entries the policy wrote stay on the outer step.

    Args:
        dim: where the sequence dim is, counted from the TensorDict's batch dims (``1``: just
            after them); must be positive.
        stack_rewards: return the rewards of every inner step, stacked at ``dim`` (zeros past an
            early stop, so every outer step has the same shape); ``False``: the last reward.
        stack_observations: return the observations of every inner step, stacked at ``dim``
            (the last repeated past an early stop); ``False``: only the last ones.
        action_key: the one action entry to unbind (default: every action key of the env).
        chunk_key: read the sequence from this entry instead (the policy writes its chunk
            there; the action entry then receives each step's action). Without the entry, the
            step is a plain one.
        reward_aggregation: ``"stack"``, ``"last"``, ``"sum"`` or ``"mean"`` of the inner
            rewards (over the steps run); overrides ``stack_rewards`` when given.
        num_actions: the length of the sequences, when fixed: the action spec (or the
            ``chunk_key`` spec), and the reward and observation specs when stacked, get that dim
            (``None``: specs unchanged).

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import MultiAction, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), StepCounter())
        >>> env.append_transform(MultiAction(num_actions=3))  # doctest: +ELLIPSIS
        TransformedEnv(...)
        >>> td = env.reset().set("action", torch.zeros(3, 1))
        >>> out = env.step(td)["next"]
        >>> out["step_count"], out["reward"].shape
        (tensor([3]), torch.Size([3, 1]))
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        *,
        dim: int = 1,
        stack_rewards: bool = True,
        stack_observations: bool = False,
        action_key: NestedKey | None = None,
        chunk_key: NestedKey | None = None,
        reward_aggregation: str | None = None,
        num_actions: int | None = None,
    ) -> None:
        if dim < 1:
            raise ValueError(f"MultiAction: dim must be > 0, got {dim}")
        if num_actions is not None and num_actions < 1:
            raise ValueError(f"MultiAction: num_actions must be >= 1, got {num_actions}")
        if reward_aggregation is not None and reward_aggregation not in _AGGREGATIONS:
            raise ValueError(
                f"MultiAction: reward_aggregation must be one of {_AGGREGATIONS}, got "
                f"{reward_aggregation!r}"
            )
        if chunk_key is not None and action_key is None:
            action_key = ACTION
        super().__init__()
        self.dim = int(dim)
        if reward_aggregation is None:
            reward_aggregation = "stack" if stack_rewards else "last"
        self.reward_aggregation = reward_aggregation
        self.stack_rewards = reward_aggregation == "stack"
        self.stack_observations = bool(stack_observations)
        self.action_key = None if action_key is None else unravel_key(action_key)
        self.chunk_key = None if chunk_key is None else unravel_key(chunk_key)
        self.num_actions = num_actions

    def _seq_dim(self, td: TensorDictBase) -> int:
        return td.batch_dims + self.dim - 1

    def _action_keys(self, parent: Any) -> list[NestedKey]:
        if self.action_key is None:
            return list(parent.action_keys)
        if self.action_key not in parent.action_keys:
            raise KeyError(
                f"MultiAction: action_key {self.action_key!r} is not an action of the env "
                f"(its action keys: {parent.action_keys})"
            )
        return [self.action_key]

    def _sequences(
        self, tensordict: TensorDictBase, parent: Any
    ) -> dict[NestedKey, torch.Tensor] | None:
        """The stacked actions of ``tensordict`` by action key, or ``None`` for single actions."""
        spec = parent.full_action_spec
        keys = self._action_keys(parent)
        if self.chunk_key is not None:
            chunk = tensordict.get(self.chunk_key, None)
            if chunk is None:
                return None
            base_ndim = spec[keys[0]].ndim
            if chunk.ndim != base_ndim + 1:
                raise ValueError(
                    f"MultiAction: the chunk {self.chunk_key!r} has shape {tuple(chunk.shape)}; "
                    f"expected {base_ndim + 1} dims (a sequence of {keys[0]!r} actions)"
                )
            return {keys[0]: chunk}
        found: dict[NestedKey, torch.Tensor] = {}
        stacked = None
        for key in keys:
            value = tensordict.get(key, None)
            if value is None:
                raise missing_key_error(self, key, tensordict)
            base_ndim = spec[key].ndim
            is_seq = value.ndim == base_ndim + 1
            if not is_seq and value.ndim != base_ndim:
                raise ValueError(
                    f"MultiAction: the action {key!r} has shape {tuple(value.shape)}; expected "
                    f"{base_ndim} dims (one action) or {base_ndim + 1} (a sequence at dim "
                    f"{self.dim} past the batch dims)"
                )
            if stacked is not None and stacked != is_seq:
                raise ValueError("MultiAction: some action keys hold sequences and others not")
            stacked = is_seq
            found[key] = value
        return found if stacked else None

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        parent = _needs_parent(self)
        seqs = self._sequences(tensordict, parent)
        if seqs is None:
            return tensordict
        d = self._seq_dim(tensordict)
        lengths = {v.shape[d] for v in seqs.values()}
        if len(lengths) != 1 or 0 in lengths:
            raise ValueError(
                f"MultiAction: the action sequences must share one non-zero length, got {lengths}"
            )
        for key, value in seqs.items():
            tensordict.set(key, value.select(d, 0))
        return tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        parent = _needs_parent(self)
        td_in = _input_at_level(self, tensordict)
        seqs = self._sequences(td_in, parent)
        if seqs is None:
            return next_tensordict
        d = self._seq_dim(td_in)
        length = next(iter(seqs.values())).shape[d]
        cache = parent._cache or parent._spec_cache()
        groups = cache.done_groups
        reward_keys = list(cache.reward_keys)
        obs_keys = list(parent.full_observation_spec.keys(include_nested=True, leaves_only=True))
        rewards = [[get(next_tensordict, k)] for k in reward_keys]
        observations = (
            [[next_tensordict.get(k)] for k in obs_keys] if self.stack_observations else []
        )
        state = td_in.exclude(NEXT)
        for t in range(1, length):
            if groups.any_done(next_tensordict):
                break
            state = shallow_copy(state)
            state.update(next_tensordict)
            for key, value in seqs.items():
                state.set(key, value.select(d, t))
            next_tensordict = parent._step(state)
            groups.complete(next_tensordict)
            for acc, key in zip(rewards, reward_keys):
                acc.append(get(next_tensordict, key))
            for acc, key in zip(observations, obs_keys):
                acc.append(next_tensordict.get(key))
        aggregation = self.reward_aggregation
        for acc, key in zip(rewards, reward_keys):
            if aggregation == "stack":
                acc += [torch.zeros_like(acc[-1])] * (length - len(acc))
                next_tensordict.set(key, torch.stack(acc, d))
            elif aggregation == "sum":
                next_tensordict.set(key, torch.stack(acc).sum(0))
            elif aggregation == "mean":
                next_tensordict.set(key, torch.stack(acc).mean(0))
        for acc, key in zip(observations, obs_keys):
            acc += [acc[-1]] * (length - len(acc))
            next_tensordict.set(key, torch.stack(acc, d))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("MultiAction steps the env; use it in a TransformedEnv")

    # --------------------------------------------------------------------------- specs
    def _stacked_leaf(self, leaf: TensorSpec, batch_ndim: int) -> TensorSpec:
        n = self.num_actions
        assert n is not None
        d = batch_ndim + self.dim - 1
        shape = list(leaf.shape)
        shape.insert(d, n)
        return leaf.unsqueeze(d).expand(shape)

    def _stack_spec(self, spec: Composite) -> Composite:
        new = spec.clone()
        for key in spec.keys(include_nested=True, leaves_only=True):
            new[key] = self._stacked_leaf(spec[key], len(spec.shape))
        return new

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        if self.num_actions is None:
            return action_spec
        if self.chunk_key is None:
            if self.action_key is None:
                return self._stack_spec(action_spec)
            leaf = action_spec[self.action_key]
            action_spec[self.action_key] = self._stacked_leaf(leaf, len(action_spec.shape))
            return action_spec
        assert self.action_key is not None
        leaf = action_spec[self.action_key]
        action_spec[self.chunk_key] = self._stacked_leaf(leaf, len(action_spec.shape))
        return action_spec

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        if self.num_actions is None or self.reward_aggregation != "stack":
            return reward_spec
        return self._stack_spec(reward_spec)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        if self.num_actions is None or not self.stack_observations:
            return observation_spec
        return self._stack_spec(observation_spec)

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, reward_aggregation={self.reward_aggregation!r}, "
            f"stack_observations={self.stack_observations}, num_actions={self.num_actions}"
        )


class MeanActionSelector(Transform):
    """Lets a policy acting on Gaussian beliefs (PILCO-style) drive a plain env.

    On the way out, the flat observation becomes a deterministic belief: ``(obs, "mean")``
    holds it and ``(obs, "var")`` a zero covariance (``[*B, D, D]``). On the way in, the
    policy's ``(action, "mean")`` becomes the flat action of the base env. The action spec
    becomes a ``Composite`` with a ``"mean"`` entry.

    Args:
        observation_key: the base env's observation (default ``"observation"``).
        action_key: the base env's action (default ``"action"``).

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import MeanActionSelector, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), MeanActionSelector())
        >>> td = env.reset()
        >>> td["observation", "mean"].shape, td["observation", "var"].shape
        (torch.Size([3]), torch.Size([3, 3]))
        >>> td["action", "mean"] = torch.ones(1)
        >>> env.step(td)["next", "observation", "mean"].shape
        torch.Size([3])
        >>> check_env_specs(env)
    """

    def __init__(
        self, observation_key: NestedKey = OBSERVATION, action_key: NestedKey = ACTION
    ) -> None:
        super().__init__()
        self.observation_key = unravel_key(observation_key)
        self.action_key = unravel_key(action_key)

    def _belief(self, td: TensorDictBase, tolerant: bool) -> TensorDictBase:
        obs = td.get(self.observation_key, None)
        if obs is None:
            if tolerant:
                return td
            raise missing_key_error(self, self.observation_key, td)
        if isinstance(obs, TensorDictBase):
            return td  # already a belief
        batch = td.batch_size
        var = torch.zeros(*obs.shape, obs.shape[-1], dtype=obs.dtype, device=obs.device)
        td.set(self.observation_key, TensorDict(mean=obs, var=var, batch_size=batch))
        return td

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._belief(next_tensordict, tolerant=False)

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._belief(tensordict_reset, tolerant=False)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Wraps the observation (and ``("next", observation)``) of ``tensordict`` as beliefs."""
        self._belief(tensordict, tolerant=False)
        nxt = tensordict.get(NEXT, None)
        if isinstance(nxt, TensorDictBase):
            self._belief(nxt, tolerant=True)
        return tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(self.action_key, None)
        if isinstance(action, TensorDictBase):
            mean = action.get("mean", None)
            if mean is None:
                raise missing_key_error(self, (*_tuple(self.action_key), "mean"), tensordict)
            tensordict.set(self.action_key, mean)
        elif action is None:
            raise missing_key_error(self, (*_tuple(self.action_key), "mean"), tensordict)
        obs = tensordict.get(self.observation_key, None)
        if isinstance(obs, TensorDictBase):
            # The base env sees its own flat observation.
            tensordict.set(self.observation_key, obs.get("mean"))
        return tensordict

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        leaf = observation_spec.get(self.observation_key, None)
        if leaf is None or isinstance(leaf, Composite):
            raise KeyError(
                f"MeanActionSelector: the observation spec has no leaf {self.observation_key!r} "
                f"(its keys: {list(observation_spec.keys(True, True))})"
            )
        shape = leaf.shape
        var = Unbounded(shape=(*shape, shape[-1]), device=leaf.device, dtype=leaf.dtype)
        observation_spec[self.observation_key] = Composite(
            mean=leaf, var=var, shape=observation_spec.shape, device=leaf.device
        )
        return observation_spec

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        leaf = action_spec.get(self.action_key, None)
        if leaf is None or isinstance(leaf, Composite):
            raise KeyError(
                f"MeanActionSelector: the action spec has no leaf {self.action_key!r} "
                f"(its keys: {list(action_spec.keys(True, True))})"
            )
        action_spec[self.action_key] = Composite(
            mean=leaf, shape=action_spec.shape, device=leaf.device
        )
        return action_spec

    def extra_repr(self) -> str:
        return f"observation_key={self.observation_key!r}, action_key={self.action_key!r}"


def _tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)
