"""Tiny pure-torch envs for the tests (never shipped in the package)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

ALL_FLAGS = ("done", "terminated", "truncated")


class CountingEnv(EnvBase):
    """Counts steps; sub-env ``i`` finishes after ``max_steps[i]`` steps.

    Observation ``"observation"``: the count (float, ``[*B, 1]``); action: ``Categorical(2)``
    (``[*B, 1]``), paid back as the reward. Stateful: the counts live in the env and ``_reset``
    honours ``"_reset"`` itself. ``flags`` chooses which done flags ``_step`` writes (the base
    derives the others); ``truncate`` makes the end a truncation instead of a termination.
    """

    def __init__(
        self,
        batch_size: Any = (),
        max_steps: Any = 5,
        flags: tuple[str, ...] = ALL_FLAGS,
        truncate: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        batch = self.batch_size
        limit = torch.as_tensor(max_steps)
        self.max_steps = limit.unsqueeze(-1).expand(*batch, 1).clone()
        self.count = torch.zeros(*batch, 1, dtype=torch.int64)
        self.flags = flags
        self.truncate = truncate
        self.seeds: list[int | None] = []
        self.reset_calls = 0
        self.observation_spec = Composite(
            observation=Unbounded(shape=(*batch, 1), dtype=torch.float32), shape=batch
        )
        self.action_spec = Categorical(2, shape=(*batch, 1))

    def _set_seed(self, seed: int | None) -> None:
        self.seeds.append(seed)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        self.reset_calls += 1
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            self.count = torch.zeros_like(self.count)
        else:
            self.count = torch.where(mask, 0, self.count)
        return TensorDict(observation=self.count.float(), batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.count = self.count + 1
        end = self.count >= self.max_steps
        never = torch.zeros_like(end)
        values = {
            "done": end,
            "terminated": never if self.truncate else end,
            "truncated": end if self.truncate else never,
        }
        out = {
            "observation": self.count.float(),
            "reward": tensordict["action"].float(),
            **{k: v.clone() for k, v in values.items() if k in self.flags},
        }
        return TensorDict(out, batch_size=self.batch_size)


class NoisyResetEnv(CountingEnv):
    """A ``CountingEnv`` whose ``_reset`` draws a new ``"noise"`` for *every* sub-env.

    It leaves partial resets of ``"noise"`` to ``EnvBase``, which must put back the values of
    the sub-envs that were not reset. ``_step`` reads ``"noise"`` (a state) and passes it on.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        batch = self.batch_size
        self.observation_spec["noise"] = Unbounded(shape=(*batch, 2), dtype=torch.float32)
        self.observation_spec = self.observation_spec  # re-assign: refresh the key caches
        self.state_spec = Composite(
            noise=Unbounded(shape=(*batch, 2), dtype=torch.float32), shape=batch
        )

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        out = super()._reset(tensordict, **kwargs)
        out["noise"] = torch.randn(*self.batch_size, 2)
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = super()._step(tensordict)
        out["noise"] = tensordict["noise"]
        return out


