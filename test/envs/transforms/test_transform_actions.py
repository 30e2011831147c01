"""ActionMask, ClipTransform, ActionDiscretizer."""

from __future__ import annotations

import pytest
import torch
from envs.transforms.transform_envs import CountEnv, MaskedEnv, has_gym
from tensordict import TensorDict

from torchrl.data import Bounded, Categorical, MultiCategorical, MultiOneHot, OneHot
from torchrl.envs import PendulumEnv, RandomPolicy, check_env_specs
from torchrl.envs.transforms import (
    ActionDiscretizer,
    ActionMask,
    ClipTransform,
    StepCounter,
    TransformedEnv,
)


class TestActionMask:
    @pytest.mark.parametrize("one_hot", [False, True])
    def test_rand_action_respects_mask(self, one_hot):
        # MaskedEnv raises on a forbidden action: a 10-step rollout only works with the mask.
        env = TransformedEnv(MaskedEnv(batch_size=[3], one_hot=one_hot), ActionMask())
        r = env.rollout(10)
        assert r.shape == (3, 10)
        base = MaskedEnv(batch_size=[3], one_hot=one_hot)
        with pytest.raises(ValueError, match="forbidden"):
            base.rollout(10)

    @pytest.mark.parametrize("one_hot", [False, True])
    def test_check_env_specs(self, one_hot):
        # check_env_specs compares the whole rollout with the spec as it is at the end (one
        # mask): use an env whose mask does not change.
        env = TransformedEnv(MaskedEnv(batch_size=[3], one_hot=one_hot, fixed=True), ActionMask())
        check_env_specs(env)
        actions = env.rollout(10)["action"]
        if one_hot:
            actions = actions.long().argmax(-1)
        assert set(actions.unique().tolist()) == {0, 3}

    def test_random_policy_with_spec(self):
        env = TransformedEnv(MaskedEnv(), ActionMask())
        policy = RandomPolicy(env.action_spec)
        td = env.reset()
        for _ in range(5):
            td = env.step(policy(td))["next"]

    def test_spec_mask_tracks_observation(self):
        env = TransformedEnv(MaskedEnv(n=3), ActionMask())
        td = env.reset()
        assert env.action_spec.mask.tolist() == [True, False, False]
        env.step(env.rand_action(td))
        assert env.action_spec.mask.tolist() == [False, True, False]
        env.empty_cache()  # recomputed specs keep the last mask
        assert env.action_spec.mask.tolist() == [False, True, False]

    def test_errors(self):
        with pytest.raises(TypeError, match="Categorical"):
            TransformedEnv(PendulumEnv(), ActionMask(mask_key="observation"))
        with pytest.raises(KeyError, match="ActionMask.*'action_mask'"):
            TransformedEnv(CountEnv(), ActionMask())
        with pytest.raises(RuntimeError, match="TransformedEnv"):
            ActionMask()(TensorDict())


class TestClip:
    def test_observation(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[2], seed=0),
            ClipTransform(in_keys=["observation"], low=-0.5, high=0.5),
        )
        check_env_specs(env)
        spec = env.observation_spec["observation"]
        assert spec.low.max() == -0.5 and spec.high.min() == 0.5
        assert env.rollout(5)["next", "observation"].abs().max() <= 0.5

    def test_action_inverse(self):
        env = TransformedEnv(
            PendulumEnv(seed=0), ClipTransform(in_keys_inv=["action"], low=-0.1, high=0.1)
        )
        check_env_specs(env)
        assert env.action_spec.high.item() == pytest.approx(0.1)
        env = TransformedEnv(
            PendulumEnv(seed=0), ClipTransform(in_keys_inv=["action"], low=-0.1, high=0.1)
        )
        td = env.reset()
        td["action"] = torch.full((1,), 5.0)
        ref = PendulumEnv(seed=0)
        ref_td = ref.reset()
        ref_td["action"] = torch.full((1,), 0.1)
        torch.testing.assert_close(env.step(td)["next", "thdot"], ref.step(ref_td)["next", "thdot"])
        assert td["action"].item() == 5.0

    def test_reward(self):
        env = TransformedEnv(CountEnv(), ClipTransform(in_keys=["reward"], high=1.5))
        check_env_specs(env)
        assert env.rollout(5)["next", "reward"].max() <= 1.5

    def test_errors(self):
        with pytest.raises(ValueError, match="low"):
            ClipTransform(in_keys=["a"])
        with pytest.raises(ValueError, match="<="):
            ClipTransform(in_keys=["a"], low=1.0, high=0.0)


