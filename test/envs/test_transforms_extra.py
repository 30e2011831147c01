"""Transforms added for issue 17 (SignTransform, BinarizeReward, LineariseRewards, ...)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from envs.transforms.transform_envs import CountEnv, ImageEnv, has_gym
from tensordict import TensorDict, TensorDictBase

from torchrl.data import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    LazyTensorStorage,
    ReplayBuffer,
    Unbounded,
)
from torchrl.envs import EnvBase, PendulumEnv, check_env_specs
from torchrl.envs.transforms import (
    ActionScaling,
    BinarizeReward,
    Crop,
    DiscreteActionProjection,
    FiniteTensorDictCheck,
    LineariseRewards,
    RandomCropTensorDict,
    RemoveEmptySpecs,
    RewardSum,
    SignTransform,
    Stack,
    StepCounter,
    SuccessReward,
    ToTensorImage,
    TrajCounter,
    TransformedEnv,
    UnaryTransform,
)


class TwoObjectiveEnv(EnvBase):
    """Rewards ``[action, 1 - action]`` (bounded in ``[0, 1]``); poisons the obs when asked."""

    def __init__(self, batch_size: Any = (), nan_at: int | None = None) -> None:
        super().__init__(batch_size=batch_size)
        batch = self.batch_size
        self.observation_spec = Composite(observation=Unbounded(shape=(*batch, 1)), shape=batch)
        self.action_spec = Categorical(2, shape=(*batch, 1))
        self.reward_spec = Bounded(0.0, 1.0, shape=(*batch, 2))
        self.nan_at = nan_at
        self.t = 0

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        self.t = 0
        return TensorDict(observation=torch.zeros(*self.batch_size, 1), batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.t += 1
        action = tensordict["action"].float()
        obs = torch.full((*self.batch_size, 1), float(self.t))
        if self.nan_at is not None and self.t >= self.nan_at:
            obs = obs * float("nan")
        done = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return TensorDict(
            observation=obs,
            reward=torch.cat([action, 1 - action], -1),
            done=done,
            terminated=done.clone(),
            batch_size=self.batch_size,
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
        assert set(env.reset()["observation"].abs().unique().tolist()) <= {0.0, 1.0}

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


class TestLineariseRewards:
    def test_values(self):
        td = TensorDict(reward=torch.tensor([[1.0, 2.0], [3.0, -1.0]]), batch_size=[2])
        out = LineariseRewards(["reward"])(td)
        assert out["reward"].tolist() == [[3.0], [2.0]]
        td = TensorDict(reward=torch.tensor([[1.0, 2.0]]), batch_size=[1])
        out = LineariseRewards(["reward"], ["scalar"], weights=[2.0, 0.5])(td)
        assert out["scalar"].tolist() == [[3.0]]
        assert out["reward"].shape == (1, 2)

    def test_bad_weights(self):
        with pytest.raises(ValueError, match="one-dimensional"):
            LineariseRewards(["reward"], weights=[[1.0]])
        with pytest.raises(ValueError, match="objectives"):
            LineariseRewards(["reward"], weights=[1.0, 1.0, 1.0])(TensorDict(reward=torch.ones(2)))

    @pytest.mark.parametrize("batch_size", [(), (3,)])
    def test_env(self, batch_size):
        t = LineariseRewards(["reward"], weights=[1.0, -2.0])
        env = TransformedEnv(TwoObjectiveEnv(batch_size=batch_size), t)
        check_env_specs(env)
        spec = env.reward_spec
        assert isinstance(spec, Bounded)
        assert spec.shape == (*batch_size, 1)
        assert (spec.low == -2.0).all() and (spec.high == 1.0).all()
        r = env.rollout(4)
        a = r["action"].float()
        torch.testing.assert_close(r["next", "reward"], a - 2 * (1 - a))

    def test_unbounded_env(self):
        t = LineariseRewards(["reward", "reward"], ["r1", "r2"])
        env = TransformedEnv(PendulumEnv(seed=0), t)
        check_env_specs(env)
        assert isinstance(env.output_spec["full_reward_spec", "r1"], Unbounded)

    def test_replay_buffer(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=LineariseRewards(["reward"]))
        rb.extend(TensorDict(reward=torch.ones(4, 3), batch_size=[4]))
        assert (rb.sample(2)["reward"] == 3).all()


class TestFiniteTensorDictCheck:
    def test_module(self):
        t = FiniteTensorDictCheck()
        td = TensorDict(a=torch.ones(2), b=TensorDict(c=torch.arange(3)), batch_size=[])
        assert t(td) is td
        td["b", "d"] = torch.tensor([float("inf")])
        with pytest.raises(ValueError, match="'d'"):
            t(td)

    def test_env(self):
        env = TransformedEnv(PendulumEnv(seed=0), FiniteTensorDictCheck())
        check_env_specs(env)
        assert env.rollout(5).shape == (5,)

    def test_env_raises(self):
        env = TransformedEnv(TwoObjectiveEnv(nan_at=3), FiniteTensorDictCheck())
        env.rollout(2)
        with pytest.raises(ValueError, match="non-finite"):
            env.rollout(5)

    def test_replay_buffer(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=FiniteTensorDictCheck())
        rb.extend(TensorDict(obs=torch.tensor([[1.0], [float("nan")]]), batch_size=[2]))
        with pytest.raises(ValueError, match="non-finite"):
            for _ in range(20):
                rb.sample(2)


class TestUnaryTransform:
    def test_module(self):
        t = UnaryTransform(["x"], ["y"], fn=lambda v: v.sum(-1))
        out = t(TensorDict(x=torch.ones(2, 3), batch_size=[2]))
        assert out["y"].tolist() == [3.0, 3.0]
        with pytest.raises(TypeError, match="callable"):
            UnaryTransform(["x"], fn=3)  # type: ignore[arg-type]

    def test_env_out(self):
        t = UnaryTransform(["observation"], ["obs_int"], fn=lambda v: (v > 0).long())
        env = TransformedEnv(PendulumEnv(seed=0), t)
        check_env_specs(env)
        spec = env.observation_spec["obs_int"]
        assert spec.dtype == torch.int64 and spec.shape == (3,)
        r = env.rollout(3)
        assert (r["next", "obs_int"] == (r["next", "observation"] > 0).long()).all()

    def test_env_batched_reward(self):
        t = UnaryTransform(["reward"], fn=lambda r: r * 10)
        env = TransformedEnv(CountEnv(batch_size=[2]), t)
        check_env_specs(env)
        r = env.rollout(3)
        torch.testing.assert_close(r["next", "reward"], (r["action"].float() + 1) * 10)

    def test_env_inverse(self):
        t = UnaryTransform(
            in_keys_inv=["action"],
            out_keys_inv=["half_action"],
            fn=lambda v: v,
            inv_fn=lambda a: a / 2,
        )
        env = TransformedEnv(PendulumEnv(seed=0), t)
        assert "half_action" in env.full_action_spec.keys()
        assert "action" not in env.full_action_spec.keys()
        check_env_specs(env)
        td = env.reset()
        td["half_action"] = torch.tensor([1.0])
        out = env.step(td)
        assert "half_action" in out.keys()

    def test_replay_buffer(self):
        t = UnaryTransform(["obs"], fn=lambda v: v.abs())
        rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=t)
        rb.extend(TensorDict(obs=-torch.ones(3, 2), batch_size=[3]))
        assert (rb.sample(2)["obs"] == 1).all()


class TestTrajCounter:
    def test_env(self):
        env = TransformedEnv(PendulumEnv(seed=0), StepCounter(max_steps=3))
        counter = TrajCounter()
        env.append_transform(counter)
        check_env_specs(env)
        counter.count = 0  # check_env_specs made trajectories too
        r = env.rollout(9, break_when_any_done=False)
        assert r["next", "traj_count"].squeeze(-1).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
        assert r["traj_count"].squeeze(-1).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
        # The rollout's last reset (after step 9) started trajectory 3; a new reset goes on.
        assert env.reset()["traj_count"].item() == 4

    def test_batched_partial_resets(self):
        env = TransformedEnv(CountEnv(batch_size=[2], max_steps=[2, 3]), TrajCounter("traj"))
        check_env_specs(env)
        env.transform.count = 0  # check_env_specs made trajectories too
        r = env.rollout(6, break_when_any_done=False)
        assert r["next", "traj"].squeeze(-1).tolist() == [[0, 0, 2, 2, 4, 4], [1, 1, 1, 3, 3, 3]]

    def test_forward_raises(self):
        with pytest.raises(RuntimeError, match="env"):
            TrajCounter()(TensorDict())

    def test_missing_group(self):
        with pytest.raises(KeyError, match="done"):
            TransformedEnv(PendulumEnv(seed=0), TrajCounter(("agents", "traj_count"))).reset()


class TestRemoveEmptySpecs:
    def test_env(self):
        base = PendulumEnv(seed=0)
        base.observation_spec["info"] = Composite(shape=base.batch_size)
        base.observation_spec["nested"] = Composite(
            inner=Composite(shape=base.batch_size), shape=base.batch_size
        )
        env = TransformedEnv(base, RemoveEmptySpecs())
        keys = set(env.observation_spec.keys())
        assert "info" not in keys and "nested" not in keys
        assert "observation" in keys
        check_env_specs(env)

    def test_module(self):
        td = TensorDict(
            a=torch.ones(2), b=TensorDict(c=TensorDict()), d=TensorDict(e=torch.ones(1))
        )
        out = RemoveEmptySpecs()(td)
        assert set(out.keys(include_nested=True)) == {"a", "d", ("d", "e")}

    def test_inverse_puts_back_empty_inputs(self):
        base = PendulumEnv(seed=0)
        base.full_state_spec["memo"] = Composite(shape=base.batch_size)
        t = RemoveEmptySpecs()
        env = TransformedEnv(base, t)
        assert "memo" not in env.full_state_spec.keys()
        check_env_specs(env)
        td = env.reset()
        td["action"] = env.action_spec.rand()
        assert "memo" in t.inv(td).keys()


class TestActionScaling:
    @pytest.mark.parametrize("standard_normal", [True, False])
    def test_env(self, standard_normal):
        t = ActionScaling(standard_normal=standard_normal)
        env = TransformedEnv(PendulumEnv(seed=0), t)
        check_env_specs(env)
        low = -1.0 if standard_normal else 0.0
        assert env.action_spec.low.item() == low and env.action_spec.high.item() == 1.0
        td = env.reset()
        td["action"] = torch.tensor([1.0])
        assert t.inv(td)["action"].item() == 2.0
        td["action"] = torch.tensor([low])
        assert t.inv(td)["action"].item() == -2.0
        env.rollout(3)

    def test_policy_key(self):
        env = TransformedEnv(PendulumEnv(seed=0), ActionScaling(out_keys_inv=["norm_action"]))
        assert "norm_action" in env.full_action_spec.keys()
        check_env_specs(env)

    def test_explicit_and_replay_buffer(self):
        t = ActionScaling(in_keys=["action"], loc=1.0, scale=2.0)
        rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=t)
        assert (t(TensorDict(action=torch.full((1,), 5.0)))["action"] == 2.0).all()
        # Written through the inverse (to env units), read back through the forward pass.
        rb.extend(TensorDict(action=torch.full((3, 1), 2.0), batch_size=[3]))
        assert (rb.sample(2)["action"] == 2.0).all()
        with pytest.raises(ValueError, match="both"):
            ActionScaling(loc=1.0)

    def test_unbounded_needs_loc(self):
        with pytest.raises(TypeError, match="bounds"):
            TransformedEnv(CountEnv(), ActionScaling()).reset()


class TestSuccessReward:
    def test_module(self):
        td = TensorDict(success=torch.tensor([[1], [0]]), batch_size=[2])
        assert SuccessReward(scale=3.0)(td)["reward"].tolist() == [[3.0], [0.0]]

    def test_env(self):
        env = TransformedEnv(
            PendulumEnv(seed=0),
            UnaryTransform(["observation"], ["success"], fn=lambda o: o[..., :1] > 0),
        )
        env.append_transform(SuccessReward(scale=-2.0))
        check_env_specs(env)
        spec = env.reward_spec
        assert isinstance(spec, Bounded) and spec.low.item() == -2.0 and spec.high.item() == 0.0
        r = env.rollout(5)
        torch.testing.assert_close(r["next", "reward"], r["next", "success"].float() * -2.0)
        assert "reward" not in env.reset().keys()

    def test_missing_success(self):
        with pytest.raises(KeyError, match="success"):
            TransformedEnv(PendulumEnv(seed=0), SuccessReward()).reset()

    def test_replay_buffer(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=SuccessReward("ok", "r"))
        rb.extend(TensorDict(ok=torch.ones(3, 1, dtype=torch.bool), batch_size=[3]))
        assert (rb.sample(2)["r"] == 1.0).all()


class TestDiscreteActionProjection:
    def test_module(self):
        t = DiscreteActionProjection(3, 5)
        out = t.inv(TensorDict(action=torch.tensor([[0, 0, 1, 0, 0], [0, 0, 0, 0, 1]])))
        assert out["action"].shape == (2, 3)
        assert out["action"][0].tolist() == [0, 0, 1]
        assert out["action"].sum(-1).tolist() == [1, 1]
        assert t(TensorDict(action=torch.tensor([0, 1, 0])))["action"].tolist() == [0, 1, 0, 0, 0]
        with pytest.raises(ValueError, match="num_actions_effective"):
            DiscreteActionProjection(4, 3)

    @pytest.mark.skipif(not has_gym(), reason="gymnasium is not installed")
    def test_env(self):
        from torchrl.envs import GymEnv

        env = TransformedEnv(GymEnv("CartPole-v1"), DiscreteActionProjection(2, 6))
        assert env.action_spec.shape == (6,)
        check_env_specs(env)
        r = env.rollout(5)
        assert r["action"].shape[-1] == 6

    def test_replay_buffer(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=DiscreteActionProjection(2, 4))
        rb.extend(TensorDict(action=torch.tensor([[0, 1, 0, 0]] * 3), batch_size=[3]))
        assert rb.sample(2)["action"].tolist() == [[0, 1, 0, 0]] * 2

    def test_bad_spec(self):
        with pytest.raises(TypeError, match="OneHot"):
            TransformedEnv(CountEnv(), DiscreteActionProjection(2, 4)).reset()


class TestStack:
    def test_module(self):
        td = TensorDict(a=torch.zeros(2, 3), b=torch.ones(2, 3), batch_size=[2])
        out = Stack(["a", "b"], "ab", dim=-2)(td.clone())
        assert out["ab"].shape == (2, 2, 3) and "a" not in out.keys()
        assert (out["ab"][:, 1] == 1).all()
        out = Stack(["a", "b"], "ab", del_keys=False)(td.clone())
        assert out["ab"].shape == (2, 3, 2) and "a" in out.keys()
        with pytest.raises(ValueError, match="negative"):
            Stack(["a"], "x", dim=0)

    @pytest.mark.parametrize("batch_size", [(), (2,)])
    def test_env(self, batch_size):
        env = TransformedEnv(
            PendulumEnv(batch_size=batch_size, seed=0),
            UnaryTransform(["observation"], ["neg"], fn=lambda x: -x),
        )
        env.append_transform(Stack(["observation", "neg"], "both", dim=-2))
        check_env_specs(env)
        assert env.observation_spec["both"].shape == (*batch_size, 2, 3)
        assert "observation" not in env.observation_spec.keys()
        r = env.rollout(3)
        torch.testing.assert_close(r["next", "both"][..., 0, :], -r["next", "both"][..., 1, :])

    def test_bounded_spec(self):
        base = PendulumEnv(seed=0)
        base.observation_spec["lo"] = Bounded(-1.0, 1.0, shape=(2,))
        base.observation_spec["hi"] = Bounded(0.0, 5.0, shape=(2,))
        env = TransformedEnv(base, Stack(["lo", "hi"], "st"))
        spec = env.observation_spec["st"]
        assert isinstance(spec, Bounded) and spec.shape == (2, 2)
        assert spec.high[0].tolist() == [1.0, 5.0]

    def test_mismatch(self):
        base = PendulumEnv(seed=0)
        base.observation_spec["other"] = Unbounded(shape=(2,))
        with pytest.raises(ValueError, match="shape"):
            TransformedEnv(base, Stack(["observation", "other"], "st")).reset()


class TestCrop:
    def test_module(self):
        img = torch.arange(30.0).reshape(1, 5, 6)
        out = Crop(2, 3, top=3, left=3)(TensorDict(pixels=img))["pixels"]
        assert out.tolist() == [[[21.0, 22.0, 23.0], [27.0, 28.0, 29.0]]]
        with pytest.raises(ValueError, match="past"):
            Crop(4, top=3)(TensorDict(pixels=img))

    @pytest.mark.parametrize("batch_size", [(), (2,)])
    def test_env(self, batch_size):
        env = TransformedEnv(ImageEnv(batch_size=batch_size), ToTensorImage())
        env.append_transform(Crop(4, 5, top=2, left=1))
        check_env_specs(env)
        assert env.observation_spec["pixels"].shape == (*batch_size, 3, 4, 5)
        base = TransformedEnv(ImageEnv(batch_size=batch_size), ToTensorImage())
        torch.testing.assert_close(env.reset()["pixels"], base.reset()["pixels"][..., 2:6, 1:6])

    def test_replay_buffer(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=Crop(2, in_keys=["img"]))
        rb.extend(TensorDict(img=torch.ones(3, 1, 4, 4), batch_size=[3]))
        assert rb.sample(2)["img"].shape == (2, 1, 2, 2)


class TestRandomCropTensorDict:
    def _trajs(self):
        obs = torch.arange(10.0).expand(4, 10) + 100 * torch.arange(4.0).unsqueeze(-1)
        return TensorDict(obs=obs, batch_size=[4, 10])

    def test_module(self):
        torch.manual_seed(0)
        out = RandomCropTensorDict(3)(self._trajs())
        assert out.shape == (4, 3)
        assert (out["obs"].diff(dim=-1) == 1).all()
        # Each row keeps its own trajectory.
        assert ((out["obs"][:, 0] // 100) == torch.arange(4.0)).all()

    def test_sample_dim(self):
        td = self._trajs().transpose(0, 1).contiguous()
        out = RandomCropTensorDict(5, sample_dim=0)(td)
        assert out.shape == (5, 4)
        assert (out["obs"].diff(dim=0) == 1).all()

    def test_mask(self):
        td = self._trajs()
        mask = torch.zeros(4, 10, dtype=torch.bool)
        mask[:, :4] = True
        td["mask"] = mask
        for _ in range(10):
            out = RandomCropTensorDict(3, mask_key="mask")(td)
            assert out["mask"].all()

    def test_too_short(self):
        with pytest.raises(ValueError, match="shorter"):
            RandomCropTensorDict(11)(self._trajs())

    def test_not_in_env(self):
        with pytest.raises(Exception, match="RandomCropTensorDict"):
            TransformedEnv(PendulumEnv(seed=0), RandomCropTensorDict(2)).reset()
