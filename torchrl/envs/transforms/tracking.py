"""Transforms that track episodes: ``StepCounter``, ``RewardSum``, ``InitTracker``, ``TensorDictPrimer``,
``TrajCounter``.

Each writes an entry at reset (for the sub-envs being reset; the others keep theirs) and carries
it across steps, reading the previous value from the step's input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from tensordict import TensorDictBase

from torchrl._keys import DONE, EPISODE_REWARD, IS_INIT, NEXT, RESET, STEP_COUNT, TRUNCATED
from torchrl._types import DeviceLike, NestedKey
from torchrl.data.specs import Bounded, Categorical, Composite, TensorSpec, Unbounded
from torchrl.data.specs.continuous import UnboundedDiscrete
from torchrl.envs.transforms._utils import (
    done_groups,
    expand_right,
    feature_spec,
    get,
    key_list,
    key_prefix,
    key_tuple,
    missing_key_error,
    node_ndim,
    replace_last,
    set_,
    unravel_key,
    where_reset,
    with_prefix,
)
from torchrl.envs.transforms.base import Transform

__all__ = ["InitTracker", "RewardSum", "StepCounter", "TensorDictPrimer", "TrajCounter"]


def _missing_state(owner: Transform, key: NestedKey, td: TensorDictBase) -> KeyError:
    err = missing_key_error(owner, key, td)
    return KeyError(f"{err.args[0]}; reset the env first (the entry is written at reset)")


class StepCounter(Transform):
    """Counts the steps of each episode and truncates episodes at ``max_steps``.

    Writes ``step_count`` (int64, shaped like ``done``) at reset (0) and after every step
    (previous count + 1). With ``max_steps``, a step whose count reaches it sets ``truncated``
    (and ``done``). Each group of done flags (e.g. ``("agents", "done")``) gets its own count
    (``("agents", "step_count")``), reset by its own ``"_reset"`` entry.

    Args:
        max_steps: the episode length limit (``None``: count only).
        truncated_key: the name of the truncation flag, in each done group.
        step_count_key: the name of the count, in each done group.
        update_done: also set ``done`` when truncating.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.transforms import StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), StepCounter(max_steps=3))
        >>> rollout = env.rollout(10, break_when_any_done=False)
        >>> rollout["next", "step_count"][0].squeeze(-1)
        tensor([1, 2, 3, 1, 2, 3, 1, 2, 3, 1])
        >>> rollout["next", "truncated"][0].squeeze(-1).nonzero().squeeze(-1)
        tensor([2, 5, 8])
    """

    def __init__(
        self,
        max_steps: int | None = None,
        truncated_key: str = TRUNCATED,
        step_count_key: str = STEP_COUNT,
        update_done: bool = True,
    ) -> None:
        if max_steps is not None and int(max_steps) < 1:
            raise ValueError(f"StepCounter: max_steps must be >= 1, got {max_steps}")
        super().__init__()
        self.max_steps = None if max_steps is None else int(max_steps)
        self.truncated_key = truncated_key
        self.step_count_key = step_count_key
        self.update_done = update_done
        self._set_groups([((), torch.Size([1]))])

    def _set_groups(self, groups: list[tuple[tuple[str, ...], torch.Size]]) -> None:
        # (count key, truncated key, done key, reset key, prefix, shape) per done group.
        self._groups = [
            (
                with_prefix(prefix, self.step_count_key),
                with_prefix(prefix, self.truncated_key),
                with_prefix(prefix, DONE),
                with_prefix(prefix, RESET),
                prefix,
                shape,
            )
            for prefix, shape in groups
        ]
        self._limit = (
            None if self.max_steps is None else torch.tensor(self.max_steps, dtype=torch.int64)
        )
        self._one = torch.ones((), dtype=torch.int64)

    @property
    def step_count_keys(self) -> list[NestedKey]:
        """The count entries, one per done group."""
        return [g[0] for g in self._groups]

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        for count_key, _, done_key, reset_key, prefix, shape in self._groups:
            done = get(tensordict_reset, done_key)
            if done is not None:
                shape = done.shape
            fill = torch.zeros(shape, dtype=torch.int64, device=tensordict_reset.device)
            previous = get(tensordict, count_key)
            mask = get(tensordict, reset_key)
            value = where_reset(mask, fill, previous, node_ndim(tensordict_reset, prefix))
            set_(tensordict_reset, count_key, value)
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        limit = self._limit
        one = self._one
        for count_key, trunc_key, done_key, _, _, _ in self._groups:
            count = get(tensordict, count_key)
            if count is None:
                raise _missing_state(self, count_key, tensordict)
            if count.device != one.device:
                one = self._one = one.to(count.device)
                limit = self._limit = None if limit is None else limit.to(count.device)
            count = count + one
            set_(next_tensordict, count_key, count)
            if limit is not None:
                # ``trunc`` is a new tensor: or-ing the env's flag into it in place is safe.
                trunc = count >= limit
                previous = get(next_tensordict, trunc_key)
                if previous is not None:
                    trunc.logical_or_(previous)
                set_(next_tensordict, trunc_key, trunc)
                if self.update_done:
                    done = get(next_tensordict, done_key)
                    set_(next_tensordict, done_key, trunc if done is None else done | trunc)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(
            "StepCounter counts env steps; it cannot be applied to a TensorDict on its own"
        )

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        done_spec = output_spec["full_done_spec"]
        self._set_groups(done_groups(done_spec))
        obs_spec = output_spec["full_observation_spec"]
        for count_key, trunc_key, done_key, _, _, shape in self._groups:
            device = done_spec.device
            obs_spec[count_key] = self._count_spec(shape, device)
            if self.max_steps is not None:
                flag = Categorical(2, shape=shape, dtype=torch.bool, device=device)
                if trunc_key not in done_spec:
                    done_spec[trunc_key] = flag.clone()
                if self.update_done and done_key not in done_spec:
                    done_spec[done_key] = flag.clone()
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        state_spec = input_spec["full_state_spec"]
        for count_key, _, _, _, _, shape in self._groups:
            state_spec[count_key] = self._count_spec(shape, state_spec.device)
        return input_spec

    def _count_spec(self, shape: torch.Size, device: DeviceLike) -> TensorSpec:
        if self.max_steps is None or not self.update_done:
            return UnboundedDiscrete(shape=shape, dtype=torch.int64, device=device)
        return Bounded(0, self.max_steps, shape=shape, dtype=torch.int64, device=device)

    def extra_repr(self) -> str:
        return f"max_steps={self.max_steps}, step_count_key={self.step_count_key!r}"


def _episode_name(key: NestedKey) -> str:
    name = key_tuple(key)[-1]
    return EPISODE_REWARD if name == "reward" else f"episode_{name}"


class RewardSum(Transform):
    """Sums the rewards of each episode into ``episode_reward``, reset to 0 at reset.

    Args:
        in_keys: the reward keys (default: every reward key of the env).
        out_keys: the sums (default: ``"episode_<name>"`` next to each reward, e.g.
            ``("agents", "episode_reward")``).
        reset_keys: the ``"_reset"`` entry of each reward (default: the one of its group).

    Examples:
        >>> import torch
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.transforms import RewardSum, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), RewardSum())
        >>> rollout = env.rollout(5)
        >>> torch.allclose(rollout["next", "episode_reward"][-1], rollout["next", "reward"].sum(0))
        True
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        reset_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        self._explicit_in = in_keys is not None
        self._explicit_out = out_keys is not None
        self._explicit_reset = reset_keys is not None
        self._reset_keys = key_list(reset_keys, "reset_keys")
        self._fill_defaults()

    def _fill_defaults(self) -> None:
        if not self._explicit_in and not self._in_keys:
            self._in_keys = ["reward"]
        if not self._explicit_out:
            self._out_keys = [replace_last(k, _episode_name(k)) for k in self._in_keys]
        if not self._explicit_reset:
            self._reset_keys = [with_prefix(key_prefix(k), RESET) for k in self._in_keys]
        if len(self._reset_keys) != len(self._in_keys):
            raise ValueError(
                f"RewardSum: {len(self._in_keys)} in_keys but {len(self._reset_keys)} reset_keys"
            )
        self._update_pairs()
        self._specs: list[TensorSpec | None] = [None] * len(self._in_keys)
        # Each sum's shape past the env's batch dims (inputs may have other leading dims).
        self._features: list[torch.Size | None] = [None] * len(self._in_keys)

    @property
    def reset_keys(self) -> list[NestedKey]:
        """The ``"_reset"`` entry that resets each sum."""
        return self._reset_keys

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        lead = tensordict_reset.batch_size
        items = zip(self._pairs, self._reset_keys, self._specs, self._features)
        for (_, out_key), reset_key, spec, feature in items:
            previous = get(tensordict, out_key)
            if spec is not None and feature is not None:
                fill = torch.zeros(
                    (*lead, *feature), dtype=spec.dtype, device=tensordict_reset.device
                )
            elif previous is not None:
                fill = torch.zeros_like(previous)
            else:
                raise RuntimeError("RewardSum needs the env's reward spec: use it in an env")
            prefix = key_prefix(out_key)
            mask = get(tensordict, reset_key)
            value = where_reset(mask, fill, previous, node_ndim(tensordict_reset, prefix))
            set_(tensordict_reset, out_key, value)
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in self._pairs:
            reward = get(next_tensordict, in_key)
            if reward is None:
                raise missing_key_error(self, in_key, next_tensordict)
            total = get(tensordict, out_key)
            if total is None:
                raise _missing_state(self, out_key, tensordict)
            set_(next_tensordict, out_key, total + reward)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(
            "RewardSum sums rewards across env steps; it cannot be applied to a TensorDict on "
            "its own"
        )

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        reward_spec = output_spec["full_reward_spec"]
        if not self._explicit_in:
            self._in_keys = list(reward_spec.keys(include_nested=True, leaves_only=True))
            self._fill_defaults()
        obs_spec = output_spec["full_observation_spec"]
        env_ndim = len(obs_spec.shape)
        specs: list[TensorSpec | None] = []
        for in_key, out_key in self._pairs:
            if in_key not in reward_spec:
                raise KeyError(
                    f"RewardSum: the reward key {in_key!r} is not in the env's reward spec "
                    f"(keys: {list(reward_spec.keys(True, True))})"
                )
            leaf = reward_spec[in_key]
            spec = Unbounded(shape=leaf.shape, dtype=leaf.dtype, device=leaf.device)
            obs_spec[out_key] = spec
            specs.append(spec)
        self._specs = specs
        self._features = [s.shape[env_ndim:] if s is not None else None for s in specs]
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        state_spec = input_spec["full_state_spec"]
        for (_, out_key), spec in zip(self._pairs, self._specs):
            if spec is not None:
                state_spec[out_key] = spec.clone()
        return input_spec


