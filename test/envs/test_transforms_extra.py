"""Transforms added for issue 17: SignTransform, BinarizeReward, ..."""

from __future__ import annotations

import pytest
import torch
from envs.transforms.transform_envs import CountEnv
from tensordict import TensorDict

from torchrl.data import Binary, Bounded, LazyTensorStorage, ReplayBuffer
from torchrl.envs import PendulumEnv, check_env_specs
from torchrl.envs.transforms import (
    BinarizeReward,
    RewardSum,
    SignTransform,
    TransformedEnv,
)


class TestSignTransform:
    def test_values(self):
        td = TensorDict(reward=torch.tensor([-2.0, 0.0, 0.5]), other=torch.tensor([-1.0]))
        out = SignTransform()(td)
        assert out["reward"].tolist() == [-1.0, 0.0, 1.0]
        assert out["other"].tolist() == [-1.0]

    def test_out_keys(self):
        td = TensorDict(observation=torch.tensor([-3.0, 4.0]))
        out = SignTransform(["observation"], ["sign"])(td)
        assert out["sign"].tolist() == [-1.0, 1.0]
        assert out["observation"].tolist() == [-3.0, 4.0]

    def test_env(self):
        env = TransformedEnv(PendulumEnv(seed=0), SignTransform(["reward", "observation"]))
        check_env_specs(env)
        assert isinstance(env.reward_spec, Bounded)
        assert isinstance(env.observation_spec["observation"], Bounded)
        r = env.rollout(5)
        assert set(r["next", "reward"].unique().tolist()) <= {-1.0, 0.0, 1.0}
        assert r["observation"].abs().le(1).all()

    def test_batched_env_and_sum(self):
        env = TransformedEnv(CountEnv(batch_size=[2]), SignTransform())
        env.append_transform(RewardSum())
        check_env_specs(env)
        r = env.rollout(3)
        assert (r["next", "reward"] == 1).all()
        assert (r["next", "episode_reward"][:, -1] == 3).all()

    def test_replay_buffer(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=SignTransform())
        rb.extend(TensorDict(reward=torch.tensor([[-2.0], [3.0]]), batch_size=[2]))
        assert set(rb.sample(4)["reward"].flatten().tolist()) <= {-1.0, 1.0}


class TestBinarizeReward:
    def test_values(self):
        td = TensorDict(reward=torch.tensor([-1.0, 0.0, 0.2]))
        out = BinarizeReward()(td)
        assert out["reward"].tolist() == [0, 0, 1]
        assert out["reward"].dtype == torch.int8

    def test_dtype(self):
        out = BinarizeReward(dtype=torch.bool)(TensorDict(reward=torch.tensor([2.0])))
        assert out["reward"].dtype == torch.bool
        with pytest.raises(ValueError, match="dtype"):
            BinarizeReward(dtype=torch.float32)

    def test_env(self):
        env = TransformedEnv(PendulumEnv(seed=0), BinarizeReward())
        check_env_specs(env)
        assert isinstance(env.reward_spec, Binary)
        r = env.rollout(4)
        # Pendulum's rewards are never positive.
        assert (r["next", "reward"] == 0).all()

    def test_batched_env(self):
        env = TransformedEnv(CountEnv(batch_size=[3]), BinarizeReward(out_keys=["bin"]))
        check_env_specs(env)
        r = env.rollout(3)
        assert (r["next", "bin"] == 1).all()
        assert r["next", "reward"].dtype == torch.float32

    def test_replay_buffer(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=BinarizeReward())
        rb.extend(TensorDict(reward=torch.tensor([[-2.0], [3.0]]), batch_size=[2]))
        assert set(rb.sample(4)["reward"].flatten().tolist()) <= {0, 1}
