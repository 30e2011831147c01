"""Jumanji (JAX) environments behind the torchrl env contract: :class:`JumanjiWrapper`, :class:`JumanjiEnv`.

A jumanji env is a pair of pure functions, ``reset(key) -> (state, timestep)`` and
``step(state, action) -> (state, timestep)``. The wrapper ``vmap``s them over the flattened
batch and ``jit``s them once (the first reset and the first step compile, a few seconds). The
state pytree travels in the TensorDict under ``"state"`` (one entry per leaf, named after its
path, e.g. ``("state", "head_position", "row")``), so a step is a pure function of its input:
partial resets and ``"_step"`` masks are ``torch.where`` merges of the leaves. Arrays cross
between JAX and torch through DLPack without copies (see :mod:`torchrl.envs.libs.jax_utils`).

Conventions:

* Observations: a named-tuple observation maps its fields to root entries (``"grid"``,
  ``"action_mask"``, ...), nested fields to nested entries; a plain array goes under
  ``"observation"``. Specs follow jumanji's (``BoundedArray`` -> ``Bounded``,
  ``DiscreteArray`` -> ``Categorical``, booleans -> ``Categorical(2, dtype=torch.bool)``).
  Non-empty ``timestep.extras`` go under ``"extras"``.
* Actions: ``DiscreteArray``/``MultiDiscreteArray`` are one-hot (``OneHot``/``MultiOneHot``)
  unless ``categorical_action_encoding=True`` (``Categorical``/``MultiCategorical``, int64).
* Done flags: ``done`` is ``step_type == LAST``; ``terminated`` when the discount is also 0,
  ``truncated`` otherwise (a time limit). The reward has a trailing dim of 1 when jumanji's is a
  scalar per env.
* Seeding: ``set_seed(s)`` makes the JAX key ``PRNGKey(s)``; every reset splits it, so the same
  seed gives the same episodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from torchrl._keys import ACTION, DONE, OBSERVATION, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import (
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    TensorSpec,
)
from torchrl.envs.libs.gym import ClassProperty
from torchrl.envs.libs.jax_utils import (
    STATE,
    JaxStateEnv,
    leaf_spec,
    torch_dtype_of_jax,
    tree_layout,
    tree_spec,
)

__all__ = ["JumanjiEnv", "JumanjiWrapper"]

_has_jumanji = has_module("jumanji")

EXTRAS = "extras"
_RESERVED = {STATE, EXTRAS, ACTION, REWARD, DONE, TERMINATED, TRUNCATED, "next", "_reset"}
_LAST = 2  # jumanji's StepType.LAST


def _jumanji() -> Any:
    import_optional("jax", extra="jumanji")
    return import_optional("jumanji", extra="jumanji")


def _spec_at(spec: Any, key: tuple[str, ...]) -> Any:
    """The jumanji spec of an observation leaf, following field names; ``None`` when unknown."""
    for part in key:
        spec = getattr(spec, part, None)
        if spec is None:
            return None
    return spec


def _leaf_from_jumanji(
    spec: Any, shape: tuple[int, ...], dtype: Any, batch: torch.Size, device: Any
) -> TensorSpec:
    """The torchrl spec of one observation array, from its jumanji spec when it has one."""
    jspecs = _jumanji().specs
    low: Any = None
    high: Any = None
    num_values: int | None = None
    if isinstance(spec, jspecs.DiscreteArray):
        num_values = int(spec.num_values)
    elif isinstance(spec, jspecs.MultiDiscreteArray):
        low, high = 0, np.asarray(spec.num_values) - 1
    elif isinstance(spec, jspecs.BoundedArray):
        low, high = np.asarray(spec.minimum), np.asarray(spec.maximum)
    try:
        return leaf_spec(shape, dtype, batch, device, low=low, high=high, num_values=num_values)
    except (ValueError, RuntimeError):
        # bounds that do not broadcast to the array (a spec that disagrees with the env)
        return leaf_spec(shape, dtype, batch, device)


class _ActionCodec:
    """Turns torchrl actions into jumanji actions (inside the jitted step) and builds the spec."""

    def __init__(self, spec: Any, categorical: bool, batch: torch.Size, device: Any) -> None:
        jspecs = _jumanji().specs
        self.shape = tuple(spec.shape)
        self.dtype = spec.dtype
        self.nvec: list[int] | None = None
        self.torch_dtype: torch.dtype | None = None  # cast the torch action to this first
        if isinstance(spec, jspecs.DiscreteArray):
            self.nvec = [int(spec.num_values)]
        elif isinstance(spec, jspecs.MultiDiscreteArray):
            self.nvec = [int(n) for n in np.asarray(spec.num_values).reshape(-1)]
        self.one_hot = self.nvec is not None and not categorical
        if self.nvec is None:
            low = high = None
            if isinstance(spec, jspecs.BoundedArray):
                low, high = np.asarray(spec.minimum), np.asarray(spec.maximum)
            self.spec = leaf_spec(self.shape, spec.dtype, batch, device, low=low, high=high)
        elif isinstance(spec, jspecs.DiscreteArray):
            if self.one_hot:
                self.spec = OneHot(self.nvec[0], shape=(*batch, self.nvec[0]), device=device)
            else:
                self.spec = Categorical(self.nvec[0], shape=batch, device=device)
                self.torch_dtype = torch_dtype_of_jax(spec.dtype)
        elif self.one_hot:
            self.spec = MultiOneHot(self.nvec, shape=(*batch, sum(self.nvec)), device=device)
        else:
            self.spec = MultiCategorical(
                torch.tensor(self.nvec), shape=(*batch, len(self.nvec)), device=device
            )
            self.torch_dtype = torch_dtype_of_jax(spec.dtype)

    def to_jax_input(self, action: torch.Tensor) -> torch.Tensor:
        return action if self.torch_dtype is None else action.to(self.torch_dtype)

    def decode(self, action: Any) -> Any:
        """One env's jumanji action from its torchrl action (a JAX function, traced once)."""
        import jax.numpy as jnp

        if not self.one_hot:
            return action.astype(self.dtype).reshape(self.shape)
        assert self.nvec is not None
        if len(self.nvec) == 1 and self.shape == ():
            return jnp.argmax(action, axis=-1).astype(self.dtype)
        parts, start = [], 0
        for n in self.nvec:
            parts.append(jnp.argmax(action[start : start + n], axis=-1))
            start += n
        return jnp.stack(parts).astype(self.dtype).reshape(self.shape)