class InitTracker(Transform):
    """Marks the first step of each episode: ``is_init`` is ``True`` at reset, ``False`` after.

    Recurrent policies read it to reset their hidden state. Each group of done flags gets its
    own flag (``("agents", "is_init")``).

    Args:
        init_key: the name of the flag, in each done group.

    Examples:
        >>> from torchrl.envs import PendulumEnv
        >>> from torchrl.envs.transforms import InitTracker, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), InitTracker())
        >>> env.append_transform(StepCounter(2))  # doctest: +ELLIPSIS
        TransformedEnv(...)
        >>> env.rollout(4, break_when_any_done=False)["is_init"].squeeze(-1)
        tensor([ True, False,  True, False])
    """

    def __init__(self, init_key: str = IS_INIT) -> None:
        super().__init__()
        if not isinstance(init_key, str):
            raise TypeError(f"InitTracker: init_key is a name (str), got {init_key!r}")
        self.init_key = init_key
        self._set_groups([((), torch.Size([1]))])

    def _set_groups(self, groups: list[tuple[tuple[str, ...], torch.Size]]) -> None:
        self._groups = [
            (with_prefix(prefix, self.init_key), with_prefix(prefix, RESET), prefix, shape)
            for prefix, shape in groups
        ]
        self._done_keys = [with_prefix(prefix, DONE) for prefix, _ in groups]

    @property
    def init_keys(self) -> list[NestedKey]:
        """The flags, one per done group."""
        return [g[0] for g in self._groups]

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        for (init_key, reset_key, prefix, shape), done_key in zip(self._groups, self._done_keys):
            done = get(tensordict_reset, done_key)
            if done is not None:
                shape = done.shape
            mask = get(tensordict, reset_key)
            if mask is not None and tuple(mask.shape) == tuple(shape):
                value = mask.clone() if mask.dtype is torch.bool else mask.bool()
            else:
                value = torch.ones(shape, dtype=torch.bool, device=tensordict_reset.device)
                if mask is not None:
                    value = where_reset(mask, value, ~value, node_ndim(tensordict_reset, prefix))
            set_(tensordict_reset, init_key, value)
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for (init_key, _, _, shape), done_key in zip(self._groups, self._done_keys):
            done = get(next_tensordict, done_key)
            if done is not None:
                value = torch.zeros_like(done, dtype=torch.bool)
            else:
                value = torch.zeros(shape, dtype=torch.bool, device=next_tensordict.device)
            set_(next_tensordict, init_key, value)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("InitTracker marks env resets; use it in a TransformedEnv")

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        done_spec = output_spec["full_done_spec"]
        self._set_groups(done_groups(done_spec))
        obs_spec = output_spec["full_observation_spec"]
        for init_key, _, _, shape in self._groups:
            obs_spec[init_key] = Categorical(
                2, shape=shape, dtype=torch.bool, device=done_spec.device
            )
        return output_spec

    def extra_repr(self) -> str:
        return f"init_key={self.init_key!r}"