class NestedEnv(EnvBase):
    """Multi-agent style nesting: a group ``"agents"`` of batch ``[*B, n_agents]``.

    Root entries: ``("state", "count")`` observation and root done flags; group entries:
    ``("agents", "observation")``, ``("agents", "action")`` (Bounded, ``[*B, n, 2]``),
    ``("agents", "reward")`` and per-agent done flags. Everyone is done after ``max_steps``.
    """

    def __init__(self, batch_size: Any = (), n_agents: int = 3, max_steps: int = 4) -> None:
        super().__init__(batch_size=batch_size)
        batch = self.batch_size
        group = (*batch, n_agents)
        self.n_agents = n_agents
        self.max_steps = max_steps
        self.count = torch.zeros(*batch, 1, dtype=torch.int64)
        flag = Categorical(2, shape=(*group, 1), dtype=torch.bool)
        self.observation_spec = Composite(
            state=Composite(count=Unbounded(shape=(*batch, 1), dtype=torch.int64), shape=batch),
            agents=Composite(observation=Unbounded(shape=(*group, 3)), shape=group),
            shape=batch,
        )
        self.action_spec = Composite(
            agents=Composite(action=Bounded(-1.0, 1.0, shape=(*group, 2)), shape=group),
            shape=batch,
        )
        self.reward_spec = Composite(
            agents=Composite(reward=Unbounded(shape=(*group, 1)), shape=group), shape=batch
        )
        root_flag = Categorical(2, shape=(*batch, 1), dtype=torch.bool)
        self.done_spec = Composite(
            done=root_flag,
            terminated=root_flag.clone(),
            truncated=root_flag.clone(),
            agents=Composite(
                done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=group
            ),
            shape=batch,
        )

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _obs(self) -> TensorDict:
        batch = self.batch_size
        group = (*batch, self.n_agents)
        return TensorDict(
            state=TensorDict(count=self.count.clone(), batch_size=batch),
            agents=TensorDict(
                observation=self.count.unsqueeze(-1).expand(*group, 3).float(), batch_size=group
            ),
            batch_size=batch,
        )

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        self.count = (
            torch.zeros_like(self.count) if mask is None else torch.where(mask, 0, self.count)
        )
        return self._obs()

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.count = self.count + 1
        out = self._obs()
        end = self.count >= self.max_steps
        agents_end = end.unsqueeze(-2).expand(*self.batch_size, self.n_agents, 1).clone()
        out["done"] = end
        out["terminated"] = end.clone()
        out["agents", "done"] = agents_end
        out["agents", "terminated"] = agents_end.clone()
        out["agents", "reward"] = tensordict["agents", "action"].sum(-1, keepdim=True)
        return out


class BrokenEnv(EnvBase):
    """An env whose outputs disagree with its specs in one chosen way.

    ``bug``: ``"dtype"`` (float64 observation for a float32 spec), ``"shape"`` (a ``[*B, 4]``
    observation for a ``[*B, 3]`` spec), ``"missing"`` (a declared ``"extra"`` observation never
    comes), ``"undeclared"`` (an ``"extra"`` entry comes without a spec), ``"range"`` (a
    ``Bounded(0, 1)`` observation at 5), ``"reward_shape"`` (a ``[*B]`` reward), ``None`` (no bug).
    """

    def __init__(self, bug: str | None, batch_size: Any = (), **kwargs: Any) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        batch = self.batch_size
        self.bug = bug
        specs = {"observation": Unbounded(shape=(*batch, 3), dtype=torch.float32)}
        if bug == "missing":
            specs["extra"] = Unbounded(shape=(*batch, 1), dtype=torch.float32)
        if bug == "range":
            specs["bounded"] = Bounded(0.0, 1.0, shape=(*batch, 1))
        self.observation_spec = Composite(specs, shape=batch)
        self.action_spec = Bounded(-1.0, 1.0, shape=(*batch, 1))

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _obs(self) -> dict[str, torch.Tensor]:
        batch = self.batch_size
        obs = {"observation": torch.zeros(*batch, 3)}
        if self.bug == "dtype":
            obs["observation"] = obs["observation"].double()
        elif self.bug == "shape":
            obs["observation"] = torch.zeros(*batch, 4)
        elif self.bug == "undeclared":
            obs["extra"] = torch.zeros(*batch, 1)
        elif self.bug == "range":
            obs["bounded"] = torch.full((*batch, 1), 5.0)
        return obs

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        return TensorDict(self._obs(), batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self._obs()
        reward = torch.zeros(*self.batch_size, 1)
        out["reward"] = reward.squeeze(-1) if self.bug == "reward_shape" else reward
        return TensorDict(out, batch_size=self.batch_size)


class DoneAtResetEnv(CountingEnv):
    """Starts every episode already done (allowed only with ``allow_done_after_reset``)."""

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        out = super()._reset(tensordict, **kwargs)
        out["done"] = torch.ones(*self.batch_size, 1, dtype=torch.bool)
        return out