class JumanjiWrapper(JaxStateEnv):
    """Wraps a jumanji ``Environment`` behind the torchrl env contract, batched with ``vmap``.

    Entries: the observation fields (root entries, nested as in jumanji; ``"action_mask"``
    where the env has one), ``"action"``, ``"reward"`` ``[*B, 1]``, the done flags, the jumanji
    state under ``"state"`` and non-empty extras under ``"extras"``. See the module docstring
    for the spec conventions.

    Args:
        env: a jumanji ``Environment`` (``jumanji.make(...)``), without jumanji's auto-reset or
            vmap wrappers (the wrapper batches and resets itself).
        categorical_action_encoding: discrete actions as indices (``Categorical``) instead of
            one-hot vectors (``OneHot``).
        batch_size: the batch of sub-envs simulated together (``vmap``), e.g. ``[8]``; ``[]`` for
            one env. Any shape works (the sub-envs are flattened for JAX).
        jit: compile reset and step with ``jax.jit`` (much faster after the first call); can be
            flipped later through the ``jit`` attribute.
        frame_skip: repeat each action this many times; rewards are summed and an episode that
            ends midway stops there.
        from_pixels: not supported (jumanji renders through matplotlib, outside JAX); ``True``
            raises.
        seed: the seed of the JAX key (default: drawn from torch's generator).
        device: where the tensors go (JAX computes on its default device; CPU here).
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).

    Examples:
        >>> import jumanji  # doctest: +SKIP
        >>> from torchrl.envs.libs.jumanji import JumanjiWrapper
        >>> base = jumanji.make("Snake-v1", num_rows=6, num_cols=6)  # doctest: +SKIP
        >>> env = JumanjiWrapper(base, batch_size=[4], seed=0)  # doctest: +SKIP
        >>> td = env.rollout(3)  # the first reset and step compile: seconds  # doctest: +SKIP
        >>> td["next", "grid"].shape, td["action_mask"].shape  # doctest: +SKIP
        (torch.Size([4, 3, 6, 6, 5]), torch.Size([4, 3, 4]))
    """

    def __init__(
        self,
        env: Any = None,
        categorical_action_encoding: bool = False,
        *,
        batch_size: Sequence[int] | torch.Size | int | None = None,
        jit: bool = True,
        frame_skip: int = 1,
        from_pixels: bool = False,
        seed: int | None = None,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        jumanji = _jumanji()
        if not isinstance(env, jumanji.env.Environment):
            raise TypeError(
                f"{type(self).__name__}: env must be a jumanji Environment (jumanji.make(...)), "
                f"got {type(env).__name__}"
            )
        if from_pixels:
            raise NotImplementedError(
                f"{type(self).__name__}: from_pixels=True is not supported: jumanji renders "
                "with matplotlib outside JAX, one env at a time; use the array observations"
            )
        super().__init__(
            env,
            categorical_action_encoding,
            batch_size=batch_size,
            jit=jit,
            frame_skip=frame_skip,
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self._action = _ActionCodec(
            env.action_spec, self.categorical_action_encoding, self.batch_size, self.device
        )
        self._build(seed)

    # ---------------------------------------------------------------------------- jax functions
    def _one_reset(self, key: Any) -> tuple[Any, Any]:
        state, timestep = self._env.reset(key)
        return state, timestep

    def _one_step(self, state: Any, action: Any) -> tuple[Any, Any]:
        import jax
        import jax.numpy as jnp

        action = self._action.decode(action)
        state, timestep = self._env.step(state, action)
        reward = timestep.reward
        for _ in range(self.frame_skip - 1):
            done = timestep.step_type == _LAST
            new_state, new_ts = self._env.step(state, action)

            def keep(new: Any, old: Any, done: Any = done) -> Any:
                return jnp.where(done, old, new)

            state = jax.tree_util.tree_map(keep, new_state, state)
            timestep = jax.tree_util.tree_map(keep, new_ts, timestep)
            reward = reward + jnp.where(done, jnp.zeros_like(new_ts.reward), new_ts.reward)
        return state, timestep.replace(reward=reward)

    def _outputs(self, state: Any, timestep: Any) -> list[Any]:
        """The flat list of arrays a reset or step hands to torch (see :meth:`_layout`)."""
        import jax
        import jax.numpy as jnp

        lead = () if self._n is None else (self._n,)
        done = (timestep.step_type == _LAST).reshape(*lead, 1)
        discount = timestep.discount.reshape(*lead, -1)
        terminated = done & jnp.all(discount == 0, axis=-1, keepdims=True)
        reward = timestep.reward
        if reward.ndim == len(lead):
            reward = reward[..., None]
        extras = timestep.extras if self._has_extras else {}
        return [
            *jax.tree_util.tree_leaves(state),
            *jax.tree_util.tree_leaves(timestep.observation),
            *jax.tree_util.tree_leaves(extras),
            reward.astype(jnp.float32) if self._float_reward else reward,
            done,
            terminated,
            done & ~terminated,
        ]

    def _layout(self) -> None:
        """Reads the shapes of state, observation and extras once (``jax.eval_shape``)."""
        import jax

        state, timestep = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0))
        _, step_ts = jax.eval_shape(self._env.step, state, self._env.action_spec.generate_value())
        self._state_treedef = jax.tree_util.tree_structure(state)
        same_extras: bool = jax.tree_util.tree_structure(  # type: ignore[operator]
            timestep.extras
        ) == jax.tree_util.tree_structure(step_ts.extras)
        self._has_extras = bool(jax.tree_util.tree_leaves(timestep.extras)) and same_extras
        self._float_reward = np.dtype(timestep.reward.dtype) != np.float32

        self._state_keys, self._state_shapes = tree_layout(state)
        self._set_observation_layout(timestep.observation, _RESERVED)
        self._extras_keys, self._extras_shapes = tree_layout(
            timestep.extras if self._has_extras else {}
        )
        self._reward_shape = tuple(timestep.reward.shape) or (1,)
        self._obs_jumanji_spec = self._env.observation_spec

    def _make_specs(self) -> None:
        batch, device = self.batch_size, self.device
        obs = Composite(shape=batch, device=device)
        for key, (shape, dtype) in zip(self._obs_keys, self._obs_shapes):
            if key == (OBSERVATION,):  # the observation is a single array
                jspec = self._obs_jumanji_spec
            else:
                jspec = _spec_at(self._obs_jumanji_spec, key)
            obs[key] = _leaf_from_jumanji(jspec, shape, dtype, batch, device)
        obs[STATE] = tree_spec(self._state_keys, self._state_shapes, batch, device)
        if self._has_extras:
            obs[EXTRAS] = tree_spec(self._extras_keys, self._extras_shapes, batch, device)
        self.observation_spec = obs
        # the state is also an input of the next step (batched envs hand it to their workers)
        self.state_spec = Composite({STATE: obs[STATE].clone()}, shape=batch, device=device)
        self.action_spec = self._action.spec
        self.reward_spec = leaf_spec(self._reward_shape, np.float32, batch, device)

    def _action_to_jax(self, action: torch.Tensor) -> torch.Tensor:
        return self._action.to_jax_input(action)

    def _data_keys(self) -> list[tuple[str, ...]]:
        keys = super()._data_keys()
        if self._has_extras:
            keys += [(EXTRAS, *k) for k in self._extras_keys]
        return keys


