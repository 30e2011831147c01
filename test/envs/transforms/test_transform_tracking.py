"""StepCounter, RewardSum, InitTracker, TensorDictPrimer."""

from __future__ import annotations

import pytest
import torch
from envs.transforms.transform_envs import AgentsEnv, CountEnv, has_gym
from tensordict import TensorDict

from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs import PendulumEnv, check_env_specs
from torchrl.envs.transforms import (
    Compose,
    InitTracker,
    RewardSum,
    StepCounter,
    TensorDictPrimer,
    TransformedEnv,
)

gym_only = pytest.mark.skipif(not has_gym(), reason="gymnasium not installed")


# ----------------------------------------------------------------------------- StepCounter
class TestStepCounter:
    def test_truncates(self):
        env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), StepCounter(max_steps=3))
        check_env_specs(env)
        r = env.rollout(7, break_when_any_done=False)
        assert r["next", "step_count"][0].squeeze(-1).tolist() == [1, 2, 3, 1, 2, 3, 1]
        assert r["step_count"][0].squeeze(-1).tolist() == [0, 1, 2, 0, 1, 2, 0]
        trunc = r["next", "truncated"][0].squeeze(-1)
        assert trunc.tolist() == [False, False, True, False, False, True, False]
        assert torch.equal(r["next", "done"], r["next", "truncated"])
        assert not r["next", "terminated"].any()
        spec = env.observation_spec["step_count"]
        assert isinstance(spec, Bounded) and spec.dtype == torch.int64 and spec.shape == (2, 1)
        assert "step_count" in env.state_spec.keys()

    def test_count_only(self):
        env = TransformedEnv(CountEnv(max_steps=4), StepCounter())
        check_env_specs(env)
        r = env.rollout(10)
        assert r["next", "step_count"].squeeze(-1).tolist() == [1, 2, 3, 4]
        assert r["next", "terminated"][-1].item() and not r["next", "truncated"].any()

    def test_keeps_base_truncation(self):
        env = TransformedEnv(CountEnv(max_steps=2), StepCounter(max_steps=10))
        r = env.rollout(5)
        assert r.shape == torch.Size([2]) and r["next", "done"][-1].item()

    def test_partial_reset(self):
        env = TransformedEnv(CountEnv(batch_size=[3], max_steps=[2, 3, 10]), StepCounter(4))
        r = env.rollout(6, break_when_any_done=False)
        counts = r["next", "step_count"].squeeze(-1).tolist()
        assert counts == [[1, 2, 1, 2, 1, 2], [1, 2, 3, 1, 2, 3], [1, 2, 3, 4, 1, 2]]
        assert r["next", "truncated"][2].squeeze(-1).tolist() == [0, 0, 0, 1, 0, 0]

    def test_manual_partial_reset(self):
        env = TransformedEnv(PendulumEnv(batch_size=[3], seed=0), StepCounter())
        td = env.reset()
        for _ in range(2):
            td = env.step(env.rand_action(td))
            td = td["next"].exclude("reward")
            td = TensorDict(td, batch_size=[3])
        td["_reset"] = torch.tensor([[True], [False], [True]])
        td = env.reset(td)
        assert td["step_count"].squeeze(-1).tolist() == [0, 2, 0]

    def test_nested_groups(self):
        env = TransformedEnv(AgentsEnv(batch_size=[2], max_steps=3), StepCounter(max_steps=2))
        check_env_specs(env)
        t = env.transform
        assert t.step_count_keys == ["step_count", ("agents", "step_count")]
        assert env.observation_spec["agents", "step_count"].shape == (2, 3, 1)
        r = env.rollout(5)
        assert r.shape == (2, 2)
        assert r["next", "agents", "truncated"][:, -1].all()
        assert r["next", "agents", "done"][:, -1].all()

    def test_missing_count(self):
        env = TransformedEnv(CountEnv(), StepCounter())
        td = TensorDict(observation=torch.zeros(1), action=torch.zeros(1, dtype=torch.long))
        with pytest.raises(KeyError, match="StepCounter.*'step_count'.*reset"):
            env.step(td)

    def test_bad_args_and_forward(self):
        with pytest.raises(ValueError, match="max_steps"):
            StepCounter(0)
        with pytest.raises(RuntimeError, match="StepCounter"):
            StepCounter()(TensorDict())

    @gym_only
    def test_gym(self):
        from torchrl.envs import GymEnv

        env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter(max_steps=5))
        check_env_specs(env)
        assert env.rollout(20).shape[0] <= 5


