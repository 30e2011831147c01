"""gymnax-style JAX environments (gymnax, Craftax) behind the torchrl env contract.

:class:`GymnaxWrapper` wraps an env with gymnax's functional API, ``reset(key, params) ->
(obs, state)`` and ``step_env(key, state, action, params) -> (obs, state, reward, done, info)``:
gymnax's own envs and Craftax's (which copy that API). Like :class:`~torchrl.envs.JumanjiWrapper`
it ``vmap``s and ``jit``s reset and step over the flattened batch, carries the state pytree in
the TensorDict under ``("state", "env", ...)`` with one JAX random key per sub-env under
``("state", "rng")`` (a step is a pure function of its input), and moves arrays through DLPack.

Conventions:

* A ``Box``/``Discrete`` observation goes under ``"observation"``; a ``Dict`` space maps its
  keys. ``Box`` -> ``Bounded`` (``Unbounded`` when a bound is infinite), ``Discrete`` ->
  ``OneHot`` actions (``Categorical`` with ``categorical_action_encoding=True``).
* Done flags: gymnax >= 1.0 separates ``terminated`` (from ``step_env``) from ``truncated``
  (``env.is_truncated``, the time limit). For Craftax, whose ``done`` includes its time limit,
  ``truncated`` is ``state.timestep >= params.max_timesteps``. Other envs: every end is a
  termination.
* Auto-reset is torchrl's (``"_reset"`` masks, partial resets); the env's own is not used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from torchrl._keys import ACTION, DONE, OBSERVATION, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Categorical, Composite, OneHot, TensorSpec
from torchrl.envs.libs.jax_utils import STATE, JaxStateEnv, leaf_spec, tree_layout, tree_spec

__all__ = ["GymnaxEnv", "GymnaxWrapper"]

_has_gymnax = has_module("gymnax")
_has_craftax = has_module("craftax")

_RESERVED = {STATE, ACTION, REWARD, DONE, TERMINATED, TRUNCATED, "next", "_reset"}


def _jax() -> Any:
    return import_optional("jax", extra="gymnax")


def _space_spec(
    space: Any, categorical: bool, batch: torch.Size, device: Any
) -> tuple[TensorSpec, int | None]:
    """The spec of a gymnax space, and its number of categories when it is ``Discrete``."""
    kind = type(space).__name__
    if kind == "Discrete":
        n = int(space.n)
        if categorical:
            return Categorical(n, shape=batch, device=device), n
        return OneHot(n, shape=(*batch, n), device=device), n
    if kind == "Box":
        low, high = np.asarray(space.low), np.asarray(space.high)
        return leaf_spec(tuple(space.shape), space.dtype, batch, device, low=low, high=high), None
    if kind in ("Dict", "Tuple"):
        items = (
            space.spaces.items()
            if kind == "Dict"
            else ((str(i), s) for i, s in enumerate(space.spaces))
        )
        spec = Composite(shape=batch, device=device)
        for name, sub in items:
            spec[str(name)] = _space_spec(sub, categorical, batch, device)[0]
        return spec, None
    raise TypeError(f"GymnaxWrapper: unsupported space {kind} ({space!r})")


class GymnaxWrapper(JaxStateEnv):
    """Wraps a gymnax-style env (gymnax, Craftax) behind the torchrl env contract, batched with ``vmap``.

    Entries: ``"observation"`` (or the keys of a ``Dict`` observation), ``"action"``,
    ``"reward"`` ``[*B, 1]``, the done flags, and the state under ``"state"``: the env's state
    pytree at ``("state", "env", ...)`` and each sub-env's random key at ``("state", "rng")``.

    Args:
        env: a gymnax ``Environment`` (``gymnax.make(name)[0]``) or a Craftax env made without
            auto-reset (``make_craftax_env_from_name(name, auto_reset=False)``).
        env_params: the env's parameters (default: ``env.default_params``).
        categorical_action_encoding: discrete actions as indices (``Categorical``) instead of
            one-hot vectors (``OneHot``).
        batch_size: the batch of sub-envs simulated together (``vmap``), e.g. ``[8]``; ``[]`` for
            one env.
        jit: compile reset and step with ``jax.jit``; can be flipped later (``env.jit = False``).
        frame_skip: repeat each action this many times, summing rewards; an episode that ends
            midway stops there.
        seed: the seed of the JAX key (default: drawn from torch's generator).
        device: where the tensors go (JAX computes on its default device; CPU here).
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).

    Examples:
        >>> import gymnax  # doctest: +SKIP
        >>> from torchrl.envs.libs.gymnax import GymnaxWrapper
        >>> raw, params = gymnax.make("CartPole-v1")  # doctest: +SKIP
        >>> env = GymnaxWrapper(raw, params, batch_size=[8], seed=0)  # doctest: +SKIP
        >>> env.rollout(4)["next", "observation"].shape  # compiles first: seconds  # doctest: +SKIP
        torch.Size([8, 4, 4])
    """

    def __init__(
        self,
        env: Any = None,
        env_params: Any = None,
        categorical_action_encoding: bool = False,
        *,
        batch_size: Sequence[int] | torch.Size | int | None = None,
        jit: bool = True,
        frame_skip: int = 1,
        seed: int | None = None,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        _jax()
        for method in ("reset", "step_env", "observation_space", "action_space"):
            if not callable(getattr(env, method, None)):
                raise TypeError(
                    f"{type(self).__name__}: env must have gymnax's API (reset, step_env, "
                    f"observation_space, action_space); {type(env).__name__} has no {method!r}"
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
        self.env_params = env.default_params if env_params is None else env_params
        self._build(seed)

    # ---------------------------------------------------------------------------- jax functions
    def _truncated(self, state: Any) -> Any:
        import jax.numpy as jnp

        params = self.env_params
        if callable(getattr(self._env, "is_truncated", None)):
            return jnp.asarray(self._env.is_truncated(state, params), bool)
        if hasattr(state, "timestep") and hasattr(params, "max_timesteps"):
            return state.timestep >= params.max_timesteps
        return jnp.asarray(False)

    def _one_reset(self, key: Any) -> tuple[Any, Any, Any]:
        import jax

        key, sub = jax.random.split(key)
        obs, state = self._env.reset(sub, self.env_params)
        false = jax.numpy.asarray(False)
        return {"env": state, "rng": key}, obs, (jax.numpy.float32(0), false, false)

    def _one_step(self, carried: Any, action: Any) -> tuple[Any, Any, Any]:
        import jax
        import jax.numpy as jnp

        if self._n_actions is not None and not self.categorical_action_encoding:
            action = jnp.argmax(action, axis=-1)
        action = action.astype(self._action_dtype)

        def one(carried: Any) -> tuple[Any, Any, Any, Any, Any]:
            key, sub = jax.random.split(carried["rng"])
            obs, state, reward, done, _ = self._env.step_env(
                sub, carried["env"], action, self.env_params
            )
            truncated = self._truncated(state)
            terminated = jnp.asarray(done, bool) & ~truncated
            return {"env": state, "rng": key}, obs, jnp.float32(reward), terminated, truncated

        carried, obs, reward, terminated, truncated = one(carried)
        for _ in range(self.frame_skip - 1):
            ended = terminated | truncated
            new = one(carried)

            def keep(n: Any, o: Any, ended: Any = ended) -> Any:
                return jnp.where(ended, o, n)

            carried = jax.tree_util.tree_map(keep, new[0], carried)
            obs = jax.tree_util.tree_map(keep, new[1], obs)
            reward = reward + jnp.where(ended, 0.0, new[2])
            terminated = jnp.where(ended, terminated, new[3])
            truncated = jnp.where(ended, truncated, new[4])
        return carried, obs, (reward, terminated, truncated)

    def _outputs(self, carried: Any, obs: Any, flags: Any) -> list[Any]:
        import jax

        reward, terminated, truncated = flags
        lead = () if self._n is None else (self._n,)
        terminated = terminated.reshape(*lead, 1)
        truncated = truncated.reshape(*lead, 1) & ~terminated
        return [
            *jax.tree_util.tree_leaves(carried),
            *jax.tree_util.tree_leaves(obs),
            reward.reshape(*lead, 1),
            terminated | truncated,
            terminated,
            truncated,
        ]

    def _layout(self) -> None:
        jax = _jax()
        space = self._env.action_space(self.env_params)
        self._n_actions = int(space.n) if type(space).__name__ == "Discrete" else None
        self._action_dtype = np.dtype(getattr(space, "dtype", np.int32))
        carried, obs, _ = jax.eval_shape(self._one_reset, jax.random.PRNGKey(0))
        self._state_treedef = jax.tree_util.tree_structure(carried)
        self._state_keys, self._state_shapes = tree_layout(carried)
        self._set_observation_layout(obs, _RESERVED)

    def _make_specs(self) -> None:
        batch, device = self.batch_size, self.device
        categorical = self.categorical_action_encoding
        obs_space = self._env.observation_space(self.env_params)
        space_spec, _ = _space_spec(obs_space, categorical, batch, device)
        obs = Composite(shape=batch, device=device)
        if self._obs_keys == [(OBSERVATION,)]:
            (shape, dtype) = self._obs_shapes[0]
            if isinstance(space_spec, Composite) or space_spec.shape != (*batch, *shape):
                space_spec = leaf_spec(shape, dtype, batch, device)
            elif space_spec.dtype != leaf_spec(shape, dtype, batch).dtype:
                # the space's dtype is not the array's (gymnax declares float32 for some int
                # observations): keep its bounds only when they fit
                space_spec = leaf_spec(shape, dtype, batch, device)
            obs[OBSERVATION] = space_spec
        else:
            for key, (shape, dtype) in zip(self._obs_keys, self._obs_shapes):
                sub = space_spec.get(key) if isinstance(space_spec, Composite) else None
                if sub is None or sub.shape != (*batch, *shape):
                    sub = leaf_spec(shape, dtype, batch, device)
                obs[key] = sub
        obs[STATE] = tree_spec(self._state_keys, self._state_shapes, batch, device)
        self.observation_spec = obs
        self.state_spec = Composite({STATE: obs[STATE].clone()}, shape=batch, device=device)
        action_space = self._env.action_space(self.env_params)
        self.action_spec = _space_spec(action_space, categorical, batch, device)[0]
        self.reward_spec = leaf_spec((1,), np.float32, batch, device)

    def _action_to_jax(self, action: torch.Tensor) -> torch.Tensor:
        if self.categorical_action_encoding or self._n_actions is None:
            return action.to(torch.float32 if self._action_dtype.kind == "f" else torch.int32)
        return action


def _make(env_name: str, **kwargs: Any) -> tuple[Any, Any]:
    """``(env, params)`` for a gymnax name, or a Craftax name (``"Craftax-..."``)."""
    if env_name.startswith("Craftax"):
        craftax_env = import_optional("craftax.craftax_env", extra="gymnax")
        try:
            env = craftax_env.make_craftax_env_from_name(env_name, auto_reset=False)
        except ValueError as err:
            raise ValueError(f"GymnaxEnv: craftax has no env named {env_name!r}") from err
        return env, env.default_params
    gymnax = import_optional("gymnax", extra="gymnax")
    if env_name not in gymnax.registered_envs:
        raise ValueError(
            f"GymnaxEnv: gymnax has no env named {env_name!r}; registered: "
            f"{sorted(gymnax.registered_envs)} (and Craftax-* names with craftax installed)"
        )
    return gymnax.make(env_name, **kwargs)


class GymnaxEnv(GymnaxWrapper):
    """Builds a gymnax env (``gymnax.make``) or a Craftax env by name and wraps it.

    See :class:`GymnaxWrapper`. Names starting with ``"Craftax"`` (``"Craftax-Classic-Symbolic-v1"``,
    ``"Craftax-Symbolic-v1"``, ...) are built with ``craftax`` without auto-reset.

    Args:
        env_name: a gymnax name (``"CartPole-v1"``, ``"Breakout-MinAtar"``, ...) or a Craftax one.
        categorical_action_encoding: see :class:`GymnaxWrapper`.
        env_params: the env's parameters (default: the env's defaults).
        batch_size: see :class:`GymnaxWrapper`.
        jit: see :class:`GymnaxWrapper`.
        frame_skip: see :class:`GymnaxWrapper`.
        seed: see :class:`GymnaxWrapper`.
        device: see :class:`GymnaxWrapper`.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: see :class:`~torchrl.envs.EnvBase`.
        **kwargs: passed to ``gymnax.make`` (the env's constructor).

    Examples:
        >>> from torchrl.envs.libs.gymnax import GymnaxEnv
        >>> env = GymnaxEnv("CartPole-v1", batch_size=[4], seed=0)  # doctest: +SKIP
        >>> env.rollout(3)["next", "reward"].shape  # doctest: +SKIP
        torch.Size([4, 3, 1])
    """

    def __init__(
        self,
        env_name: str,
        categorical_action_encoding: bool = False,
        *,
        env_params: Any = None,
        batch_size: Sequence[int] | torch.Size | int | None = None,
        jit: bool = True,
        frame_skip: int = 1,
        seed: int | None = None,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
        **kwargs: Any,
    ) -> None:
        env, params = _make(env_name, **kwargs)
        super().__init__(
            env,
            params if env_params is None else env_params,
            categorical_action_encoding,
            batch_size=batch_size,
            jit=jit,
            frame_skip=frame_skip,
            seed=seed,
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self.env_name = env_name