class TensorDictPrimer(Transform):
    """Declares extra state entries (e.g. RNN hidden states), filled at reset, carried by steps.

    The primed entries are added to the observation spec and to the state spec. At reset they
    are filled (for the sub-envs being reset) with ``default_value`` or random values; a step
    that does not write ``("next", key)`` carries the input's value over. As a module (or in a
    replay buffer), missing entries are filled.

    Args:
        primers: a ``Composite`` or a dict of specs, keyed by entry (merged with ``kwargs``).
            Shapes may leave out the env's batch dims: they are added (see ``expand_specs``).
        random: fill with ``spec.rand()`` instead of a constant.
        default_value: the fill: a number, a callable returning a tensor, or a dict of those
            per key (default 0).
        reset_key: the ``"_reset"`` entry to follow (default ``"_reset"``).
        expand_specs: prepend the env's batch dims to every spec (``None``: only to specs whose
            shape does not start with them; ``False``: never, and a mismatch is an error).
        single_default_value: accepted for API compatibility; a callable's result is always
            broadcast to the spec's shape.
        call_before_env_reset: accepted for API compatibility (entries are filled after the base
            env's reset).
        **kwargs: more primers, ``name=spec``.

    Examples:
        >>> import torch
        >>> from torchrl.data import Unbounded
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import TensorDictPrimer, TransformedEnv
        >>> env = TransformedEnv(
        ...     PendulumEnv(batch_size=[4], seed=0), TensorDictPrimer(hidden=Unbounded(shape=(2, 8)))
        ... )
        >>> env.observation_spec["hidden"].shape, env.state_spec["hidden"].shape
        (torch.Size([4, 2, 8]), torch.Size([4, 2, 8]))
        >>> env.reset()["hidden"].abs().sum()
        tensor(0.)
        >>> check_env_specs(env)
    """

    def __init__(
        self,
        primers: Composite | Mapping[NestedKey, TensorSpec] | None = None,
        random: bool | None = None,
        default_value: float
        | Callable[[], torch.Tensor]
        | Mapping[NestedKey, float | Callable[[], torch.Tensor]]
        | None = None,
        reset_key: NestedKey | None = None,
        expand_specs: bool | None = None,
        single_default_value: bool = False,
        call_before_env_reset: bool = False,
        **kwargs: TensorSpec,
    ) -> None:
        entries: dict[NestedKey, TensorSpec] = {}
        if primers is not None:
            items = (
                primers.items(include_nested=True, leaves_only=True)
                if isinstance(primers, Composite)
                else primers.items()
            )
            for key, spec in items:
                entries[unravel_key(key)] = spec
        for key, spec in kwargs.items():
            entries[key] = spec
        for key, spec in entries.items():
            if not isinstance(spec, TensorSpec) or isinstance(spec, Composite):
                raise TypeError(
                    f"TensorDictPrimer: the primer for {key!r} must be a leaf TensorSpec, "
                    f"got {spec!r}"
                )
        if random and default_value is not None:
            raise ValueError("TensorDictPrimer: give either random=True or a default_value")
        keys = list(entries)
        super().__init__(in_keys=[], out_keys=[])
        self._primer_keys = keys
        self._raw_specs = entries
        self._specs: dict[NestedKey, TensorSpec] = dict(entries)
        # One env's worth of each primer (the env's batch dims indexed away).
        self._features: dict[NestedKey, TensorSpec] = {}
        self.random = bool(random)
        if isinstance(default_value, Mapping):
            defaults = {unravel_key(k): v for k, v in default_value.items()}
            unknown = set(defaults) - set(keys)
            if unknown:
                raise KeyError(
                    f"TensorDictPrimer: default_value for unknown keys {sorted(map(str, unknown))}"
                )
            self._defaults = {k: defaults.get(k, 0.0) for k in keys}
        else:
            fill = 0.0 if default_value is None else default_value
            self._defaults = {k: fill for k in keys}
        self.reset_key = RESET if reset_key is None else unravel_key(reset_key)
        self.expand_specs = expand_specs
        self.single_default_value = single_default_value
        self.call_before_env_reset = call_before_env_reset

    @property
    def primers(self) -> Composite:
        """The primed specs (with the env's batch dims once the transform is in an env)."""
        return Composite(dict(self._specs))

    def _update_pairs(self) -> None:
        # The primed entries are written at reset, not computed from input keys.
        self._pairs = []
        self._inv_pairs = []

    @property
    def out_keys(self) -> list[NestedKey]:  # type: ignore[override]
        """The primed keys."""
        return list(getattr(self, "_primer_keys", []))

    @out_keys.setter
    def out_keys(self, value: NestedKey | Sequence[NestedKey] | None) -> None:
        raise AttributeError("TensorDictPrimer.out_keys are the keys of its primers")

    def _fill(
        self, key: NestedKey, spec: TensorSpec, lead: torch.Size, device: DeviceLike
    ) -> torch.Tensor:
        if self.random:
            value = spec.rand(lead)
        else:
            default = self._defaults[key]
            shape = (*lead, *spec.shape)
            if callable(default):
                value = torch.as_tensor(default()).to(spec.dtype).expand(shape).clone()
            else:
                value = torch.full(shape, default, dtype=spec.dtype, device=spec.device)
        if device is not None and value.device != torch.device(device):
            value = value.to(device)
        return value

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        batch_ndim = tensordict_reset.batch_dims
        lead = tensordict_reset.batch_size
        mask = get(tensordict, self.reset_key)
        device = tensordict_reset.device
        for key in self._primer_keys:
            feature = self._features.get(key)
            if feature is None:
                fill = self._fill(key, self._raw_specs[key], lead, device)
            else:
                fill = self._fill(key, feature, lead, device)
            value = where_reset(mask, fill, get(tensordict, key), batch_ndim)
            set_(tensordict_reset, key, value)
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key in self._primer_keys:
            if get(next_tensordict, key) is None:
                # A policy that updates the state (an RNN) wrote ("next", key) before the step:
                # that value is the next state. Otherwise the current one is carried over.
                nested = (NEXT, key) if isinstance(key, str) else (NEXT, *key)
                value = get(tensordict, nested)
                if value is None:
                    value = get(tensordict, key)
                if value is None:
                    raise _missing_state(self, key, tensordict)
                set_(next_tensordict, key, value)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for key in self._primer_keys:
            if get(tensordict, key) is None:
                raw = self._features.get(key, self._raw_specs[key])
                set_(
                    tensordict, key, self._fill(key, raw, tensordict.batch_size, tensordict.device)
                )
        return tensordict

    def _expanded(self, spec: TensorSpec, batch: torch.Size, key: NestedKey) -> TensorSpec:
        n = len(batch)
        starts = tuple(spec.shape[:n]) == tuple(batch)
        if self.expand_specs is True or (self.expand_specs is None and not starts):
            return spec.expand(*batch, *spec.shape)
        if not starts:
            raise ValueError(
                f"TensorDictPrimer: the spec of {key!r} has shape {tuple(spec.shape)}, which does "
                f"not start with the env's batch size {tuple(batch)} (expand_specs=False)"
            )
        return spec

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        batch = observation_spec.shape
        device = observation_spec.device
        for key in self._primer_keys:
            spec = self._expanded(self._raw_specs[key], batch, key)
            if device is not None:
                spec = spec.to(device)
            self._specs[key] = spec
            self._features[key] = feature_spec(spec, len(batch))
            observation_spec[key] = spec
        return observation_spec

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        for key in self._primer_keys:
            state_spec[key] = self._specs[key].clone()
        return state_spec

    def extra_repr(self) -> str:
        return f"primers={[str(k) for k in self._primer_keys]}, random={self.random}"


