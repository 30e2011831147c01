"""CatFrames (env and replay buffer), TimeMaxPool, FrameSkipTransform, NoopResetEnv."""

from __future__ import annotations

import pytest
import torch
from envs.transforms.transform_envs import CountEnv, ImageEnv, has_gym
from tensordict import TensorDict

from torchrl.data.replay_buffers import LazyTensorStorage, ReplayBuffer, SliceSampler
from torchrl.envs import PendulumEnv, check_env_specs
from torchrl.envs.transforms import (
    CatFrames,
    Compose,
    FrameSkipTransform,
    NoopResetEnv,
    RewardSum,
    StepCounter,
    TimeMaxPool,
    ToTensorImage,
    TransformedEnv,
)


def counts(stack: torch.Tensor) -> list:
    return stack.long().tolist()


class TestCatFramesEnv:
    def test_stacks_and_resets(self):
        env = TransformedEnv(
            CountEnv(batch_size=[2], max_steps=[3, 5]),
            CatFrames(N=3, dim=-1, in_keys=["observation"]),
        )
        check_env_specs(env)
        assert env.observation_spec["observation"].shape == (2, 3)
        r = env.rollout(5, break_when_any_done=False)
        # Sub-env 0 ends after 3 steps and restarts with a refilled stack; sub-env 1 goes on.
        assert counts(r["observation"][0]) == [
            [0, 0, 0],
            [0, 0, 1],
            [0, 1, 2],
            [0, 0, 0],
            [0, 0, 1],
        ]
        assert counts(r["next", "observation"][0]) == [
            [0, 0, 1],
            [0, 1, 2],
            [1, 2, 3],
            [0, 0, 1],
            [0, 1, 2],
        ]
        assert counts(r["observation"][1]) == [
            [0, 0, 0],
            [0, 0, 1],
            [0, 1, 2],
            [1, 2, 3],
            [2, 3, 4],
        ]

    def test_constant_padding_and_out_key(self):
        env = TransformedEnv(
            CountEnv(),
            CatFrames(
                N=3,
                dim=-1,
                in_keys=["observation"],
                out_keys=["stack"],
                padding="constant",
                padding_value=-1,
            ),
        )
        check_env_specs(env)
        r = env.rollout(2)
        assert counts(r["stack"]) == [[-1, -1, 0], [-1, 0, 1]]
        assert "observation" in r.keys()

    def test_pixels(self):
        env = TransformedEnv(
            ImageEnv(batch_size=[2]), Compose(StepCounter(3), ToTensorImage(), CatFrames(4, -3))
        )
        check_env_specs(env)
        assert env.observation_spec["pixels"].shape == (2, 12, 12, 10)

    def test_step_before_reset(self):
        env = TransformedEnv(CountEnv(), CatFrames(2, -1, in_keys=["observation"]))
        td = TensorDict(observation=torch.zeros(1), action=torch.zeros(1, dtype=torch.long))
        with pytest.raises(RuntimeError, match="reset"):
            env.step(td)

    def test_errors(self):
        with pytest.raises(ValueError, match="negative"):
            CatFrames(2, 0)
        with pytest.raises(ValueError, match="N"):
            CatFrames(0, -1)
        with pytest.raises(ValueError, match="padding"):
            CatFrames(2, -1, padding="reflect")

    @pytest.mark.skipif(not has_gym(), reason="gymnasium not installed")
    def test_gym(self):
        from torchrl.envs import GymEnv

        env = TransformedEnv(GymEnv("CartPole-v1"), CatFrames(4, -1, in_keys=["observation"]))
        check_env_specs(env)
        assert env.observation_spec["observation"].shape == (16,)


class TestCatFramesReplayBuffer:
    def test_rebuilds_env_stacks(self):
        """Stacking single frames of stored trajectories gives what the env would have stacked."""
        make = lambda: CountEnv(batch_size=[2], max_steps=[3, 5])  # noqa: E731
        stacked = TransformedEnv(make(), CatFrames(3, -1, in_keys=["observation"])).rollout(
            9, break_when_any_done=False
        )
        raw = make().rollout(9, break_when_any_done=False)
        rebuilt = CatFrames(3, -1, in_keys=["observation"])(raw.clone())
        assert torch.equal(rebuilt["observation"], stacked["observation"])
        assert torch.equal(rebuilt["next", "observation"], stacked["next", "observation"])

    def test_constant_padding(self):
        raw = CountEnv(max_steps=2).rollout(4, break_when_any_done=False)
        out = CatFrames(3, -1, in_keys=["observation"], padding="constant", padding_value=-1)(raw)
        assert counts(out["observation"]) == [[-1, -1, 0], [-1, 0, 1], [-1, -1, 0], [-1, 0, 1]]

    def test_slices_from_buffer(self):
        """Slices of stored trajectories: stacks never mix trajectories or slices."""
        raw = CountEnv(max_steps=6).rollout(24, break_when_any_done=False)  # 4 episodes of 6
        rb = ReplayBuffer(
            storage=LazyTensorStorage(24),
            sampler=SliceSampler(slice_len=4),
            transform=CatFrames(3, -1, in_keys=["observation"]),
            batch_size=12,
        )
        rb.extend(raw)
        sample = rb.sample()
        assert sample["observation"].shape == (12, 3)
        obs = sample["observation"].reshape(3, 4, 3)
        for row in obs:
            first = row[0, -1]
            # Inside a slice, frames increase by 1 and never go before the slice's first frame.
            expected = torch.stack(
                [
                    torch.clamp(row[t, -1] - torch.tensor([2.0, 1.0, 0.0]), min=first)
                    for t in range(4)
                ]
            )
            assert torch.equal(row, expected)

    def test_needs_time_dim(self):
        with pytest.raises(ValueError, match="time"):
            CatFrames(2, -1, in_keys=["observation"])(TensorDict(observation=torch.zeros(3)))


