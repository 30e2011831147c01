"""Tiny pure-torch envs for the transform tests (never shipped in the package)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase


class CountEnv(EnvBase):
    """Counts steps; sub-env ``i`` ends (terminates) after ``max_steps[i]`` steps.

    ``"observation"``: the count as float ``[*B, 1]``; action ``Categorical(2)`` ``[*B, 1]``,
    paid back as the reward (``action + 1``). Stateful; ``_reset`` honours ``"_reset"``.
    """

    def __init__(self, batch_size: Any = (), max_steps: Any = 5, **kwargs: Any) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        batch = self.batch_size
        self.max_steps = torch.as_tensor(max_steps).unsqueeze(-1).expand(*batch, 1).clone()
        self.count = torch.zeros(*batch, 1, dtype=torch.int64)
        self.observation_spec = Composite(
            observation=Unbounded(shape=(*batch, 1), dtype=torch.float32), shape=batch
        )
        self.action_spec = Categorical(2, shape=(*batch, 1))
        self.seeds: list[int | None] = []

    def _set_seed(self, seed: int | None) -> None:
        self.seeds.append(seed)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            self.count = torch.zeros_like(self.count)
        else:
            self.count = torch.where(mask, 0, self.count)
        return TensorDict(observation=self.count.float(), batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.count = self.count + 1
        end = self.count >= self.max_steps
        return TensorDict(
            observation=self.count.float(),
            reward=tensordict["action"].float() + 1,
            done=end,
            terminated=end.clone(),
            truncated=torch.zeros_like(end),
            batch_size=self.batch_size,
        )


class DoubleEnv(EnvBase):
    """float64 observations (``"observation"`` ``[*B, 2]``, a state ``"pos"`` ``[*B]``),
    float64 ``Bounded(-1, 1)`` action ``[*B, 1]`` and float64 reward; stateless (reads ``pos``)."""

    def __init__(self, batch_size: Any = ()) -> None:
        super().__init__(batch_size=batch_size)
        batch = self.batch_size
        f64 = torch.float64
        self.observation_spec = Composite(
            observation=Unbounded(shape=(*batch, 2), dtype=f64),
            pos=Unbounded(shape=batch, dtype=f64),
            shape=batch,
        )
        self.state_spec = Composite(pos=Unbounded(shape=batch, dtype=f64), shape=batch)
        self.action_spec = Bounded(-1.0, 1.0, shape=(*batch, 1), dtype=f64)
        self.reward_spec = Unbounded(shape=(*batch, 1), dtype=f64)

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _obs(self, pos: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"pos": pos, "observation": torch.stack([pos, -pos], -1)}

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        pos = torch.zeros(self.batch_size, dtype=torch.float64)
        return TensorDict(self._obs(pos), batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict["action"]
        if action.dtype != torch.float64:
            raise TypeError(f"DoubleEnv expects float64 actions, got {action.dtype}")
        pos = tensordict["pos"] + action.squeeze(-1)
        out = self._obs(pos)
        out["reward"] = pos.unsqueeze(-1).clone()
        return TensorDict(out, batch_size=self.batch_size)


class ImageEnv(EnvBase):
    """uint8 ``"pixels"`` ``[*B, H, W, 3]`` whose value is the step count (mod 256) plus a
    per-pixel pattern; action ``Bounded(-1, 1)`` ``[*B, 1]``; never done (add a StepCounter)."""

    def __init__(self, batch_size: Any = (), height: int = 12, width: int = 10) -> None:
        super().__init__(batch_size=batch_size)
        batch = self.batch_size
        self.hw = (height, width)
        self.count = torch.zeros(batch, dtype=torch.int64)
        self.observation_spec = Composite(
            pixels=Bounded(0, 255, shape=(*batch, height, width, 3), dtype=torch.uint8),
            shape=batch,
        )
        self.action_spec = Bounded(-1.0, 1.0, shape=(*batch, 1))
        pattern = torch.arange(height * width * 3).reshape(height, width, 3) % 7
        self.pattern = pattern

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _pixels(self) -> torch.Tensor:
        value = self.count.reshape(*self.count.shape, 1, 1, 1) * 10 + self.pattern
        return (value % 256).to(torch.uint8)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            self.count = torch.zeros_like(self.count)
        else:
            self.count = torch.where(mask.reshape(self.count.shape), 0, self.count)
        return TensorDict(pixels=self._pixels(), batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.count = self.count + 1
        return TensorDict(
            pixels=self._pixels(),
            reward=torch.zeros(*self.batch_size, 1),
            batch_size=self.batch_size,
        )


class MaskedEnv(EnvBase):
    """A ``Categorical(n)`` action (``[*B]``) constrained by an ``"action_mask"`` (``[*B, n]``).

    Only action ``count % n`` is allowed (with ``fixed``: actions ``0`` and ``n - 1``, always); a
    forbidden action raises. Ends after 10 steps.
    """

    def __init__(
        self, batch_size: Any = (), n: int = 4, one_hot: bool = False, fixed: bool = False
    ) -> None:
        super().__init__(batch_size=batch_size)
        batch = self.batch_size
        self.n = n
        self.one_hot = one_hot
        self.fixed = fixed
        self.count = torch.zeros(batch, dtype=torch.int64)
        self.observation_spec = Composite(
            action_mask=Categorical(2, shape=(*batch, n), dtype=torch.bool), shape=batch
        )
        from torchrl.data import OneHot

        self.action_spec = OneHot(n, shape=(*batch, n)) if one_hot else Categorical(n, shape=batch)

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _allowed(self, action: torch.Tensor) -> torch.Tensor:
        if self.fixed:
            return (action == 0) | (action == self.n - 1)
        return action == self.count % self.n

    def _mask(self) -> torch.Tensor:
        if self.fixed:
            mask = torch.zeros(*self.batch_size, self.n, dtype=torch.bool)
            mask[..., 0] = mask[..., -1] = True
            return mask
        return torch.nn.functional.one_hot(self.count % self.n, self.n).bool()

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        self.count = torch.zeros_like(self.count)
        return TensorDict(action_mask=self._mask(), batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict["action"]
        if self.one_hot:
            action = action.long().argmax(-1)
        if not bool(self._allowed(action).all()):
            raise ValueError(f"forbidden action {action} at count {self.count}")
        self.count = self.count + 1
        done = (self.count >= 10).unsqueeze(-1)
        return TensorDict(
            action_mask=self._mask(),
            reward=torch.ones(*self.batch_size, 1),
            done=done,
            batch_size=self.batch_size,
        )


class AgentsEnv(EnvBase):
    """Multi-agent nesting: a group ``"agents"`` of batch ``[*B, n]`` with its own observation,
    action (``Bounded``, ``[*B, n, 2]``), reward and done flags, plus root done flags.

    Agents and root end after ``max_steps``.
    """

    def __init__(self, batch_size: Any = (), n_agents: int = 3, max_steps: int = 4) -> None:
        super().__init__(batch_size=batch_size)
        batch = self.batch_size
        group = (*batch, n_agents)
        self.n_agents = n_agents
        self.max_steps = max_steps
        self.count = torch.zeros(*batch, 1, dtype=torch.int64)
        self.observation_spec = Composite(
            agents=Composite(observation=Unbounded(shape=(*group, 3)), shape=group), shape=batch
        )
        self.action_spec = Composite(
            agents=Composite(action=Bounded(-1.0, 1.0, shape=(*group, 2)), shape=group),
            shape=batch,
        )
        self.reward_spec = Composite(
            agents=Composite(reward=Unbounded(shape=(*group, 1)), shape=group), shape=batch
        )
        flag = Categorical(2, shape=(*group, 1), dtype=torch.bool)
        root = Categorical(2, shape=(*batch, 1), dtype=torch.bool)
        self.done_spec = Composite(
            done=root,
            terminated=root.clone(),
            truncated=root.clone(),
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
        obs = self.count.unsqueeze(-1).expand(*group, 3).float()
        return TensorDict(agents=TensorDict(observation=obs, batch_size=group), batch_size=batch)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            self.count = torch.zeros_like(self.count)
        else:
            self.count = torch.where(mask, 0, self.count)
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


def has_gym() -> bool:
    from torchrl._utils import has_module

    return has_module("gymnasium")
