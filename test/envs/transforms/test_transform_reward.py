"""RewardScaling, RewardClipping, TargetReturn."""

from __future__ import annotations

import pytest
import torch
from envs.transforms.transform_envs import AgentsEnv, CountEnv, has_gym
from tensordict import TensorDict

from torchrl.data import Bounded, Unbounded
from torchrl.envs import PendulumEnv, check_env_specs
from torchrl.envs.transforms import (
    RewardClipping,
    RewardScaling,
    RewardSum,
    StepCounter,
    TargetReturn,
    TransformedEnv,
)


class TestRewardScaling:
    @pytest.mark.parametrize("standard_normal", [False, True])
    def test_values(self, standard_normal):
        t = RewardScaling(loc=1.0, scale=2.0, standard_normal=standard_normal)
        out = t(TensorDict(reward=torch.tensor([3.0])))["reward"]
        assert out.item() == (1.0 if standard_normal else 7.0)

    def test_env(self):
        env = TransformedEnv(CountEnv(batch_size=[2]), RewardScaling(loc=-1.0, scale=0.5))
        check_env_specs(env)
        r = env.rollout(3)
        base_reward = r["action"].float() + 1
        torch.testing.assert_close(r["next", "reward"], base_reward * 0.5 - 1)
        # Sums see the scaled rewards when they come after.
        env.append_transform(RewardSum())
        r = env.rollout(3)
        torch.testing.assert_close(r["next", "episode_reward"][:, -1], r["next", "reward"].sum(1))

    def test_bounded_spec(self):
        base = CountEnv()
        base.reward_spec = Bounded(0.0, 2.0, shape=(1,))
        env = TransformedEnv(base, RewardScaling(loc=0.0, scale=-2.0))
        spec = env.reward_spec
        assert spec.low.item() == -4.0 and spec.high.item() == 0.0
        check_env_specs(env)

    def test_nested(self):
        env = TransformedEnv(AgentsEnv(), RewardScaling(0.0, 10.0))
        assert env.transform.in_keys == [("agents", "reward")]
        check_env_specs(env)

    def test_errors(self):
        with pytest.raises(ValueError, match="scale"):
            RewardScaling(0.0, 0.0)
        with pytest.raises(KeyError, match="RewardScaling.*'reward'"):
            RewardScaling(0.0, 1.0)(TensorDict(other=torch.zeros(1)))

    def test_double_reward(self):
        base = CountEnv()
        base.reward_spec = Unbounded(shape=(1,), dtype=torch.float64)
        orig = base._step

        def step(td):
            out = orig(td)
            out["reward"] = out["reward"].double()
            return out

        base._step = step
        env = TransformedEnv(base, RewardScaling(1.0, 2.0))
        check_env_specs(env)
        assert env.rollout(2)["next", "reward"].dtype == torch.float64


class TestRewardClipping:
    def test_env(self):
        env = TransformedEnv(PendulumEnv(batch_size=[4], seed=0), RewardClipping(-0.5, 0.0))
        check_env_specs(env)
        r = env.rollout(20)
        assert r["next", "reward"].min() >= -0.5
        assert env.reward_spec.low.unique().item() == -0.5

    def test_one_sided(self):
        env = TransformedEnv(CountEnv(), RewardClipping(clamp_max=1.5))
        check_env_specs(env)
        assert env.rollout(5)["next", "reward"].max() <= 1.5
        assert torch.isinf(env.reward_spec.low).all()

    def test_errors(self):
        with pytest.raises(ValueError, match="clamp_min"):
            RewardClipping()
        with pytest.raises(ValueError, match="<="):
            RewardClipping(1.0, 0.0)

    @pytest.mark.skipif(not has_gym(), reason="gymnasium not installed")
    def test_gym(self):
        from torchrl.envs import GymEnv

        env = TransformedEnv(GymEnv("Pendulum-v1"), RewardClipping(-1.0, 1.0))
        check_env_specs(env)


class TestTargetReturn:
    @pytest.mark.parametrize("mode", ["reduce", "constant"])
    def test_env(self, mode):
        env = TransformedEnv(
            CountEnv(batch_size=[2], max_steps=[2, 3]), TargetReturn(10.0, mode=mode)
        )
        check_env_specs(env)
        r = env.rollout(6, break_when_any_done=False)
        target = r["next", "target_return"][0].squeeze(-1)
        rewards = r["next", "reward"][0].squeeze(-1)
        if mode == "constant":
            assert (target == 10).all()
        else:
            # Episodes of 2 steps: the target restarts at 10 after each reset.
            expected = 10 - rewards.reshape(3, 2).cumsum(-1).reshape(-1)
            torch.testing.assert_close(target, expected)
            assert r["target_return"][0, 2].item() == 10.0
        assert "target_return" in env.state_spec.keys()

    def test_errors(self):
        with pytest.raises(ValueError, match="mode"):
            TargetReturn(1.0, mode="bad")
        with pytest.raises(KeyError, match="TargetReturn"):
            TransformedEnv(CountEnv(), TargetReturn(1.0, in_keys=["nope"]))
        with pytest.raises(RuntimeError, match="env"):
            TargetReturn(1.0)(TensorDict())

    def test_with_step_counter(self):
        env = TransformedEnv(PendulumEnv(seed=0), StepCounter(3))
        env.append_transform(TargetReturn(-5.0))
        check_env_specs(env)