# ------------------------------------------------------------------------------- RewardSum
class TestRewardSum:
    def test_sum_and_reset(self):
        env = TransformedEnv(CountEnv(batch_size=[2], max_steps=[2, 3]), RewardSum())
        check_env_specs(env)
        td = env.reset()
        td["action"] = torch.ones(2, 1, dtype=torch.long)  # reward 2 per step
        sums = []
        for _ in range(4):
            transition, td = env.step_and_maybe_reset(td)
            td["action"] = torch.ones(2, 1, dtype=torch.long)
            sums.append(transition["next", "episode_reward"].squeeze(-1).tolist())
        assert sums == [[2, 2], [4, 4], [2, 6], [4, 2]]
        assert env.observation_spec["episode_reward"].dtype == torch.float32
        assert "episode_reward" in env.state_spec.keys()

    def test_nested_rewards(self):
        env = TransformedEnv(AgentsEnv(batch_size=[2]), RewardSum())
        check_env_specs(env)
        assert env.transform.out_keys == [("agents", "episode_reward")]
        assert env.transform.reset_keys == [("agents", "_reset")]
        r = env.rollout(3)
        torch.testing.assert_close(
            r["next", "agents", "episode_reward"][:, -1], r["next", "agents", "reward"].sum(1)
        )

    def test_custom_keys(self):
        env = TransformedEnv(PendulumEnv(seed=0), RewardSum(in_keys=["reward"], out_keys=["ret"]))
        check_env_specs(env)
        assert "ret" in env.observation_spec.keys()

    def test_unknown_key(self):
        with pytest.raises(KeyError, match="RewardSum.*'nope'"):
            TransformedEnv(PendulumEnv(seed=0), RewardSum(in_keys=["nope"]))

    def test_missing_sum(self):
        env = TransformedEnv(CountEnv(), RewardSum())
        td = TensorDict(observation=torch.zeros(1), action=torch.zeros(1, dtype=torch.long))
        with pytest.raises(KeyError, match="RewardSum.*episode_reward"):
            env.step(td)

    @gym_only
    def test_gym(self):
        from torchrl.envs import GymEnv

        env = TransformedEnv(GymEnv("CartPole-v1"), Compose(StepCounter(), RewardSum()))
        check_env_specs(env)
        r = env.rollout(500)
        assert r["next", "episode_reward"][-1].item() == r.shape[0]


# ------------------------------------------------------------------------------ InitTracker
class TestInitTracker:
    def test_flags(self):
        env = TransformedEnv(CountEnv(batch_size=[2], max_steps=[2, 3]), InitTracker())
        check_env_specs(env)
        r = env.rollout(5, break_when_any_done=False)
        assert r["is_init"].squeeze(-1).tolist() == [
            [True, False, True, False, True],
            [True, False, False, True, False],
        ]
        assert not r["next", "is_init"].any()
        assert env.observation_spec["is_init"].dtype == torch.bool

    def test_nested(self):
        env = TransformedEnv(AgentsEnv(batch_size=[2]), InitTracker())
        check_env_specs(env)
        assert env.transform.init_keys == ["is_init", ("agents", "is_init")]
        assert env.reset()["agents", "is_init"].shape == (2, 3, 1)

    def test_bad_key(self):
        with pytest.raises(TypeError, match="init_key"):
            InitTracker(init_key=("a", "b"))