def _available_envs(cls: type) -> list[str]:
    """The names jumanji has registered, sorted."""
    return sorted(_jumanji().registered_environments())


class JumanjiEnv(JumanjiWrapper):
    """Builds a jumanji env by name (``jumanji.make``) and wraps it; see :class:`JumanjiWrapper`.

    ``JumanjiEnv.available_envs`` lists the registered names.

    Args:
        env_name: a registered jumanji env, e.g. ``"Snake-v1"``, ``"Game2048-v1"``, ``"Maze-v0"``
            (see ``available_envs``).
        categorical_action_encoding: see :class:`JumanjiWrapper`.
        batch_size: see :class:`JumanjiWrapper`.
        jit: see :class:`JumanjiWrapper`.
        frame_skip: see :class:`JumanjiWrapper`.
        from_pixels: see :class:`JumanjiWrapper` (not supported).
        seed: see :class:`JumanjiWrapper`.
        device: see :class:`JumanjiWrapper`.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: see :class:`~torchrl.envs.EnvBase`.
        **kwargs: passed to ``jumanji.make`` (the env's constructor), e.g. ``num_rows=6``.

    Examples:
        >>> from torchrl.envs.libs.jumanji import JumanjiEnv
        >>> env = JumanjiEnv("Snake-v1", num_rows=6, num_cols=6, batch_size=[2])  # doctest: +SKIP
        >>> env.rollout(2)["next", "reward"].shape  # doctest: +SKIP
        torch.Size([2, 2, 1])
        >>> "Snake-v1" in JumanjiEnv.available_envs  # doctest: +SKIP
        True
    """

    available_envs = ClassProperty(_available_envs)

    def __init__(
        self,
        env_name: str,
        categorical_action_encoding: bool = False,
        *,
        batch_size: Sequence[int] | torch.Size | int | None = None,
        jit: bool = True,
        frame_skip: int = 1,
        from_pixels: bool = False,
        seed: int | None = None,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
        **kwargs: Any,
    ) -> None:
        jumanji = _jumanji()
        if env_name not in jumanji.registered_environments():
            raise ValueError(
                f"JumanjiEnv: jumanji has no env named {env_name!r}; registered: "
                f"{sorted(jumanji.registered_environments())}"
            )
        env = jumanji.make(env_name, **kwargs)
        super().__init__(
            env,
            categorical_action_encoding,
            batch_size=batch_size,
            jit=jit,
            frame_skip=frame_skip,
            from_pixels=from_pixels,
            seed=seed,
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self.env_name = env_name