class TrajCounter(Transform):
    """Gives each trajectory a number: 0 for the first reset, then 1, 2, ... for each new one.

    The number is written at reset (one per sub-env being reset, in order) and carried across
    steps. It follows the done group of ``out_key``'s prefix (``("agents", "traj_count")``
    follows ``("agents", "done")``) and has the shape of its done flag. The count lives in the
    transform: copies of it (one per worker process) count separately.

    Args:
        out_key: where to write the trajectory number (default ``"traj_count"``).

    Examples:
        >>> from torchrl.envs import PendulumEnv, check_env_specs
        >>> from torchrl.envs.transforms import StepCounter, TrajCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), StepCounter(max_steps=2))
        >>> env = env.append_transform(TrajCounter())
        >>> env.rollout(6, break_when_any_done=False)["next", "traj_count"].squeeze(-1)
        tensor([0, 0, 1, 1, 2, 2])
        >>> check_env_specs(env)
    """

    def __init__(self, out_key: NestedKey = "traj_count") -> None:
        super().__init__()
        self.out_key = unravel_key(out_key)
        self._prefix = key_prefix(self.out_key)
        self._done_key = with_prefix(self._prefix, DONE)
        self._reset_key = with_prefix(self._prefix, RESET)
        self._shape = torch.Size([1])
        self.count = 0

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        done = get(tensordict_reset, self._done_key)
        shape = done.shape if done is not None else self._shape
        device = tensordict_reset.device
        group_ndim = node_ndim(tensordict_reset, self._prefix)
        mask = get(tensordict, self._reset_key)
        previous = get(tensordict, self.out_key)
        batch_shape = shape[:group_ndim]
        if mask is None or previous is None or previous.shape != shape:
            chosen = torch.ones(batch_shape, dtype=torch.bool, device=device)
        else:
            if mask.ndim > group_ndim:
                mask = mask.reshape(*mask.shape[:group_ndim], -1).any(-1)
            chosen = mask.expand(batch_shape)
        n = int(chosen.sum())
        ids = torch.zeros(batch_shape, dtype=torch.int64, device=device)
        ids[chosen] = torch.arange(self.count, self.count + n, dtype=torch.int64, device=device)
        self.count += n
        fill = expand_right(ids, len(shape)).expand(shape)
        if previous is not None and previous.shape == shape:
            fill = torch.where(expand_right(chosen, len(shape)), fill, previous)
        set_(tensordict_reset, self.out_key, fill.clone())
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        value = get(tensordict, self.out_key)
        if value is None:
            raise _missing_state(self, self.out_key, tensordict)
        set_(next_tensordict, self.out_key, value)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("TrajCounter counts env resets; use it in an env")

    def _spec(self, device: DeviceLike) -> TensorSpec:
        return UnboundedDiscrete(shape=self._shape, dtype=torch.int64, device=device)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        done_spec = output_spec["full_done_spec"]
        shapes = dict(done_groups(done_spec))
        if self._prefix not in shapes:
            raise KeyError(
                f"TrajCounter: no done flag under {self._prefix!r} to follow (done groups: "
                f"{list(shapes)})"
            )
        self._shape = shapes[self._prefix]
        obs_spec = output_spec["full_observation_spec"]
        obs_spec[self.out_key] = self._spec(done_spec.device)
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        state_spec = input_spec["full_state_spec"]
        state_spec[self.out_key] = self._spec(state_spec.device)
        return input_spec

    def extra_repr(self) -> str:
        return f"out_key={self.out_key!r}, count={self.count}"