class TestActionDiscretizer:
    def test_one_dim(self):
        env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), ActionDiscretizer(5))
        check_env_specs(env)
        spec = env.action_spec
        assert isinstance(spec, Categorical) and spec.n == 5 and spec.shape == (2,)
        t = env.transform
        values = t.to_continuous(torch.arange(5).reshape(5, 1).expand(5, 2))
        assert values[:, 0, 0].tolist() == pytest.approx([-1.6, -0.8, 0.0, 0.8, 1.6])

    @pytest.mark.parametrize(
        "sampling,expected",
        [
            (ActionDiscretizer.SamplingStrategy.LOW, -2.0),
            (ActionDiscretizer.SamplingStrategy.HIGH, -1.0),
            (ActionDiscretizer.SamplingStrategy.MEDIAN, -1.5),
        ],
    )
    def test_sampling(self, sampling, expected):
        env = TransformedEnv(PendulumEnv(seed=0), ActionDiscretizer(4, sampling=sampling))
        assert env.transform.to_continuous(torch.tensor(0)).item() == pytest.approx(expected)

    def test_random_sampling(self):
        env = TransformedEnv(
            PendulumEnv(seed=0),
            ActionDiscretizer(4, sampling=ActionDiscretizer.SamplingStrategy.RANDOM),
        )
        values = torch.stack([env.transform.to_continuous(torch.tensor(1)) for _ in range(50)])
        assert values.min() >= -1.0 and values.max() <= 0.0 and values.std() > 0

    def test_multi_dim(self):
        base = PendulumEnv(seed=0)
        t = ActionDiscretizer(torch.tensor([3, 5]))
        leaf = Bounded(-1.0, 1.0, shape=(2,))
        spec = t._discrete_spec(leaf, "action")
        assert isinstance(spec, MultiCategorical) and spec.shape == (2,)
        assert t.to_continuous(torch.tensor([0, 4])).tolist() == pytest.approx([-2 / 3, 0.8])
        t = ActionDiscretizer(torch.tensor([3, 5]), categorical=False)
        spec = t._discrete_spec(leaf, "action")
        assert isinstance(spec, MultiOneHot) and spec.shape == (8,)
        onehot = torch.tensor([0, 0, 1, 1, 0, 0, 0, 0], dtype=torch.bool)
        assert t.to_continuous(onehot).tolist() == pytest.approx([2 / 3, -0.8])
        del base

    def test_one_hot_env(self):
        env = TransformedEnv(PendulumEnv(seed=0), ActionDiscretizer(3, categorical=False))
        assert isinstance(env.action_spec, OneHot)
        check_env_specs(env)

    def test_out_action_key(self):
        env = TransformedEnv(
            PendulumEnv(seed=0), ActionDiscretizer(3, out_action_key="action_discrete")
        )
        assert env.action_keys == ["action_discrete"]
        check_env_specs(env)
        r = env.rollout(2)
        assert "action" not in r.keys() and r["action_discrete"].dtype == torch.int64

    def test_with_step_counter(self):
        env = TransformedEnv(PendulumEnv(seed=0), StepCounter(3))
        env.append_transform(ActionDiscretizer(7))
        check_env_specs(env)

    def test_errors(self):
        with pytest.raises(TypeError, match="Bounded"):
            TransformedEnv(CountEnv(), ActionDiscretizer(3))
        with pytest.raises(ValueError, match="num_intervals"):
            ActionDiscretizer(0)
        with pytest.raises(ValueError, match="num_intervals"):
            TransformedEnv(PendulumEnv(), ActionDiscretizer(torch.tensor([2, 3])))

    @pytest.mark.skipif(not has_gym(), reason="gymnasium not installed")
    def test_gym(self):
        from torchrl.envs import GymEnv

        env = TransformedEnv(GymEnv("Pendulum-v1"), ActionDiscretizer(9))
        check_env_specs(env)
