"""PettingZoo environments (parallel and AEC APIs) behind the torchrl env contract.

Agents are grouped (``group_map``; by default by name prefix: ``"piston_0"``, ``"piston_1"`` ->
``"piston"``) and each group's data is stacked under its name with batch ``[n_agents]``
(DESIGN.md §2). Spaces are converted with the gymnasium mapping of ``_gym_spaces.py``.

Per group ``g``: the observation (``(g, "observation")``, or the keys of a ``Dict`` observation
space), ``(g, "action_mask")`` (bool ``[n, n_actions]``) when the env's observations carry an
``"action_mask"``, ``(g, "mask")`` (bool ``[n]``, with ``use_mask``: which agents act next),
``(g, "action")``, ``(g, "reward")`` ``[n, 1]`` and per-agent done flags ``[n, 1]``. Agents that
are absent (dead, or not yet spawned) read zeros, a reward of 0 and ``done=True`` once they have
left. Agents that cannot act have an all-``True`` action mask, so that any policy can draw an
action for them; the env ignores it.

AEC envs are stepped one move at a time: the torchrl step applies the action of the agent whose
turn it is (``(g, "mask")`` marks it; ``use_mask`` is forced on). The mandatory ``None`` steps
of agents that have finished are taken by the wrapper.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import (
    ACTION,
    ACTION_MASK,
    DONE,
    MASK,
    OBSERVATION,
    RESET,
    REWARD,
    TERMINATED,
    TRUNCATED,
)
from torchrl._td_compat import new_unchecked
from torchrl._types import DeviceLike
from torchrl._utils import has_module, import_optional
from torchrl.data.specs import Categorical, Composite, OneHot, TensorSpec, Unbounded, stack_specs
from torchrl.envs.common import EnvBase
from torchrl.envs.libs._gym_spaces import (
    gym_to_torchrl_spec_transform,
    import_gymnasium,
    make_reader,
    make_writer,
)
from torchrl.envs.libs._marl import MarlGroupMapType, prefix_group_map, resolve_group_map
from torchrl.envs.utils import masked_choice

__all__ = ["PettingZooEnv", "PettingZooWrapper"]

_has_pettingzoo = has_module("pettingzoo")

STATE = "state"
_FAMILIES = ("classic", "butterfly", "sisl", "atari")


def _pettingzoo() -> Any:
    return import_optional("pettingzoo", extra="pettingzoo")


class _Group:
    """One group of agents with its converters (built once, used at every step)."""

    def __init__(self, name: str, agents: list[str]) -> None:
        self.name = name
        self.agents = agents
        self.n = len(agents)
        self.obs_keys: list[str] = []
        self.read_obs: Callable[[Any], dict[str, Any]] = lambda obs: {}
        self.zero_obs: dict[Any, Any] = {}
        self.has_action_mask = False
        self.n_actions = 0
        self.write_action: list[Callable[[Any], Any]] = []


class PettingZooWrapper(EnvBase):
    """Wraps a PettingZoo env (``ParallelEnv`` or ``AECEnv``) behind the torchrl env contract.

    The env itself is unbatched (``batch_size=[]``); each group's entries have batch
    ``[n_agents]``. See the module docstring for the layout. The root ``done`` aggregates the
    agents' flags: with ``done_on_any`` the episode ends when any agent is done, otherwise when all
    are (default: any for parallel envs, all for AEC envs); the root ``terminated`` is set when an
    agent terminated, ``truncated`` otherwise.

    Args:
        env: a ``pettingzoo.ParallelEnv`` or ``pettingzoo.AECEnv``.
        return_state: add the env's global state (``env.state()``) under ``"state"``.
        group_map: a :class:`~torchrl.envs.MarlGroupMapType` or ``{group: [agent names]}``
            (default: by name prefix).
        use_mask: add ``(group, "mask")`` (which agents act next); always on for AEC envs.
        categorical_actions: discrete actions as indices rather than one-hot vectors.
        seed: the seed of the first reset.
        done_on_any: see above.
        device: the device of the output tensors.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`; default ``not done_on_any``
            (see below).
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).

    Resets: the env resets as a whole, when the root ``"_reset"`` is set (or when no mask is
    given). Without ``done_on_any``, an agent can finish while the episode goes on: its done
    flags stay set, and a group ``"_reset"`` that marks it (as ``step_and_maybe_reset`` writes)
    leaves the env as it is.

    Examples:
        >>> from pettingzoo.classic import tictactoe_v3
        >>> from torchrl.envs.libs.pettingzoo import PettingZooWrapper
        >>> env = PettingZooWrapper(tictactoe_v3.env(), seed=0)
        >>> td = env.reset()
        >>> td["player", "mask"], td["player", "action_mask"].shape
        (tensor([ True, False]), torch.Size([2, 9]))
    """

    # _reset always resets the whole env (or nothing): no merge of old values
    _handles_partial_reset = True

    def __init__(
        self,
        env: Any = None,
        return_state: bool = False,
        group_map: MarlGroupMapType | Mapping[str, Sequence[str]] | None = None,
        use_mask: bool = False,
        categorical_actions: bool = True,
        seed: int | None = None,
        done_on_any: bool | None = None,
        *,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool | None = None,
        validate_actions: bool = True,
    ) -> None:
        _pettingzoo()
        from pettingzoo.utils.env import AECEnv, ParallelEnv

        if isinstance(env, ParallelEnv):
            self.parallel = True
        elif isinstance(env, AECEnv):
            self.parallel = False
        else:
            raise TypeError(
                f"PettingZooWrapper needs a pettingzoo ParallelEnv or AECEnv, got "
                f"{type(env).__name__}"
            )
        self.done_on_any = self.parallel if done_on_any is None else bool(done_on_any)
        if allow_done_after_reset is None:
            allow_done_after_reset = not self.done_on_any
        super().__init__(
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self._env = env
        self.use_mask = bool(use_mask) or not self.parallel
        self.return_state = bool(return_state)
        self._categorical = bool(categorical_actions)
        self._next_seed = seed
        self.possible_agents = [str(a) for a in env.possible_agents]
        self._agent_ids = {str(a): a for a in env.possible_agents}
        self.group_map = resolve_group_map(
            group_map, self.possible_agents, prefix_group_map(self.possible_agents)
        )
        self._groups = [_Group(name, agents) for name, agents in self.group_map.items()]
        self._make_specs()

    @property
    def env(self) -> Any:
        """The wrapped PettingZoo env."""
        return self._env

    @property
    def group_names(self) -> list[str]:
        """The group names, in order."""
        return [g.name for g in self._groups]

    # ------------------------------------------------------------------------------------ specs
    def _stack(self, specs: list[TensorSpec], group: str, what: str) -> TensorSpec:
        shapes = {tuple(s.shape) for s in specs}
        dtypes = {s.dtype for s in specs}
        if len(shapes) > 1 or len(dtypes) > 1:
            raise ValueError(
                f"PettingZooWrapper: the agents of group {group!r} have {what} of different "
                f"shapes or dtypes ({sorted(shapes)}, {dtypes}); put them in different groups "
                f"(e.g. group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT)"
            )
        return stack_specs(specs, dim=0)

    def _make_specs(self) -> None:
        gym = import_gymnasium()
        env, device, categorical = self._env, self.device, self._categorical
        obs_entries: dict[Any, Any] = {}
        act_entries: dict[Any, Any] = {}
        rew_entries: dict[Any, Any] = {}
        done_entries: dict[Any, Any] = {}
        for group in self._groups:
            ids = [self._agent_ids[a] for a in group.agents]
            gbatch = (group.n,)
            obs_spaces = [env.observation_space(a) for a in ids]
            first = obs_spaces[0]
            is_dict = isinstance(first, gym.spaces.Dict)
            kinds = {type(s).__name__ for s in obs_spaces}
            if is_dict:
                kinds |= {
                    str(sorted(s.spaces)) for s in obs_spaces if isinstance(s, gym.spaces.Dict)
                }
            if len(kinds) > 1 + is_dict:
                raise ValueError(
                    f"PettingZooWrapper: the agents of group {group.name!r} have observation "
                    f"spaces of different shapes or dtypes ({obs_spaces}); put them in different "
                    f"groups (e.g. group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT)"
                )
            mask_space = first.spaces.get(ACTION_MASK) if is_dict else None
            group.has_action_mask = mask_space is not None
            if is_dict:
                obs_spaces = [
                    gym.spaces.Dict({k: v for k, v in s.spaces.items() if k != ACTION_MASK})
                    for s in obs_spaces
                ]
            specs = [gym_to_torchrl_spec_transform(s, device, categorical) for s in obs_spaces]
            obs_spec: Any = self._stack(
                [s if isinstance(s, Composite) else Composite(observation=s) for s in specs],
                group.name,
                "observations",
            )
            node = Composite(shape=gbatch, device=device)
            for key in obs_spec.keys():
                node[key] = obs_spec[key]
            group.obs_keys = list(obs_spec.keys())
            read = make_reader(obs_spaces[0], categorical)
            if is_dict:
                group.read_obs = read
            else:

                def read_leaf(obs: Any, read: Any = read) -> dict[str, Any]:
                    return {OBSERVATION: read(obs)}

                group.read_obs = read_leaf
            group.zero_obs = {k: obs_spec[k][0].zero() for k in group.obs_keys}
            act_spaces = [env.action_space(a) for a in ids]
            action = self._stack(
                [gym_to_torchrl_spec_transform(s, device, categorical) for s in act_spaces],
                group.name,
                "actions",
            )
            group.write_action = [make_writer(s, categorical, batched=False) for s in act_spaces]
            if mask_space is not None:
                n_actions = int(np.prod(mask_space.shape))
                if (
                    not isinstance(action, (Categorical, OneHot))
                    or (action.n if isinstance(action, Categorical) else action.shape[-1])
                    != n_actions
                ):
                    raise ValueError(
                        f"PettingZooWrapper: group {group.name!r} has an action mask of "
                        f"{n_actions} entries, which does not fit its action spec {action!r}"
                    )
                group.n_actions = n_actions
                node[ACTION_MASK] = Categorical(
                    2, shape=(group.n, n_actions), dtype=torch.bool, device=device
                )
            if self.use_mask:
                node[MASK] = Categorical(2, shape=gbatch, dtype=torch.bool, device=device)
            obs_entries[group.name] = node
            act_entries[group.name] = Composite({ACTION: action}, shape=gbatch, device=device)
            rew_entries[group.name] = Composite(
                {REWARD: Unbounded(shape=(group.n, 1), dtype=torch.float32, device=device)},
                shape=gbatch,
                device=device,
            )
            gflag = Categorical(2, shape=(group.n, 1), dtype=torch.bool, device=device)
            done_entries[group.name] = Composite(
                {DONE: gflag, TERMINATED: gflag.clone(), TRUNCATED: gflag.clone()},
                shape=gbatch,
                device=device,
            )
        if self.return_state:
            state_space = getattr(env, "state_space", None)
            if state_space is None:
                raise ValueError(
                    f"PettingZooWrapper(return_state=True): the env {type(env.unwrapped).__name__} "
                    f"has no state_space"
                )
            obs_entries[STATE] = gym_to_torchrl_spec_transform(state_space, device, categorical)
            self._read_state = make_reader(state_space, categorical)
        flag = Categorical(2, shape=(1,), dtype=torch.bool, device=device)
        self.observation_spec = Composite(obs_entries, device=device)
        self.full_action_spec = Composite(act_entries, device=device)
        self.full_reward_spec = Composite(rew_entries, device=device)
        self.full_done_spec = Composite(
            {DONE: flag, TERMINATED: flag.clone(), TRUNCATED: flag.clone(), **done_entries},
            device=device,
        )

    # ---------------------------------------------------------------------------------- outputs
    def _output(
        self,
        observe: Callable[[Any], Any],
        live: set[Any],
        acting: set[Any],
        rewards: Mapping[Any, float] | None,
        terminations: Mapping[Any, bool],
        truncations: Mapping[Any, bool],
        absent_done: bool = True,
    ) -> TensorDictBase:
        """Builds the TensorDict of one reset or step.

        ``observe(agent)`` reads a live agent's observation; ``live`` are the agents present,
        ``acting`` those that act next; absent agents missing from ``terminations`` count as
        terminated (after a step; an agent absent at reset has not started yet).
        """
        data: dict[Any, Any] = {}
        all_term: list[bool] = []
        all_trunc: list[bool] = []
        for group in self._groups:
            ids = [self._agent_ids[a] for a in group.agents]
            obs_rows: dict[str, list[torch.Tensor]] = {k: [] for k in group.obs_keys}
            masks = []
            for agent in ids:
                if agent in live:
                    raw = observe(agent)
                    values = group.read_obs(raw)
                    if group.has_action_mask:
                        if agent in acting:
                            mask = torch.as_tensor(np.asarray(raw[ACTION_MASK]).reshape(-1) != 0)
                            if not bool(mask.any()):
                                mask = torch.ones(group.n_actions, dtype=torch.bool)
                        else:
                            mask = torch.ones(group.n_actions, dtype=torch.bool)
                        masks.append(mask)
                else:
                    values = group.zero_obs
                    if group.has_action_mask:
                        masks.append(torch.ones(group.n_actions, dtype=torch.bool))
                for key in group.obs_keys:
                    obs_rows[key].append(values[key])
            entries: dict[Any, Any] = {}
            for key, rows in obs_rows.items():
                if isinstance(rows[0], torch.Tensor):
                    entries[key] = torch.stack(rows)
                else:
                    entries[key] = torch.stack([TensorDict(r, batch_size=[]) for r in rows])
            if group.has_action_mask:
                entries[ACTION_MASK] = torch.stack(masks)
            if self.use_mask:
                entries[MASK] = torch.tensor([a in acting for a in ids], dtype=torch.bool)
            term = [bool(terminations.get(a, absent_done and a not in live)) for a in ids]
            trunc = [bool(truncations.get(a, False)) and not t for a, t in zip(ids, term)]
            all_term += term
            all_trunc += trunc
            flags = torch.tensor([term, trunc], dtype=torch.bool).unsqueeze(-1)
            entries[TERMINATED] = flags[0]
            entries[TRUNCATED] = flags[1]
            entries[DONE] = flags[0] | flags[1]
            if rewards is not None:
                entries[REWARD] = torch.tensor(
                    [[float(rewards.get(a, 0.0))] for a in ids], dtype=torch.float32
                )
            data[group.name] = new_unchecked(entries, batch_size=torch.Size([group.n]))
        done_each = [t or u for t, u in zip(all_term, all_trunc)]
        # an env with no agent left has ended, whatever the aggregation says
        done = (any(done_each) if self.done_on_any else all(done_each)) or not live
        # the episode terminated if its ending agents did; a mix reads as a truncation
        terminated = done and (any(all_term) if self.done_on_any else all(all_term))
        flags = torch.tensor([done, terminated, done and not terminated], dtype=torch.bool)
        data[DONE] = flags[0:1]
        data[TERMINATED] = flags[1:2]
        data[TRUNCATED] = flags[2:3]
        if self.return_state:
            data[STATE] = self._read_state(self._env.state())
        out = new_unchecked(data, batch_size=self.batch_size)
        device = self.device
        return out if device is None or device.type == "cpu" else out.to(device)

    # ---------------------------------------------------------------------------------- running
    def _set_seed(self, seed: int | None) -> None:
        # PettingZoo seeds an env through its next reset
        self._next_seed = seed

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        if tensordict is not None:
            root = tensordict.get(RESET, None)
            marked = root is not None or any(
                (g.name, RESET) in tensordict.keys(include_nested=True) for g in self._groups
            )
            if marked and (root is None or not bool(root.any())):
                # agents finished while the episode goes on: nothing to reset
                return tensordict
        seed, self._next_seed = self._next_seed, None
        env = self._env
        options = kwargs.get("options")
        if self.parallel:
            obs, _ = env.reset(seed=seed, options=options)
            live = set(env.agents)
            return self._output(obs.__getitem__, live, live, None, {}, {}, absent_done=False)
        env.reset(seed=seed, options=options)
        live = set(env.agents)
        acting = {env.agent_selection}
        return self._output(env.observe, live, acting, None, {}, {}, absent_done=False)

    def _actions(self, tensordict: TensorDictBase, wanted: set[Any]) -> dict[Any, Any]:
        actions = {}
        for group in self._groups:
            todo = [
                (j, self._agent_ids[a])
                for j, a in enumerate(group.agents)
                if self._agent_ids[a] in wanted
            ]
            if not todo:
                continue
            action = tensordict.get((group.name, ACTION))
            for j, agent in todo:
                actions[agent] = group.write_action[j](action[j])
        return actions

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        env = self._env
        if self.parallel:
            live_before = set(env.agents)
            obs, rewards, terms, truncs, _ = env.step(self._actions(tensordict, live_before))
            live = set(env.agents)
            return self._output(
                obs.__getitem__, set(obs) & live_before, live, rewards, terms, truncs
            )
        agent = env.agent_selection
        if env.terminations.get(agent, False) or env.truncations.get(agent, False):
            env.step(None)
        else:
            env.step(self._actions(tensordict, {agent})[agent])
        self._skip_dead_turns()
        live = set(env.agents)
        acting = {env.agent_selection} if live else set()
        return self._output(
            env.observe, live, acting, env.rewards, env.terminations, env.truncations
        )

    def _skip_dead_turns(self) -> None:
        """Takes the ``None`` steps PettingZoo expects of finished agents while others play on."""
        env = self._env

        def finished(a: Any) -> bool:
            return bool(env.terminations.get(a, False) or env.truncations.get(a, False))

        while env.agents and finished(env.agent_selection):
            if all(finished(a) for a in env.agents):
                break  # the game is over: the episode ends here
            env.step(None)

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Writes random actions, drawn among the allowed ones where the input has action masks.

        Args:
            tensordict: where to write them (a new TensorDict when ``None``).

        Returns:
            ``tensordict`` with one ``(group, "action")`` entry per group.
        """
        tensordict = super().rand_action(tensordict)
        for group in self._groups:
            if not group.has_action_mask:
                continue
            mask = tensordict.get((group.name, ACTION_MASK), None)
            if mask is not None:
                spec = self.full_action_spec[group.name, ACTION]
                tensordict.set((group.name, ACTION), masked_choice(spec, mask))
        return tensordict

    def _close(self) -> None:
        self._env.close()

    def __repr__(self) -> str:
        name = type(self._env.unwrapped).__module__.rsplit(".", 1)[-1]
        kind = "parallel" if self.parallel else "aec"
        return (
            f"{type(self).__name__}(env={name}, {kind}, groups={self.group_map}, "
            f"device={self.device})"
        )


def _short_id(env_id: str) -> str:
    """``"classic/tictactoe-v3"`` (a registry id) -> ``"tictactoe_v3"`` (the module name)."""
    return env_id.rsplit("/", 1)[-1].replace("-v", "_v")


def _make_task(task: str, parallel: bool, kwargs: dict[str, Any]) -> Any:
    """Builds ``task`` (a module name like ``"tictactoe_v3"`` or a registry id).

    PettingZoo >= 1.27 has a registry (``pettingzoo.make``) and deprecates importing task
    modules; older releases only have the modules, searched in every family.
    """
    pettingzoo = _pettingzoo()
    kind = "parallel" if parallel else "aec"
    if hasattr(pettingzoo, "make") and hasattr(pettingzoo, "parallel_registry"):
        registries = {"parallel": pettingzoo.parallel_registry, "aec": pettingzoo.aec_registry}
        for env_id in registries[kind]:
            if task in (env_id, _short_id(env_id)):
                return pettingzoo.make(kind, env_id, **kwargs)
        other = "aec" if parallel else "parallel"
        if any(task in (e, _short_id(e)) for e in registries[other]):
            raise ValueError(
                f"PettingZooEnv: {task!r} has no {kind} API; use parallel={not parallel}"
            )
    else:
        module = _task_module(task)
        if parallel and not hasattr(module, "parallel_env"):
            raise ValueError(f"PettingZooEnv: {task!r} has no parallel API; use parallel=False")
        return module.parallel_env(**kwargs) if parallel else module.env(**kwargs)
    hint = (
        " (the MPE tasks moved to the mpe2 package: build the env there and use PettingZooWrapper)"
        if task.startswith("simple")
        else ""
    )
    raise ValueError(f"PettingZooEnv: PettingZoo has no task named {task!r}{hint}")


def _task_module(task: str) -> Any:
    """The module of ``task`` in PettingZoo's families (releases without a registry)."""
    for family in _FAMILIES:
        name = f"pettingzoo.{family}.{task}"
        try:
            found = importlib.util.find_spec(name)
        except ImportError:
            continue  # a family that is gone or needs missing packages
        if found is not None:
            try:
                return importlib.import_module(name)
            except ModuleNotFoundError as err:
                raise ImportError(
                    f"PettingZooEnv: the task {task!r} needs {err.name!r}: "
                    f'pip install "pettingzoo[{family}]"'
                ) from err
    raise ValueError(f"PettingZooEnv: PettingZoo has no task named {task!r}")


class PettingZooEnv(PettingZooWrapper):
    """Builds a PettingZoo task by name (``"pistonball_v6"``, ``"tictactoe_v3"``, ...) and wraps it.

    Keyword arguments that are not the wrapper's go to the task's constructor (through
    ``pettingzoo.make``, or the task module's ``parallel_env``/``env`` on releases without a
    registry). See :class:`PettingZooWrapper`.

    Args:
        task: the task's module name (``"tictactoe_v3"``) or registry id
            (``"classic/tictactoe-v3"``).
        parallel: build the parallel API version (``False``: the AEC one).
        return_state: see :class:`PettingZooWrapper`.
        group_map: see :class:`PettingZooWrapper`.
        use_mask: see :class:`PettingZooWrapper`.
        categorical_actions: see :class:`PettingZooWrapper`.
        seed: see :class:`PettingZooWrapper`.
        done_on_any: see :class:`PettingZooWrapper`.
        device: see :class:`PettingZooWrapper`.
        allow_done_after_reset: see :class:`~torchrl.envs.EnvBase`.
        validate_actions: check every action against the action spec (see
            :class:`~torchrl.envs.EnvBase`).
        **kwargs: passed to the task.

    Examples:
        >>> from torchrl.envs import check_env_specs
        >>> from torchrl.envs.libs.pettingzoo import PettingZooEnv
        >>> env = PettingZooEnv("tictactoe_v3", parallel=False, seed=0)
        >>> check_env_specs(env)
        >>> env.group_map
        {'player': ['player_1', 'player_2']}
    """

    def __init__(
        self,
        task: str,
        parallel: bool = True,
        return_state: bool = False,
        group_map: MarlGroupMapType | Mapping[str, Sequence[str]] | None = None,
        use_mask: bool = False,
        categorical_actions: bool = True,
        seed: int | None = None,
        done_on_any: bool | None = None,
        *,
        device: DeviceLike = "cpu",
        allow_done_after_reset: bool | None = None,
        validate_actions: bool = True,
        **kwargs: Any,
    ) -> None:
        env = _make_task(task, parallel, kwargs)
        super().__init__(
            env,
            return_state=return_state,
            group_map=group_map,
            use_mask=use_mask,
            categorical_actions=categorical_actions,
            seed=seed,
            done_on_any=done_on_any,
            device=device,
            allow_done_after_reset=allow_done_after_reset,
            validate_actions=validate_actions,
        )
        self.task = task
