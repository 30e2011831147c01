"""Small pieces for the trainer tests: a fake collector, a counting env and a tiny loss."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.data import Composite, Unbounded
from torchrl.envs import EnvBase


class FakeCollector:
    """Yields ``frames_per_batch`` transitions whose observation is the global frame index."""

    def __init__(self, frames_per_batch: int = 10, total_frames: int = 100, stateful: bool = True):
        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.frames = 0
        self.updates = 0
        self.seeds: list[int] = []
        self.closed = False
        if not stateful:
            # A collector without state: the trainer reduces its total_frames on resume.
            self.state_dict = None  # type: ignore[assignment]
            self.load_state_dict = None  # type: ignore[assignment]

    def __iter__(self):
        while self.frames < self.total_frames:
            idx = torch.arange(
                self.frames, self.frames + self.frames_per_batch, dtype=torch.float32
            )
            self.frames += self.frames_per_batch
            yield TensorDict(
                {
                    "observation": idx.unsqueeze(-1),
                    "action": torch.ones(self.frames_per_batch, 1),
                    ("next", "reward"): (idx % 3).unsqueeze(-1),
                    ("next", "observation"): (idx + 1).unsqueeze(-1),
                    ("next", "done"): torch.zeros(self.frames_per_batch, 1, dtype=torch.bool),
                },
                batch_size=[self.frames_per_batch],
            )

    def update_policy_weights_(self) -> None:
        self.updates += 1

    def set_seed(self, seed: int) -> int:
        self.seeds.append(seed)
        return seed + 1

    def state_dict(self) -> dict[str, Any]:
        return {"frames": self.frames}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.frames = state["frames"]

    def shutdown(self) -> None:
        self.closed = True


class TinyLoss(nn.Module):
    """Regresses a linear value of the observation onto the reward, with a target copy."""

    def __init__(self) -> None:
        super().__init__()
        self.value = nn.Linear(1, 1)
        self.target_value = nn.Linear(1, 1).requires_grad_(False)
        self.target_value.load_state_dict(self.value.state_dict())

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        obs = td["observation"] / 100.0
        pred = self.value(obs)
        target = td["next", "reward"] + 0.0 * self.target_value(obs)
        td.set("td_error", (pred - target).detach().abs().squeeze(-1))
        return TensorDict(loss_value=((pred - target) ** 2).mean(), pred_mean=pred.detach().mean())

    @torch.no_grad()
    def update_target(self, tau: float = 0.1) -> None:
        for p, t in zip(self.value.parameters(), self.target_value.parameters(), strict=True):
            t.lerp_(p, tau)


class GlobalCounterEnv(EnvBase):
    """Observation = a global step counter that never resets (a buffer, so it is checkpointed).

    Episodes end every ``episode_len`` steps; the counter keeps going, so every frame of a run
    has a distinct observation.
    """

    def __init__(self, episode_len: int = 7) -> None:
        super().__init__(batch_size=())
        self.register_buffer("counter", torch.zeros((), dtype=torch.int64))
        self.register_buffer("in_episode", torch.zeros((), dtype=torch.int64))
        self.episode_len = episode_len
        self.observation_spec = Composite(observation=Unbounded(shape=(1,)), shape=())
        self.action_spec = Unbounded(shape=(1,))

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        self.in_episode.zero_()
        return TensorDict(observation=self.counter.float().reshape(1), batch_size=())

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.counter += 1
        self.in_episode += 1
        done = (self.in_episode >= self.episode_len).reshape(1)
        return TensorDict(
            observation=self.counter.float().reshape(1),
            reward=tensordict["action"].detach().float().reshape(1),
            done=done,
            terminated=done.clone(),
            truncated=torch.zeros_like(done),
            batch_size=(),
        )


def make_policy() -> TensorDictModule:
    return TensorDictModule(nn.Linear(1, 1), in_keys=["observation"], out_keys=["action"])
