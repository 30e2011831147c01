"""MuJoCo Playground (MJX, JAX) environments behind the torchrl env contract.

A playground env (``mujoco_playground.MjxEnv``) is a pair of pure JAX functions,
``reset(key) -> State`` and ``step(State, action) -> State``. :class:`MujocoPlaygroundWrapper`
``vmap``s and ``jit``s them over the flattened batch (with the machinery of
:class:`~torchrl.envs.libs.jax_utils.JaxStateEnv` it shares with the jumanji and gymnax
wrappers) and carries the whole ``State`` pytree in the TensorDict under ``"mjx_state"``, one
entry per leaf (``("mjx_state", "data", "qpos")``, ``("mjx_state", "info", "rng")``). A step is
therefore a pure function of its input: partial resets (``"_reset"``) and ``"_step"`` masks
touch only their sub-envs, and ``SerialEnv``/``ParallelEnv`` workers hand the state around.

Conventions:

* Observations: a flat observation goes under ``"observation"``; a dict observation (the
  locomotion tasks: ``{"state": ..., "privileged_state": ...}``) puts each key at the root
  (which is why the simulator state is ``"mjx_state"``, not ``"state"``). float32, unbounded.
* Actions: float32 in ``[-1, 1]``, ``[*B, env.action_size]``.
* Done flags: playground's ``done`` (a float) is ``done`` and ``terminated``; the raw envs have no
  time limit (playground's training wrappers add it), so ``truncated`` stays ``False``: add a
  :class:`~torchrl.envs.transforms.StepCounter` with ``max_steps=config.episode_length``.
* Multi-agent: an :class:`MujocoPlaygroundAgentMapping` splits the observation and action
  vectors among named agents (``(name, "observation")``, ``(name, "action")``,
  ``(name, "reward")``, the shared reward), with the done flags at the root.
* Backends: ``config.impl`` picks MJX's pure-JAX pipeline (``"jax"``: ~20 s to compile here,
  fast steps) or MuJoCo Warp (``"warp"``, playground's default for the DM Control Suite:
  compiles in seconds, but Warp's CPU kernels step ~30x slower than JAX on CPU).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, OBSERVATION, REWARD, TERMINATED, TRUNCATED
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Bounded, Composite, Unbounded
from torchrl.envs.batched import ParallelEnv
from torchrl.envs.libs.gym import ClassProperty
from torchrl.envs.libs.jax_utils import JaxStateEnv, leaf_spec, tree_layout, tree_spec

__all__ = [
    "KNOWN_MARL_MAPPINGS",
    "MujocoPlaygroundAgentMapping",
    "MujocoPlaygroundAgentSpec",
    "MujocoPlaygroundEnv",
    "MujocoPlaygroundWrapper",
]

_has_mujoco_playground = has_module("mujoco_playground")

MJX_STATE = "mjx_state"
_RESERVED = {MJX_STATE, ACTION, REWARD, DONE, TERMINATED, TRUNCATED, "next", "_reset", "_step"}


def _playground() -> Any:
    import_optional("jax", extra="mujoco_playground")
    return import_optional("mujoco_playground", extra="mujoco_playground")


@dataclass(frozen=True)
class MujocoPlaygroundAgentSpec:
    """One agent of a cooperative split of a playground env: its observation and action slices.

    Args:
        name: the agent's group key in the TensorDicts (``"agent_0"``).
        action_indices: the entries of the env's action vector this agent drives. Across the
            agents of a mapping they are disjoint and cover ``range(env.action_size)``.
        observation_indices: the entries of the observation it sees: a list for a flat
            observation, or ``{obs_key: [indices]}`` for a dict observation (the selected
            entries of each key, concatenated in the dict's order).

    Examples:
        >>> from torchrl.envs.libs.mujoco_playground import MujocoPlaygroundAgentSpec
        >>> spec = MujocoPlaygroundAgentSpec("leg", action_indices=[0, 1], observation_indices=[0, 2])
        >>> spec.name, len(spec.action_indices)
        ('leg', 2)
    """

    name: str
    action_indices: list[int]
    observation_indices: list[int] | dict[str, list[int]]


@dataclass(frozen=True)
class MujocoPlaygroundAgentMapping:
    """How :class:`MujocoPlaygroundWrapper` splits a single-agent env into cooperating agents.

    Every agent reads its observation slice and writes its action slice; the reward and the done
    flags are shared.

    Args:
        agents: one :class:`MujocoPlaygroundAgentSpec` per agent.
        homogenization_mode: how the per-agent shapes are made equal, for one shared policy:

            * ``"none"``: each agent gets exactly its slices (sizes may differ).
            * ``"max"``: observation ``[one-hot agent id (n_agents) | own slice | zeros]`` of
              size ``n_agents + max slice size``; action of size ``max action slice``, of which
              the first ``len(action_indices)`` entries are used.
            * ``"concat"``: observation of the env's full size, the agent's entries in place and
              zeros elsewhere; action of the env's full size, of which only the agent's own
              entries are used.

    Examples:
        >>> from torchrl.envs.libs.mujoco_playground import (
        ...     MujocoPlaygroundAgentMapping, MujocoPlaygroundAgentSpec)
        >>> mapping = MujocoPlaygroundAgentMapping(
        ...     [MujocoPlaygroundAgentSpec("a", [0], [0, 1]),
        ...      MujocoPlaygroundAgentSpec("b", [1], [1, 2])],
        ...     homogenization_mode="max")
        >>> [agent.name for agent in mapping.agents]
        ['a', 'b']
    """

    agents: list[MujocoPlaygroundAgentSpec] = field(default_factory=list)
    homogenization_mode: Literal["none", "max", "concat"] = "none"

    def validate(self, action_size: int, observation_size: int | dict[str, Any]) -> None:
        """Checks the mapping against an env's action and observation sizes.

        Args:
            action_size: the env's action size.
            observation_size: its flat observation size, or ``{key: shape}`` for a dict.

        Raises:
            ValueError: naming the agent and the index at fault.

        Examples:
            >>> from torchrl.envs.libs.mujoco_playground import (
            ...     MujocoPlaygroundAgentMapping, MujocoPlaygroundAgentSpec)
            >>> mapping = MujocoPlaygroundAgentMapping([MujocoPlaygroundAgentSpec("a", [0], [0])])
            >>> mapping.validate(action_size=2, observation_size=3)
            Traceback (most recent call last):
            ...
            ValueError: MujocoPlaygroundAgentMapping: the agents' action_indices must cover range(2) exactly once; missing [1], repeated []
        """
        if not self.agents:
            raise ValueError("MujocoPlaygroundAgentMapping: agents is empty")
        if self.homogenization_mode not in ("none", "max", "concat"):
            raise ValueError(
                "MujocoPlaygroundAgentMapping: homogenization_mode must be 'none', 'max' or "
                f"'concat', got {self.homogenization_mode!r}"
            )
        names = [agent.name for agent in self.agents]
        if len(set(names)) != len(names) or set(names) & _RESERVED:
            raise ValueError(
                f"MujocoPlaygroundAgentMapping: agent names must be unique and not reserved "
                f"keys ({sorted(_RESERVED)}), got {names}"
            )
        used = [i for agent in self.agents for i in agent.action_indices]
        if sorted(used) != list(range(action_size)):
            missing = sorted(set(range(action_size)) - set(used))
            repeated = sorted({i for i in used if used.count(i) > 1 or not 0 <= i < action_size})
            raise ValueError(
                f"MujocoPlaygroundAgentMapping: the agents' action_indices must cover "
                f"range({action_size}) exactly once; missing {missing}, repeated {repeated}"
            )
        for agent in self.agents:
            if isinstance(observation_size, dict):
                if not isinstance(agent.observation_indices, dict):
                    raise ValueError(
                        f"MujocoPlaygroundAgentMapping: agent {agent.name!r}: the env's "
                        f"observation is a dict ({sorted(observation_size)}), so "
                        "observation_indices must be {key: [indices]}, got a list"
                    )
                if self.homogenization_mode != "none":
                    raise ValueError(
                        f"MujocoPlaygroundAgentMapping: homogenization_mode="
                        f"{self.homogenization_mode!r} needs a flat observation; this env's is a "
                        "dict: use 'none'"
                    )
                for key, indices in agent.observation_indices.items():
                    if key not in observation_size:
                        raise ValueError(
                            f"MujocoPlaygroundAgentMapping: agent {agent.name!r}: no observation "
                            f"key {key!r}; the env has {sorted(observation_size)}"
                        )
                    size = int(np.prod(observation_size[key]))
                    _check_range(agent.name, indices, size, f"observation {key!r}")
            else:
                if isinstance(agent.observation_indices, dict):
                    raise ValueError(
                        f"MujocoPlaygroundAgentMapping: agent {agent.name!r}: the env's "
                        "observation is flat, so observation_indices must be a list, got a dict"
                    )
                _check_range(agent.name, agent.observation_indices, observation_size, "observation")


def _check_range(name: str, indices: Sequence[int], size: int, what: str) -> None:
    bad = [i for i in indices if not 0 <= i < size]
    if bad:
        raise ValueError(
            f"MujocoPlaygroundAgentMapping: agent {name!r}: {what} indices {bad} are outside "
            f"[0, {size})"
        )


def _agents(groups: Sequence[tuple[Sequence[int], Sequence[int]]]) -> MujocoPlaygroundAgentMapping:
    return MujocoPlaygroundAgentMapping(
        [
            MujocoPlaygroundAgentSpec(f"agent_{i}", list(act), list(obs))
            for i, (act, obs) in enumerate(groups)
        ]
    )


# Splits of playground's own DM Control Suite walkers (mujoco_playground 0.2.0 layouts, read from
# the models: observation = [body orientations or positions | joint velocities ...]). Each agent
# drives one limb and sees the shared torso entries plus its limb's joints. They are written for
# playground's envs, not for Brax's, so TorchRL's names for Brax layouts (ant_4x2, hopper_3x1,
# humanoid_9|8) have no entry here: playground 0.2.0 has no Ant, and its Hopper and Humanoid
# have other actuators.
KNOWN_MARL_MAPPINGS: dict[str, MujocoPlaygroundAgentMapping] = {
    # CheetahRun: obs = qpos[1:] (8: rootz, rooty, bthigh, bshin, bfoot, fthigh, fshin, ffoot)
    # + qvel (9: rootx, rootz, rooty, then the six joints); one agent per joint
    "halfcheetah_6x1": _agents([([j], [0, 1, 2 + j, 8, 9, 10, 11 + j]) for j in range(6)]),
    # WalkerWalk: obs = orientations (14: xx, xz of torso + 6 limbs) + height (1) + qvel (9:
    # rootz, rootx, rooty, right hip/knee/ankle, left hip/knee/ankle); one agent per leg
    "walker2d_2x3": _agents(
        [
            ([0, 1, 2], [0, 1, 2, 3, 4, 5, 6, 7, 14, 15, 16, 17, 18, 19, 20]),
            ([3, 4, 5], [0, 1, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 21, 22, 23]),
        ]
    ),
}
# the playground env each known mapping is written for
_MAPPING_ENVS = {"halfcheetah_6x1": "CheetahRun", "walker2d_2x3": "WalkerWalk"}


def _resolve_mapping(
    mapping: MujocoPlaygroundAgentMapping | str | None,
) -> MujocoPlaygroundAgentMapping | None:
    if mapping is None or isinstance(mapping, MujocoPlaygroundAgentMapping):
        return mapping
    if isinstance(mapping, str):
        if mapping not in KNOWN_MARL_MAPPINGS:
            raise ValueError(
                f"MujocoPlaygroundWrapper: agent_mapping {mapping!r} is not a known mapping; "
                f"known: {sorted(KNOWN_MARL_MAPPINGS)} (or pass a MujocoPlaygroundAgentMapping)"
            )
        return KNOWN_MARL_MAPPINGS[mapping]
    raise TypeError(
        "MujocoPlaygroundWrapper: agent_mapping must be a MujocoPlaygroundAgentMapping, the name "
        f"of a known one or None, got {type(mapping).__name__}"
    )


class MujocoPlaygroundWrapper(JaxStateEnv):
    """Wraps a MuJoCo Playground env (an ``MjxEnv``) behind the torchrl env contract, vmapped.

    Entries: ``"observation"`` (or the keys of a dict observation), ``"action"`` in ``[-1, 1]``,
    ``"reward"`` ``[*B, 1]``, the done flags and the simulator state under ``"mjx_state"``; with
    an ``agent_mapping``, per-agent ``(name, "observation" / "action" / "reward")`` instead. See
    the module docstring for the conventions.

    Args:
        env: a playground env (``mujoco_playground.registry.load(...)``), without playground's
            training wrappers (the wrapper batches and resets by itself).
        agent_mapping: a :class:`MujocoPlaygroundAgentMapping`, or the name of one in
            :data:`KNOWN_MARL_MAPPINGS`, to split the env among cooperating agents.
        batch_size: the sub-envs simulated together (``vmap``); ``[]`` for one.
        jit: compile reset and step with ``jax.jit``; assignable later (``env.jit``).
        frame_skip: repeat each action this many times, summing rewards (an episode that ends
            midway stops there).
        from_pixels: not supported (``True`` raises).
        seed: the seed of the JAX key (default: drawn from torch's generator).
        device: where the tensors go (JAX computes on its default device; CPU here).
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: see :class:`~torchrl.envs.EnvBase`.

    Examples:
        >>> from mujoco_playground import registry  # doctest: +SKIP
        >>> from torchrl.envs.libs.mujoco_playground import MujocoPlaygroundWrapper
        >>> raw = registry.load("CartpoleBalance", config_overrides={"impl": "jax"})  # doctest: +SKIP
        >>> env = MujocoPlaygroundWrapper(raw, batch_size=[4], seed=0)  # doctest: +SKIP
        >>> td = env.rollout(3)  # the first reset and step compile: seconds  # doctest: +SKIP
        >>> td["next", "observation"].shape, td["next", "mjx_state", "data", "qpos"].shape  # doctest: +SKIP
        (torch.Size([4, 3, 5]), torch.Size([4, 3, 2]))
    """

    def __init__(
        self,
        env: Any = None,
        agent_mapping: MujocoPlaygroundAgentMapping | str | None = None,
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
        playground = _playground()
        if not isinstance(env, playground.MjxEnv):
            raise TypeError(
                f"{type(self).__name__}: env must be a mujoco_playground MjxEnv "
                f"(mujoco_playground.registry.load(...)), got {type(env).__name__}"
            )
        if from_pixels:
            raise NotImplementedError(
                f"{type(self).__name__}: from_pixels=True is not supported; playground's vision "
                "tasks (config vision=True) need the Madrona/Warp batch renderer on a GPU"
            )
        super().__init__(
            env,
            False,
            batch_size=batch_size,
            jit=jit,
            frame_skip=frame_skip,
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self.agent_mapping = _resolve_mapping(agent_mapping)
        if self.agent_mapping is not None:
            self.agent_mapping.validate(env.action_size, env.observation_size)
        self._build(seed)

    # ---------------------------------------------------------------------------- jax functions
    def _one_reset(self, key: Any) -> tuple[Any]:
        return (self._env.reset(key),)

    def _one_step(self, carried: list[Any], action: Any) -> tuple[Any]:
        import jax
        import jax.numpy as jnp

        state = self._full_state(carried)
        new = self._env.step(state, action)
        reward = new.reward
        for _ in range(self.frame_skip - 1):
            done = new.done != 0
            nxt = self._env.step(new, action)
            reward = reward + jnp.where(done, 0.0, nxt.reward)
            new = jax.tree_util.tree_map(lambda a, b, d=done: jnp.where(d, a, b), new, nxt)
        return (new.replace(reward=reward),)

    def _full_state(self, carried: list[Any]) -> Any:
        """The playground ``State`` from its carried leaves (the empty leaves are rebuilt)."""
        import jax
        import jax.numpy as jnp

        leaves: list[Any] = [jnp.zeros(shape, dtype) for shape, dtype in self._all_shapes]
        for i, leaf in zip(self._carried_idx, carried):
            leaves[i] = leaf
        return jax.tree_util.tree_unflatten(self._full_treedef, leaves)

    def _observations(self, obs: Any) -> list[Any]:
        """The observation arrays handed to torch, in the order of ``_obs_keys``."""
        import jax
        import jax.numpy as jnp

        mapping = self.agent_mapping
        if mapping is None:
            return jax.tree_util.tree_leaves(obs)
        out = []
        n_agents = len(mapping.agents)
        for i, agent in enumerate(mapping.agents):
            if isinstance(agent.observation_indices, dict):
                lead = () if self._n is None else (self._n,)
                parts = [
                    obs[key].reshape(*lead, -1)[..., jnp.asarray(idx, dtype=jnp.int32)]
                    for key, idx in agent.observation_indices.items()
                ]
                out.append(jnp.concatenate(parts, axis=-1))
                continue
            idx = jnp.asarray(agent.observation_indices, dtype=jnp.int32)
            own = obs[..., idx]
            lead = own.shape[:-1]
            if mapping.homogenization_mode == "max":
                one_hot = jnp.broadcast_to(
                    jax.nn.one_hot(i, n_agents, dtype=own.dtype), (*lead, n_agents)
                )
                pad = jnp.zeros(
                    (*lead, self._agent_obs_sizes[i] - n_agents - own.shape[-1]), own.dtype
                )
                out.append(jnp.concatenate([one_hot, own, pad], axis=-1))
            elif mapping.homogenization_mode == "concat":
                out.append(jnp.zeros_like(obs).at[..., idx].set(own))
            else:
                out.append(own)
        return out

    def _outputs(self, state: Any) -> list[Any]:
        import jax
        import jax.numpy as jnp

        lead = () if self._n is None else (self._n,)
        done = (state.done != 0).reshape(*lead, 1)
        reward = state.reward.astype(jnp.float32).reshape(*lead, 1)
        rewards = [reward] * (1 if self.agent_mapping is None else len(self.agent_mapping.agents))
        return [
            *[jax.tree_util.tree_leaves(state)[i] for i in self._carried_idx],
            *self._observations(state.obs),
            *rewards,
            done,
            done,
            jnp.zeros_like(done),
        ]

    # ---------------------------------------------------------------------------- layout, specs
    def _layout(self) -> None:
        import jax

        state = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0))
        self._full_treedef = jax.tree_util.tree_structure(state)
        keys, self._all_shapes = tree_layout(state)
        if self._n is not None:
            self._check_batched_state(state, keys)
        # zero-size leaves (``act`` of an env without activations, ...) stay out of the
        # TensorDict: _full_state rebuilds them, so the step function takes the carried list
        self._carried_idx = [i for i, (shape, _) in enumerate(self._all_shapes) if np.prod(shape)]
        self._state_keys = [keys[i] for i in self._carried_idx]
        self._state_shapes = [self._all_shapes[i] for i in self._carried_idx]
        self._state_treedef = jax.tree_util.tree_structure([0] * len(self._carried_idx))
        mapping = self.agent_mapping
        if mapping is None:
            self._set_observation_layout(state.obs, _RESERVED)
            self._reward_keys: list[Any] = [REWARD]
            return
        n_agents = len(mapping.agents)
        flat = 0 if isinstance(state.obs, dict) else int(np.prod(state.obs.shape))
        sizes = []
        for agent in mapping.agents:
            own = (
                sum(len(v) for v in agent.observation_indices.values())
                if isinstance(agent.observation_indices, dict)
                else len(agent.observation_indices)
            )
            sizes.append(own)
        if mapping.homogenization_mode == "max":
            sizes = [n_agents + max(sizes)] * n_agents
        elif mapping.homogenization_mode == "concat":
            sizes = [flat] * n_agents
        self._agent_obs_sizes = sizes
        self._obs_keys = [(agent.name, OBSERVATION) for agent in mapping.agents]
        self._obs_shapes = [((size,), np.float32) for size in sizes]
        self._reward_keys = [(agent.name, REWARD) for agent in mapping.agents]

    def _check_batched_state(self, state: Any, keys: list[tuple[str, ...]]) -> None:
        """Raises if ``vmap`` leaves some state leaves unbatched (MuJoCo Warp's shared buffers)."""
        import jax

        n = int(self._n or 1)
        batched = jax.eval_shape(
            jax.vmap(self._env.reset), jax.random.split(jax.random.PRNGKey(0), n)
        )
        shared = [
            "/".join(key)
            for key, one, many in zip(
                keys,
                jax.tree_util.tree_leaves(state),
                jax.tree_util.tree_leaves(batched),
            )
            if tuple(many.shape) != (n, *one.shape)
        ]
        if shared:
            raise ValueError(
                f"{type(self).__name__}: batch_size={list(self.batch_size)} needs a state with one "
                f"slice per sub-env, but under vmap {len(shared)} leaves of this env's state are "
                f"shared by the whole batch (e.g. {shared[:3]}): MuJoCo Warp's contact buffers. "
                "Build the env with config_overrides={'impl': 'jax'} (MJX's JAX pipeline), or "
                "use batch_size=[] inside a SerialEnv/ParallelEnv"
            )

    def _output_keys(self) -> list[Any]:
        self._reward_set = set(self._reward_keys)
        keys: list[Any] = [(MJX_STATE, *k) for k in self._state_keys]
        return [*keys, *self._data_keys(), *self._reward_keys, DONE, TERMINATED, TRUNCATED]

    def _make_specs(self) -> None:
        batch, device = self.batch_size, self.device
        obs = Composite(shape=batch, device=device)
        for key, (shape, dtype) in zip(self._obs_keys, self._obs_shapes):
            obs[key] = leaf_spec(shape, dtype, batch, device)
        obs[MJX_STATE] = tree_spec(self._state_keys, self._state_shapes, batch, device)
        self.observation_spec = obs
        # the state is also an input of the next step (batched envs hand it to their workers)
        self.state_spec = Composite({MJX_STATE: obs[MJX_STATE].clone()}, shape=batch, device=device)
        mapping = self.agent_mapping
        if mapping is None:
            self.action_spec = Bounded(
                -1.0, 1.0, shape=(*batch, self._env.action_size), dtype=torch.float32, device=device
            )
            self.reward_spec = Unbounded(shape=(*batch, 1), dtype=torch.float32, device=device)
            return
        sizes = {
            "none": [len(a.action_indices) for a in mapping.agents],
            "max": [max(len(a.action_indices) for a in mapping.agents)] * len(mapping.agents),
            "concat": [self._env.action_size] * len(mapping.agents),
        }[mapping.homogenization_mode]
        actions = Composite(shape=batch, device=device)
        rewards = Composite(shape=batch, device=device)
        for agent, size in zip(mapping.agents, sizes):
            actions[agent.name, ACTION] = Bounded(
                -1.0, 1.0, shape=(*batch, size), dtype=torch.float32, device=device
            )
            rewards[agent.name, REWARD] = Unbounded(
                shape=(*batch, 1), dtype=torch.float32, device=device
            )
        self.action_spec = actions
        self.reward_spec = rewards
        self._action_index = [
            torch.as_tensor(a.action_indices, dtype=torch.long) for a in mapping.agents
        ]

    # ---------------------------------------------------------------------------------- running
    def _global_action(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The env's action vector: the root ``"action"``, or the agents' slices put together."""
        mapping = self.agent_mapping
        if mapping is None:
            return tensordict.get(ACTION)
        out = torch.empty(
            (*self.batch_size, self._env.action_size), dtype=torch.float32, device=self.device
        )
        for agent, index in zip(mapping.agents, self._action_index):
            action = tensordict.get((agent.name, ACTION))
            if mapping.homogenization_mode == "concat":
                out[..., index] = action[..., index]
            else:
                out[..., index] = action[..., : len(index)]
        return out

    def _read(self, arrays: list[Any], with_reward: bool) -> TensorDictBase:
        # nested dicts first, one TensorDict at the end: ~70 entries per step
        data: dict[str, Any] = {}
        for key, array in zip(self._out_keys, arrays):
            if not with_reward and key in self._reward_set:
                continue
            path = key if isinstance(key, tuple) else (key,)
            node = data
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = self._to_torch(array)
        return TensorDict(data, batch_size=self.batch_size, device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        state = tensordict.get(MJX_STATE, None)
        if state is None:
            raise KeyError(
                f"{type(self).__name__}.step: the input has no {MJX_STATE!r} entry (the "
                "simulator state written by reset and carried to the next step by step_mdp)"
            )
        leaves = [self._to_jax(state.get(key)) for key in self._state_keys]
        action = self._to_jax(self._global_action(tensordict).to(torch.float32))
        return self._read(self._step_fn(leaves, action), with_reward=True)


def _available_envs(cls: type) -> list[str]:
    """Every env name of playground's registry (DM Control Suite, locomotion, manipulation)."""
    return list(_playground().registry.ALL_ENVS)


class MujocoPlaygroundEnv(MujocoPlaygroundWrapper):
    """Builds a MuJoCo Playground env by name (``registry.load``) and wraps it.

    See :class:`MujocoPlaygroundWrapper`. ``MujocoPlaygroundEnv.available_envs`` lists the names;
    the DM Control Suite ones (``"CartpoleBalance"``, ``"CheetahRun"``, ...) ship their models in
    the wheel, the locomotion and manipulation ones download ``mujoco_menagerie`` on first use.

    Args:
        env_name: a playground env name.
        config: the env's ``ConfigDict`` (default: playground's default config for the name).
        config_overrides: entries to change in it. Unless ``config`` or an ``"impl"`` entry
            says otherwise, ``"impl"`` is ``"jax"`` (MJX's JAX pipeline), not playground's
            ``"warp"``: Warp's state does not batch per sub-env (see the wrapper).
        agent_mapping: see :class:`MujocoPlaygroundWrapper`.
        num_workers: more than 1 returns a :class:`~torchrl.envs.ParallelEnv` of that many
            copies (one spawned process each: JAX does not survive a fork) instead.
        **kwargs: the keyword arguments of :class:`MujocoPlaygroundWrapper` (``batch_size``,
            ``jit``, ``frame_skip``, ``seed``, ``device``, ...).

    Examples:
        >>> from torchrl.envs.libs.mujoco_playground import MujocoPlaygroundEnv
        >>> env = MujocoPlaygroundEnv("CartpoleBalance", config_overrides={"impl": "jax"},
        ...                           batch_size=[2])  # doctest: +SKIP
        >>> env.rollout(2)["next", "reward"].shape  # doctest: +SKIP
        torch.Size([2, 2, 1])
        >>> "CheetahRun" in MujocoPlaygroundEnv.available_envs  # doctest: +SKIP
        True
    """

    available_envs = ClassProperty(_available_envs)

    def __new__(cls, *args: Any, num_workers: int | None = None, **kwargs: Any) -> Any:
        # a plain __new__: num_workers > 1 builds the ParallelEnv of single copies instead
        if num_workers is not None and int(num_workers) > 1:
            # spawn: JAX's runtime threads do not survive a fork
            make = functools.partial(cls, *args, **kwargs)
            return ParallelEnv(int(num_workers), make, mp_start_method="spawn")
        return super().__new__(cls)

    def __init__(
        self,
        env_name: str,
        config: Any = None,
        config_overrides: dict[str, Any] | None = None,
        agent_mapping: MujocoPlaygroundAgentMapping | str | None = None,
        *,
        num_workers: int | None = None,
        **kwargs: Any,
    ) -> None:
        registry = _playground().registry
        if env_name not in registry.ALL_ENVS:
            raise ValueError(
                f"MujocoPlaygroundEnv: playground has no env named {env_name!r}; see "
                "MujocoPlaygroundEnv.available_envs"
            )
        if isinstance(agent_mapping, str) and agent_mapping in KNOWN_MARL_MAPPINGS:
            expected = _MAPPING_ENVS[agent_mapping]
            if env_name != expected:
                raise ValueError(
                    f"MujocoPlaygroundEnv: agent_mapping {agent_mapping!r} is written for "
                    f"{expected!r}, not {env_name!r}"
                )
        if config is None and "impl" not in (config_overrides or {}):
            # MJX's JAX pipeline: its state batches under vmap (Warp's does not, see the
            # wrapper) and it steps ~30x faster than Warp's CPU kernels here
            config_overrides = {**(config_overrides or {}), "impl": "jax"}
        env = registry.load(env_name, config=config, config_overrides=config_overrides)
        super().__init__(env, agent_mapping, **kwargs)
        self.env_name = env_name