# ------------------------------------------------------------------------ TensorDictPrimer
class TestPrimer:
    def test_specs_and_fill(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[3], seed=0),
            TensorDictPrimer(hidden=Unbounded(shape=(2, 4)), default_value=1.5),
        )
        check_env_specs(env)
        assert env.observation_spec["hidden"].shape == (3, 2, 4)
        assert env.state_spec["hidden"].shape == (3, 2, 4)
        td = env.reset()
        assert (td["hidden"] == 1.5).all()

    def test_carried_and_partial_reset(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[3], seed=0), TensorDictPrimer(h=Unbounded(shape=(2,)))
        )
        td = env.reset()
        td["h"] = torch.arange(6.0).reshape(3, 2)  # a policy writes its state
        td = env.step(env.rand_action(td))
        assert torch.equal(td["next", "h"], torch.arange(6.0).reshape(3, 2))
        nxt = td["next"].exclude("reward")
        nxt["_reset"] = torch.tensor([[False], [True], [False]])
        out = env.reset(nxt)
        assert out["h"].tolist() == [[0.0, 1.0], [0.0, 0.0], [4.0, 5.0]]

    def test_random_and_composite(self):
        primers = Composite(
            a=Bounded(2.0, 3.0, shape=(4,)), b=Unbounded(shape=(1,), dtype=torch.int64)
        )
        env = TransformedEnv(CountEnv(batch_size=[2]), TensorDictPrimer(primers, random=True))
        check_env_specs(env)
        td = env.reset()
        assert ((td["a"] >= 2) & (td["a"] <= 3)).all() and td["a"].shape == (2, 4)

    def test_expand_specs(self):
        # A shape that already starts with the batch size is kept unless expand_specs=True.
        env = TransformedEnv(CountEnv(batch_size=[2]), TensorDictPrimer(h=Unbounded(shape=(2, 5))))
        assert env.observation_spec["h"].shape == (2, 5)
        env = TransformedEnv(
            CountEnv(batch_size=[2]), TensorDictPrimer(h=Unbounded(shape=(2, 5)), expand_specs=True)
        )
        assert env.observation_spec["h"].shape == (2, 2, 5)
        with pytest.raises(ValueError, match="expand_specs=False"):
            TransformedEnv(
                CountEnv(batch_size=[2]),
                TensorDictPrimer(h=Unbounded(shape=(5,)), expand_specs=False),
            )

    def test_default_dict_and_callable(self):
        primer = TensorDictPrimer(
            a=Unbounded(shape=(2,)),
            b=Unbounded(shape=(2,)),
            default_value={"a": 2.0, "b": lambda: torch.ones(2) * 3},
        )
        td = primer(TensorDict(batch_size=[4]))
        assert (td["a"] == 2).all() and (td["b"] == 3).all() and td["a"].shape == (4, 2)

    def test_nested_primer(self):
        env = TransformedEnv(
            AgentsEnv(batch_size=[2]), TensorDictPrimer({("agents", "h"): Unbounded(shape=(3, 4))})
        )
        check_env_specs(env)
        assert env.reset()["agents", "h"].shape == (2, 3, 4)

    def test_errors(self):
        with pytest.raises(TypeError, match="leaf TensorSpec"):
            TensorDictPrimer(h=3)
        with pytest.raises(ValueError, match="random"):
            TensorDictPrimer(h=Unbounded(shape=(1,)), random=True, default_value=1.0)
        env = TransformedEnv(CountEnv(), TensorDictPrimer(h=Unbounded(shape=(1,))))
        td = env.reset().exclude("h")
        td["action"] = torch.zeros(1, dtype=torch.long)
        with pytest.raises(KeyError, match="TensorDictPrimer.*'h'"):
            env.step(td)


def test_batch_unlocked_env_with_other_batch():
    """A stateless env stepped with a batch of its own choosing: the tracking entries follow it."""
    from torchrl.envs.transforms import TargetReturn

    env = TransformedEnv(
        PendulumEnv(seed=0),
        Compose(
            StepCounter(3),
            RewardSum(),
            InitTracker(),
            TargetReturn(1.0),
            TensorDictPrimer(h=Unbounded(shape=(2,))),
        ),
    )
    r = env.rollout(5, tensordict=TensorDict(batch_size=[4]), break_when_any_done=False)
    assert r.batch_size == (4, 5)
    assert r["next", "step_count"][0].squeeze(-1).tolist() == [1, 2, 3, 1, 2]
    assert r["is_init"].shape == (4, 5, 1) and r["h"].shape == (4, 5, 2)
    assert r["next", "episode_reward"].shape == (4, 5, 1)
    assert r["next", "target_return"].shape == (4, 5, 1)
