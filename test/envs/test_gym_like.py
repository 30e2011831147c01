"""Tests of ``GymLikeEnv`` (``torchrl.envs.gym_like``) on small hand-written gym-like envs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from torchrl.data import Categorical, Composite, OneHot, Unbounded
from torchrl.envs import GymLikeEnv, TransformedEnv
from torchrl.envs.gym_like import BaseInfoDictReader, default_info_dict_reader
from torchrl.envs.transforms import StepCounter
from torchrl.envs.utils import check_env_specs


class Walk:
    """A 1-d walk from 0: action 1 moves right, 0 left; ends at +3 (terminated) or after 5 steps.

    ``step`` uses the five-value API (``legacy=False``) or the older four-value one.
    """

    def __init__(self, legacy: bool = False, dict_obs: bool = False) -> None:
        self.legacy = legacy
        self.dict_obs = dict_obs
        self.pos = 0
        self.t = 0
        self.seeds: list[Any] = []
        self.actions: list[Any] = []
        self.closed = False

    def _obs(self) -> Any:
        pos = np.array([self.pos], dtype=np.float64)
        if self.dict_obs:
            return {"pos": pos, "inner": {"t": np.int64(self.t)}}
        return pos

    def reset(self, seed: int | None = None) -> Any:
        self.seeds.append(seed)
        self.pos, self.t = 0, 0
        if self.legacy:
            return self._obs()
        return self._obs(), {"start": 1.0}

    def step(self, action: Any) -> tuple[Any, ...]:
        self.actions.append(action)
        self.pos += 1 if action == 1 else -1
        self.t += 1
        terminated = self.pos >= 3
        truncated = self.t >= 5 and not terminated
        info = {"dist": float(abs(self.pos)), "_private": 1.0, "name": "walk"}
        if self.legacy:
            return self._obs(), float(self.pos), terminated or truncated, info
        return self._obs(), float(self.pos), terminated, truncated, info

    def render(self, scale: int = 1) -> np.ndarray:
        return np.full((2, 2, 3), self.pos * scale, dtype=np.uint8)

    def close(self) -> None:
        self.closed = True


class WalkEnv(GymLikeEnv):
    def __init__(self, env: Walk, one_hot: bool = False, **kwargs: Any) -> None:
        self.one_hot = one_hot
        super().__init__(env, **kwargs)

    def _make_specs(self, env: Walk) -> None:
        if env.dict_obs:
            self.observation_spec = Composite(
                pos=Unbounded(shape=(1,), dtype=torch.float64),
                inner=Composite(t=Unbounded(shape=(), dtype=torch.int64)),
            )
        else:
            self.observation_spec = Unbounded(shape=(1,), dtype=torch.float64)
        self.action_spec = OneHot(2) if self.one_hot else Categorical(2)


def right(td):
    td["action"] = torch.tensor(1)
    return td


def test_rollout_reads_obs_reward_done():
    env = WalkEnv(Walk())
    check_env_specs(env)
    env.env.actions.clear()
    rollout = env.rollout(10, policy=right)
    assert rollout.batch_size == torch.Size([3])
    assert rollout["next", "observation"].dtype == torch.float64
    assert rollout["next", "observation"].squeeze(-1).tolist() == [1.0, 2.0, 3.0]
    assert rollout["next", "reward"].squeeze(-1).tolist() == [1.0, 2.0, 3.0]
    assert rollout["next", "reward"].dtype == torch.float32
    assert rollout["next", "terminated"].squeeze(-1).tolist() == [False, False, True]
    assert not rollout["next", "truncated"].any()
    assert rollout["next", "done"].shape == (3, 1)
    # the env got Python ints (read_action turns a 0-d tensor into a number)
    assert env.env.actions == [1, 1, 1] and all(type(a) is int for a in env.env.actions)


def test_truncation_and_legacy_four_value_step():
    env = WalkEnv(Walk())
    rollout = env.rollout(10, policy=lambda td: td.set("action", torch.tensor(0)))
    assert rollout.batch_size == torch.Size([5])
    assert rollout["next", "truncated"][-1].item() and not rollout["next", "terminated"].any()
    legacy = WalkEnv(Walk(legacy=True))  # reset returns only obs; step returns 4 values
    rollout = legacy.rollout(10, policy=right)
    # the older API's done is read as terminated
    assert rollout["next", "terminated"].squeeze(-1).tolist() == [False, False, True]
    assert rollout["next", "done"][-1].item()


def test_one_hot_actions_become_indices():
    env = WalkEnv(Walk(), one_hot=True)
    env.rollout(2, policy=lambda td: td.set("action", torch.tensor([0, 1])))
    env.rollout(1, policy=lambda td: td.set("action", torch.tensor([True, False])))
    assert env.env.actions == [1, 1, 0]
    check_env_specs(env)  # random one-hot actions are bool


def test_dict_observations_keep_their_keys():
    env = WalkEnv(Walk(dict_obs=True))
    td = env.reset()
    assert td["pos"].dtype == torch.float64 and td["inner", "t"].item() == 0
    out = env.rand_step(td)
    assert out["next", "inner", "t"].item() == 1
    check_env_specs(env)


def test_read_hooks_can_be_overridden():
    class Scaled(WalkEnv):
        def read_reward(self, reward):
            return super().read_reward(reward * 10)

        def read_obs(self, observations):
            out = super().read_obs(observations)
            out["observation"] = out["observation"] * 2
            return out

        def read_action(self, action):
            return 1  # always right

    env = Scaled(Walk())
    rollout = env.rollout(10, policy=lambda td: td.set("action", torch.tensor(0)))
    assert rollout["next", "reward"].squeeze(-1).tolist() == [10.0, 20.0, 30.0]
    assert rollout["next", "observation"].squeeze(-1).tolist() == [2.0, 4.0, 6.0]


def test_read_done_completes_flags():
    env = WalkEnv(Walk())
    term, trunc, done, do_break = env.read_done(terminated=False, truncated=True)
    assert done.item() and trunc.item() and not term.item() and do_break
    assert term.shape == (1,)
    term, trunc, done, do_break = env.read_done(done=True)
    assert term.item() and not trunc.item() and do_break
    with pytest.raises(ValueError, match="no flag"):
        env.read_done()


def test_frame_skip_sums_rewards_and_stops_at_done():
    env = WalkEnv(Walk(), frame_skip=2)
    rollout = env.rollout(10, policy=right)
    # steps of 2: pos 2 (reward 1+2), then pos 3 ends the episode after one repeat (reward 3)
    assert rollout["next", "reward"].squeeze(-1).tolist() == [3.0, 3.0]
    assert rollout["next", "terminated"][-1].item()
    assert env.frame_skip == 2


def test_seed_goes_to_next_reset_and_render_close():
    walk = Walk()
    env = WalkEnv(walk)
    env.set_seed(7)
    env.reset()
    env.reset()
    assert walk.seeds == [7, None]
    assert env.render(scale=2).shape == (2, 2, 3)
    env.close()
    assert walk.closed


def test_info_dict_readers():
    env = WalkEnv(Walk())
    env.auto_register_info_dict()  # numeric, non-private keys: "start" and "dist"
    assert set(env.observation_spec.keys()) == {"observation", "start", "dist"}
    rollout = env.rollout(3, policy=right)
    assert rollout["next", "dist"].tolist() == [1.0, 2.0, 3.0]
    assert rollout["start"][0].item() == 1.0  # the reset's info
    check_env_specs(env)

    env = WalkEnv(Walk()).set_info_dict_reader(
        default_info_dict_reader(["dist"], spec=[Unbounded((), dtype=torch.float64)])
    )
    assert env.reset()["dist"].item() == 0.0  # missing at reset: zeros
    assert env.observation_spec["dist"].dtype == torch.float64
    assert isinstance(env.info_dict_reader[0], BaseInfoDictReader)


def test_info_reader_clash_and_bad_keys():
    env = WalkEnv(Walk())
    with pytest.raises(ValueError, match="clashes with an observation"):
        env.set_info_dict_reader(default_info_dict_reader(["observation"], spec=[Unbounded(1)]))
    with pytest.raises(TypeError, match="only numeric"):
        WalkEnv(Walk()).set_info_dict_reader(default_info_dict_reader(["name"]))


def test_errors():
    with pytest.raises(TypeError, match=r"reset\(\) method"):
        WalkEnv(object())  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="_make_specs"):
        GymLikeEnv(Walk())
    with pytest.raises(ValueError, match="frame_skip"):
        WalkEnv(Walk(), frame_skip=0)

    class Bad(Walk):
        def step(self, action):
            return (self._obs(), 1.0)

    env = WalkEnv(Bad())
    env.reset()
    with pytest.raises(ValueError, match="must return"):
        env.rand_step()

    class Extra(Walk):
        def _obs(self):
            return {"pos": np.zeros(1), "surprise": np.zeros(1)}

    env = WalkEnv(Extra(dict_obs=True))
    with pytest.raises(KeyError, match="surprise"):
        env.reset()


def test_works_with_transforms():
    env = TransformedEnv(WalkEnv(Walk()), StepCounter())
    rollout = env.rollout(10, policy=right)
    assert rollout["next", "step_count"].squeeze(-1).tolist() == [1, 2, 3]


class Pair:
    """Two walkers stepped together (a batched gym-like env, batch [2])."""

    def reset(self):
        self.pos = np.zeros((2, 1), dtype=np.float32)
        return self.pos.copy(), {}

    def step(self, action):
        self.pos += np.where(np.asarray(action).reshape(2, 1) == 1, 1.0, -1.0)
        terminated = (self.pos >= 2).reshape(2)
        return self.pos.copy(), self.pos.reshape(2), terminated, np.zeros(2, bool), {}


class PairEnv(GymLikeEnv):
    def _make_specs(self, env):
        self.observation_spec = Unbounded(shape=(2, 1))
        self.action_spec = OneHot(2, shape=(2, 2))


def test_batched_env_and_partial_reset_refused():
    env = PairEnv(Pair(), batch_size=[2])
    check_env_specs(env)
    actions = torch.tensor([[0, 1], [1, 0]])  # right, left
    rollout = env.rollout(2, policy=lambda td: td.set("action", actions))
    assert rollout["next", "observation"][:, :, 0].tolist() == [[1.0, 2.0], [-1.0, -2.0]]
    assert rollout["next", "terminated"][:, -1, 0].tolist() == [True, False]
    assert rollout["next", "reward"].shape == (2, 2, 1)
    with pytest.raises(NotImplementedError, match="partial reset"):
        env.reset(TensorDict(_reset=torch.tensor([[True], [False]]), batch_size=[2]))
    # nor can a rollout that goes on after one sub-env is done
    with pytest.raises(NotImplementedError, match="partial reset"):
        env.rollout(3, policy=lambda td: td.set("action", actions), break_when_any_done=False)
    assert (
        env.reset(TensorDict(_reset=torch.ones(2, 1, dtype=torch.bool), batch_size=[2]))[
            "observation"
        ]
        .eq(0)
        .all()
    )