class TestTimeMaxPool:
    def test_env(self):
        env = TransformedEnv(
            CountEnv(batch_size=[2], max_steps=[2, 6]),
            TimeMaxPool(in_keys=["observation"], out_keys=["mx"], T=2),
        )
        check_env_specs(env)
        env_pend = TransformedEnv(
            PendulumEnv(seed=0), TimeMaxPool(in_keys=["thdot"], out_keys=["m"], T=3)
        )
        r = env_pend.rollout(6)
        expected = torch.stack([r["next", "thdot"][max(0, t - 2) : t + 1].max() for t in range(6)])
        first = r["thdot"][0]
        expected[:2] = torch.maximum(expected[:2], first)  # the reset frame is in the window
        torch.testing.assert_close(r["next", "m"], expected)

    def test_errors(self):
        with pytest.raises(ValueError, match="T"):
            TimeMaxPool(T=0)
        with pytest.raises(RuntimeError, match="env"):
            TimeMaxPool()(TensorDict(observation=torch.zeros(1)))


class TestFrameSkip:
    def test_sums_rewards(self):
        env = TransformedEnv(CountEnv(max_steps=100), Compose(StepCounter(), FrameSkipTransform(3)))
        check_env_specs(env)
        td = env.reset()
        td["action"] = torch.ones(1, dtype=torch.long)  # reward 2 per base step
        td = env.step(td)
        assert td["next", "reward"].item() == 6.0
        assert td["next", "observation"].item() == 3.0
        assert td["next", "step_count"].item() == 3  # placed before the skip: counts base steps
        after = TransformedEnv(
            CountEnv(max_steps=100), Compose(FrameSkipTransform(3), StepCounter())
        )
        td = after.reset()
        td["action"] = torch.ones(1, dtype=torch.long)
        assert after.step(td)["next", "step_count"].item() == 1

    def test_stops_at_done(self):
        env = TransformedEnv(CountEnv(max_steps=2), FrameSkipTransform(5))
        td = env.reset()
        td["action"] = torch.zeros(1, dtype=torch.long)
        td = env.step(td)
        assert td["next", "observation"].item() == 2.0 and td["next", "done"].item()
        assert td["next", "reward"].item() == 2.0

    def test_stateless_env(self):
        base = PendulumEnv(seed=0)
        env = TransformedEnv(PendulumEnv(seed=0), FrameSkipTransform(2))
        td = env.reset()
        td["action"] = torch.zeros(1)
        out = env.step(td.clone())
        ref = base.step(td.clone())
        ref2 = base.step(ref["next"].exclude("reward").set("action", torch.zeros(1)))
        torch.testing.assert_close(out["next", "th"], ref2["next", "th"])
        torch.testing.assert_close(
            out["next", "reward"], ref["next", "reward"] + ref2["next", "reward"]
        )

    def test_errors(self):
        with pytest.raises(ValueError, match="frame_skip"):
            FrameSkipTransform(0)


class TestNoopReset:
    def test_fixed(self):
        env = TransformedEnv(
            CountEnv(max_steps=100),
            Compose(StepCounter(), NoopResetEnv(noops=4, random=False), RewardSum()),
        )
        check_env_specs(env)
        td = env.reset()
        assert td["observation"].item() == 4 and td["step_count"].item() == 4
        assert td["episode_reward"].item() == 0  # RewardSum comes after: it starts at 0

    def test_random(self):
        env = TransformedEnv(CountEnv(max_steps=100), NoopResetEnv(noops=3))
        seen = {int(env.reset()["observation"].item()) for _ in range(30)}
        assert seen <= {0, 1, 2, 3} and len(seen) > 1

    def test_errors(self):
        env = TransformedEnv(CountEnv(batch_size=[2]), NoopResetEnv())
        with pytest.raises(ValueError, match="more than one done"):
            env.reset()
        env = TransformedEnv(CountEnv(max_steps=2), NoopResetEnv(noops=5, random=False))
        with pytest.raises(RuntimeError, match="noops"):
            env.reset()


def test_module_state_after_use():
    """The rolling stacks are plain attributes: state_dict, to() and deepcopy keep working."""
    import copy

    env = TransformedEnv(
        CountEnv(), Compose(CatFrames(2, -1, in_keys=["observation"]), TimeMaxPool(T=2))
    )
    env.rollout(3)
    assert env.transform.state_dict() == {}
    env.transform.to("cpu")
    check_env_specs(copy.deepcopy(env))
