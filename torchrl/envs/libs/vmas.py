"""VMAS (vectorized multi-agent simulator) behind the torchrl env contract.

VMAS simulates ``num_envs`` copies of a scenario at once in torch, so the wrapper is thin: it
stacks the per-agent tensors VMAS returns into one entry per group of agents (batch
``[num_envs, n_agents_in_group]``, DESIGN.md §2) and splits the group actions back into the
per-agent list VMAS takes. Specs are built once from the VMAS spaces (old ``gym`` spaces, mapped
through gymnasium's so that one space -> spec mapping serves every wrapper).

Outputs of a group ``g``: ``(g, "observation")`` (or the scenario's observation dict),
``(g, "info", ...)`` (the scenario's per-agent info), ``(g, "reward")`` ``[E, n, 1]`` and
``(g, "done" | "terminated" | "truncated")`` ``[E, n, 1]``. VMAS ends episodes per sub-env, so
the group flags are the root flags ``[E, 1]`` repeated over the agents.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, OBSERVATION, RESET, REWARD, TERMINATED, TRUNCATED
from torchrl._td_compat import new_unchecked
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import (
    Categorical,
    Composite,
    MultiOneHot,
    OneHot,
    TensorSpec,
    Unbounded,
    stack_specs,
)
from torchrl.envs.common import EnvBase
from torchrl.envs.libs._gym_spaces import gym_to_torchrl_spec_transform, import_gymnasium
from torchrl.envs.libs._marl import MarlGroupMapType, resolve_group_map

__all__ = ["VmasEnv", "VmasWrapper"]

_has_vmas = has_module("vmas")

INFO = "info"


def _vmas() -> Any:
    return import_optional("vmas", extra="vmas")


def _as_gymnasium(space: Any) -> Any:
    """The gymnasium twin of an old-``gym`` space (VMAS still builds ``gym`` 0.26 spaces)."""
    spaces = import_gymnasium().spaces
    kind = type(space).__name__
    if kind == "Box":
        return spaces.Box(low=space.low, high=space.high, shape=space.shape, dtype=space.dtype)
    if kind == "Discrete":
        return spaces.Discrete(int(space.n), start=int(getattr(space, "start", 0)))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(space.nvec), dtype=space.dtype)
    if kind == "MultiBinary":
        return spaces.MultiBinary(space.n)
    if kind == "Dict":
        return spaces.Dict({k: _as_gymnasium(v) for k, v in space.spaces.items()})
    if kind == "Tuple":
        return spaces.Tuple([_as_gymnasium(v) for v in space.spaces])
    raise NotImplementedError(f"VMAS space {space!r} ({kind}) has no torchrl spec")


def _stack_agents(specs: list[TensorSpec], group: str, what: str) -> TensorSpec:
    shapes = {tuple(s.shape) for s in specs}
    if len(shapes) > 1 and not isinstance(specs[0], Composite):
        raise ValueError(
            f"VmasWrapper: the agents of group {group!r} have {what} of different shapes "
            f"{sorted(shapes)}; put them in different groups (e.g. "
            f"group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT)"
        )
    return stack_specs(specs, dim=1)


def _stack_values(values: list[Any]) -> Any:
    """Stacks per-agent tensors (or nested dicts of them) along a new agent dim 1."""
    first = values[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(values, dim=1)
    return {k: _stack_values([v[k] for v in values]) for k in first}


class _Group:
    """One group of agents: its name, the agents' positions in VMAS's list, and converters."""

    __slots__ = ("index", "n", "name", "to_vmas")

    def __init__(self, name: str, index: list[int]) -> None:
        self.name = name
        self.index = index
        self.n = len(index)
        self.to_vmas: Any = None


def _action_converter(spec: TensorSpec, nvec: list[int] | None) -> Any:
    """A function turning one agent's torchrl action ``[E, ...]`` into VMAS's."""
    if isinstance(spec, OneHot):
        return lambda a: a.long().argmax(-1)
    if isinstance(spec, MultiOneHot):
        assert nvec is not None
        sizes = list(nvec)
        return lambda a: torch.stack([p.long().argmax(-1) for p in a.split(sizes, -1)], -1)
    return lambda a: a


class VmasWrapper(EnvBase):
    """Wraps a VMAS environment (``vmas.make_env(...)``) behind the torchrl env contract.

    The env has batch ``[num_envs]``; agents are grouped (``group_map``) and each group's data
    is stacked under its name with batch ``[num_envs, n_agents]``: ``("agents", "observation")``,
    ``("agents", "action")``, ``("agents", "reward")`` ``[E, n, 1]``, ``("agents", "info", k)``
    and per-agent ``("agents", "done" | "terminated" | "truncated")``; root ``done``,
    ``terminated``, ``truncated`` are ``[E, 1]``. Partial resets (``"_reset"`` at the root or in a
    group) reset the marked sub-envs with VMAS's ``reset_at``.

    Args:
        env: a ``vmas.simulator.environment.Environment``.
        categorical_actions: discrete actions as indices (``Categorical``/``MultiCategorical``)
            rather than one-hot vectors (ignored for continuous actions).
        group_map: a :class:`~torchrl.envs.MarlGroupMapType` or ``{group: [agent names]}``
            (default: all agents in one group ``"agents"``).
        device: checked against the env's device (``None``: the env's).
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).

    Examples:
        >>> import vmas
        >>> from torchrl.envs.libs.vmas import VmasWrapper
        >>> env = VmasWrapper(vmas.make_env("navigation", num_envs=8, n_agents=3))
        >>> td = env.rollout(4)
        >>> td["next", "agents", "reward"].shape, td["next", "done"].shape
        (torch.Size([8, 4, 3, 1]), torch.Size([8, 4, 1]))
    """

    _handles_partial_reset = True

    def __init__(
        self,
        env: Any = None,
        categorical_actions: bool = True,
        group_map: MarlGroupMapType | Mapping[str, Sequence[str]] | None = None,
        *,
        device: DeviceLike = None,
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
    ) -> None:
        vmas = _vmas()
        if not isinstance(env, vmas.simulator.environment.Environment):
            raise TypeError(
                f"VmasWrapper needs a vmas Environment (vmas.make_env(...) with no wrapper), got "
                f"{type(env).__name__}"
            )
        env_device = torch.device(env.device)
        if device is not None and torch.device(device) != env_device:
            raise ValueError(
                f"VmasWrapper: device={device} differs from the VMAS env's device {env_device}; "
                f"build the env on the device you want (vmas.make_env(..., device=...))"
            )
        if getattr(env, "dict_spaces", False):
            raise ValueError("VmasWrapper needs a VMAS env made with dict_spaces=False")
        super().__init__(
            device=env_device,
            batch_size=[env.num_envs],
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self._env = env
        self._categorical = bool(categorical_actions)
        self.agent_names = [agent.name for agent in env.agents]
        self.group_map = resolve_group_map(
            group_map, self.agent_names, MarlGroupMapType.ALL_IN_ONE_GROUP
        )
        position = {name: i for i, name in enumerate(self.agent_names)}
        self._groups = [
            _Group(name, [position[a] for a in members]) for name, members in self.group_map.items()
        ]
        self._terminated_truncated = bool(getattr(env, "terminated_truncated", False))
        # VMAS loads scenarios from files as anonymous modules: the file name is the scenario's
        source = getattr(inspect.getmodule(type(env.scenario)), "__file__", None)
        self.scenario_name = Path(source).stem if source else type(env.scenario).__name__
        self._make_specs()

    @property
    def env(self) -> Any:
        """The wrapped VMAS environment."""
        return self._env

    @property
    def n_agents(self) -> int:
        """The number of agents (all groups together)."""
        return len(self.agent_names)

    @property
    def group_names(self) -> list[str]:
        """The group names, in order."""
        return [g.name for g in self._groups]

    # ------------------------------------------------------------------------------------ specs
    def _make_specs(self) -> None:
        env, device = self._env, self.device
        num_envs = self.batch_size[0]
        batch = (num_envs,)
        obs_space = env.observation_space.spaces
        act_space = env.action_space.spaces
        _, infos = env.reset(return_info=True)
        self._info_keys: list[list[str]] = []
        obs_entries: dict[Any, Any] = {}
        act_entries: dict[Any, Any] = {}
        rew_entries: dict[Any, Any] = {}
        done_entries: dict[Any, Any] = {}
        flag = Categorical(2, shape=(num_envs, 1), dtype=torch.bool, device=device)
        for group in self._groups:
            gbatch = (num_envs, group.n)
            obs = [
                gym_to_torchrl_spec_transform(_as_gymnasium(obs_space[i]), device, True, batch)
                for i in group.index
            ]
            obs_spec = _stack_agents(obs, group.name, "observations")
            node = Composite(shape=gbatch, device=device)
            if isinstance(obs_spec, Composite):
                for key in obs_spec.keys():
                    node[key] = obs_spec[key]
            else:
                node[OBSERVATION] = obs_spec
            info_keys = list(infos[group.index[0]].keys())
            for i in group.index:
                if list(infos[i].keys()) != info_keys:
                    raise ValueError(
                        f"VmasWrapper: the agents of group {group.name!r} report different info "
                        f"keys ({info_keys} and {list(infos[i].keys())}); group them apart"
                    )
            self._info_keys.append(info_keys)
            if info_keys:
                info = Composite(shape=gbatch, device=device)
                for key in info_keys:
                    value = torch.stack([infos[i][key] for i in group.index], dim=1)
                    info[key] = Unbounded(shape=value.shape, dtype=value.dtype, device=device)
                node[INFO] = info
            obs_entries[group.name] = node
            actions = [
                gym_to_torchrl_spec_transform(
                    _as_gymnasium(act_space[i]), device, self._categorical, batch
                )
                for i in group.index
            ]
            action = _stack_agents(actions, group.name, "actions")
            nvec = None
            if isinstance(action, MultiOneHot):
                nvec = [int(n) for n in np.asarray(act_space[group.index[0]].nvec)]
            group.to_vmas = _action_converter(action, nvec)
            act_entries[group.name] = Composite({ACTION: action}, shape=gbatch, device=device)
            rew_entries[group.name] = Composite(
                {REWARD: Unbounded(shape=(*gbatch, 1), dtype=torch.float32, device=device)},
                shape=gbatch,
                device=device,
            )
            gflag = Categorical(2, shape=(*gbatch, 1), dtype=torch.bool, device=device)
            done_entries[group.name] = Composite(
                {DONE: gflag, TERMINATED: gflag.clone(), TRUNCATED: gflag.clone()},
                shape=gbatch,
                device=device,
            )
        self.observation_spec = Composite(obs_entries, shape=batch, device=device)
        self.full_action_spec = Composite(act_entries, shape=batch, device=device)
        self.full_reward_spec = Composite(rew_entries, shape=batch, device=device)
        self.full_done_spec = Composite(
            {DONE: flag, TERMINATED: flag.clone(), TRUNCATED: flag.clone(), **done_entries},
            shape=batch,
            device=device,
        )

    # ---------------------------------------------------------------------------------- running
    def _set_seed(self, seed: int | None) -> None:
        self._env.seed(seed)

    def _output(
        self,
        obs: list[Any],
        infos: list[dict[str, Any]],
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        rewards: list[torch.Tensor] | None,
    ) -> TensorDictBase:
        num_envs = self.batch_size[0]
        device = self.device
        term = terminated.reshape(num_envs, 1)
        trunc = truncated.reshape(num_envs, 1)
        done = term | trunc
        data: dict[Any, Any] = {DONE: done, TERMINATED: term, TRUNCATED: trunc}
        for group, info_keys in zip(self._groups, self._info_keys):
            index = group.index
            gbatch = torch.Size([num_envs, group.n])
            entries: dict[Any, Any] = {}
            first = obs[index[0]]
            if isinstance(first, torch.Tensor):
                entries[OBSERVATION] = torch.stack([obs[i] for i in index], dim=1)
            else:
                stacked = _stack_values([obs[i] for i in index])
                entries.update(TensorDict(stacked, batch_size=gbatch, device=device).items())
            if info_keys:
                info: dict[Any, Any] = {
                    k: torch.stack([infos[i][k] for i in index], dim=1) for k in info_keys
                }
                entries[INFO] = new_unchecked(info, batch_size=gbatch, device=device)
            if rewards is not None:
                entries[REWARD] = torch.stack([rewards[i] for i in index], dim=1).unsqueeze(-1)
            # the root flags repeated over the agents (cat: half the cost of expand().clone())
            entries[DONE] = torch.cat([done] * group.n, 1).unsqueeze(-1)
            entries[TERMINATED] = torch.cat([term] * group.n, 1).unsqueeze(-1)
            entries[TRUNCATED] = torch.cat([trunc] * group.n, 1).unsqueeze(-1)
            data[group.name] = new_unchecked(entries, batch_size=gbatch, device=device)
        return new_unchecked(data, batch_size=self.batch_size, device=device)

    def _reset_mask(self, tensordict: TensorDictBase | None) -> torch.Tensor | None:
        """The sub-envs to reset ``[E]`` (``None``: all), from the root and group masks."""
        if tensordict is None:
            return None
        mask = tensordict.get(RESET, None)
        num_envs = self.batch_size[0]
        per_env = None if mask is None else mask.reshape(num_envs, -1).any(-1)
        for group in self._groups:
            gmask = tensordict.get((group.name, RESET), None)
            if gmask is not None:
                g = gmask.reshape(num_envs, -1).any(-1)
                per_env = g if per_env is None else per_env | g
        return per_env

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        env = self._env
        mask = self._reset_mask(tensordict)
        if mask is None or bool(mask.all()):
            env.reset(return_observations=False)
        else:
            # VMAS resets one sub-env per call; only the finished ones are visited
            for i in mask.nonzero().flatten().tolist():
                env.reset_at(i, return_observations=False)
        obs, infos = env.get_from_scenario(
            get_observations=True, get_rewards=False, get_infos=True, get_dones=False
        )
        flags = torch.zeros(self.batch_size[0], dtype=torch.bool, device=self.device)
        return self._output(obs, infos, flags, flags, None)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions: list[Any] = [None] * len(self.agent_names)
        for group in self._groups:
            action = tensordict.get((group.name, ACTION))
            for j, i in enumerate(group.index):
                actions[i] = group.to_vmas(action[:, j])
        out = self._env.step(actions)
        if self._terminated_truncated:
            obs, rewards, terminated, truncated, infos = out
        else:
            obs, rewards, terminated, infos = out
            truncated = torch.zeros_like(terminated)
        return self._output(obs, infos, terminated.bool(), truncated.bool(), rewards)

    def _close(self) -> None:
        viewer = getattr(self._env, "viewer", None)
        if viewer is not None:
            viewer.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(scenario={self.scenario_name}, num_envs={self.batch_size[0]}, "
            f"n_agents={self.n_agents}, groups={self.group_names}, device={self.device})"
        )


class VmasEnv(VmasWrapper):
    """Builds a VMAS scenario (``vmas.make_env``) with ``num_envs`` sub-envs and wraps it.

    See :class:`VmasWrapper` for the data layout. Extra keyword arguments go to the scenario
    (e.g. ``n_agents=3``).

    Args:
        scenario: a VMAS scenario name (``"navigation"``, ``"balance"``, ``"simple_spread"``,
            ...) or a ``BaseScenario`` instance.
        num_envs: the number of sub-envs simulated together (the env's batch size).
        continuous_actions: continuous (``True``) or discrete actions.
        max_steps: truncate episodes after this many steps (``None``: the scenario decides).
        categorical_actions: see :class:`VmasWrapper`.
        seed: the simulator's seed.
        group_map: see :class:`VmasWrapper`.
        device: where VMAS simulates (default CPU).
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).
        **scenario_kwargs: passed to the scenario.

    Examples:
        >>> from torchrl.envs import check_env_specs
        >>> from torchrl.envs.libs.vmas import VmasEnv
        >>> env = VmasEnv("navigation", num_envs=32, seed=0)
        >>> check_env_specs(env)
        >>> env.full_action_spec["agents", "action"].shape
        torch.Size([32, 4, 2])
    """

    def __init__(
        self,
        scenario: Any,
        num_envs: int,
        continuous_actions: bool = True,
        max_steps: int | None = None,
        categorical_actions: bool = True,
        seed: int | None = None,
        group_map: MarlGroupMapType | Mapping[str, Sequence[str]] | None = None,
        *,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool = False,
        validate_actions: bool = True,
        **scenario_kwargs: Any,
    ) -> None:
        vmas = _vmas()
        if int(num_envs) < 1:
            raise ValueError(f"VmasEnv: num_envs must be >= 1, got {num_envs}")
        env = vmas.make_env(
            scenario,
            num_envs=int(num_envs),
            device=torch.device(device) if device is not None else "cpu",
            continuous_actions=continuous_actions,
            max_steps=max_steps,
            seed=seed,
            terminated_truncated=True,
            **scenario_kwargs,
        )
        super().__init__(
            env,
            categorical_actions=categorical_actions,
            group_map=group_map,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        if isinstance(scenario, str):
            self.scenario_name = scenario
