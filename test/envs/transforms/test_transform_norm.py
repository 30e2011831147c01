"""ObservationNorm (with init_stats) and VecNorm (running stats, sharing, state_dict, eval)."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch
from envs.transforms.transform_envs import CountEnv, has_gym
from tensordict import TensorDict

from torchrl.data import Bounded, Unbounded
from torchrl.data.replay_buffers import LazyTensorStorage, ReplayBuffer
from torchrl.envs import PendulumEnv, check_env_specs
from torchrl.envs.transforms import Compose, ObservationNorm, StepCounter, TransformedEnv, VecNorm


class TestObservationNorm:
    @pytest.mark.parametrize("standard_normal", [False, True])
    def test_values_and_inverse(self, standard_normal):
        t = ObservationNorm(
            loc=1.0,
            scale=2.0,
            in_keys=["obs"],
            in_keys_inv=["act"],
            standard_normal=standard_normal,
        )
        out = t(TensorDict(obs=torch.tensor([3.0])))["obs"].item()
        assert out == (1.0 if standard_normal else 7.0)
        back = t.inv(TensorDict(act=torch.tensor([out])))["act"].item()
        assert back == 3.0

    def test_bounded_spec(self):
        env = TransformedEnv(
            PendulumEnv(seed=0), ObservationNorm(loc=0.0, scale=-2.0, in_keys=["observation"])
        )
        spec = env.observation_spec["observation"]
        assert isinstance(spec, Bounded)
        assert spec.low.tolist() == [-2.0, -2.0, -16.0] and spec.high.tolist() == [2.0, 2.0, 16.0]
        check_env_specs(env)

    def test_init_stats(self):
        env = TransformedEnv(
            CountEnv(batch_size=[4], max_steps=[4, 4, 4, 4]), ObservationNorm(standard_normal=True)
        )
        norm = env.transform
        with pytest.raises(RuntimeError, match="init_stats"):
            env.reset()
        norm.init_stats(num_iter=16, reduce_dim=(0, 1))
        counts = torch.tensor([0.0, 1, 2, 3]).repeat(16)  # the observations seen at the root
        assert torch.allclose(norm.loc, counts.mean().reshape(1))
        assert torch.allclose(norm.scale, counts.std().reshape(1))
        check_env_specs(env)
        with pytest.raises(RuntimeError, match="already"):
            norm.init_stats(4)

    def test_init_stats_keep_dims(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[2], seed=0), ObservationNorm(in_keys=["observation"])
        )
        env.transform.init_stats(num_iter=5, reduce_dim=(0, 1), keep_dims=(0,))
        assert env.transform.loc.shape == (1, 3)

    def test_init_stats_needs_env(self):
        with pytest.raises(RuntimeError, match="TransformedEnv"):
            ObservationNorm().init_stats(3)

    def test_state_dict(self):
        t = ObservationNorm(loc=torch.ones(3), scale=torch.full((3,), 2.0))
        sd = t.state_dict()
        assert set(sd) == {"loc", "scale"}
        other = ObservationNorm(loc=torch.zeros(3), scale=torch.ones(3))
        other.load_state_dict(sd)
        assert torch.equal(other.scale, torch.full((3,), 2.0))


class TestVecNorm:
    def test_running_stats(self):
        t = VecNorm(in_keys=["obs"], decay=1.0)
        data = torch.randn(100, 3) * 4 + 2
        for chunk in data.split(10):
            t(TensorDict(obs=chunk, batch_size=[10]))
        mean, std = t.loc_scale()
        torch.testing.assert_close(mean, data.mean(0), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(std, data.std(0, unbiased=False), rtol=1e-3, atol=1e-3)
        out = t(TensorDict(obs=data[:10], batch_size=[10]))["obs"]
        assert out.shape == (10, 3)

    def test_env(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[4], seed=0), VecNorm(in_keys=["observation"], decay=0.99)
        )
        check_env_specs(env)
        assert isinstance(env.observation_spec["observation"], Unbounded)
        r = env.rollout(50)
        assert r["next", "observation"][:, -10:].abs().mean() < 3

    def test_eval_and_freeze(self):
        t = VecNorm(in_keys=["obs"])
        t(TensorDict(obs=torch.randn(8, 2), batch_size=[8]))
        count = t.stats["obs", "count"].clone()
        t.eval()
        t(TensorDict(obs=torch.randn(8, 2), batch_size=[8]))
        assert torch.equal(t.stats["obs", "count"], count)
        t.train()
        t.freeze()
        t(TensorDict(obs=torch.randn(8, 2), batch_size=[8]))
        assert torch.equal(t.stats["obs", "count"], count)
        t.unfreeze()
        t(TensorDict(obs=torch.randn(8, 2), batch_size=[8]))
        assert t.stats["obs", "count"] > count
        frozen = t.frozen_copy()
        assert frozen.frozen and frozen.stats is not t.stats

    def test_to_observation_norm(self):
        t = VecNorm(in_keys=["obs"], decay=1.0)
        data = TensorDict(obs=torch.randn(32, 3), batch_size=[32])
        t(data.clone())
        norm = t.to_observation_norm()
        assert isinstance(norm, ObservationNorm)
        t.eval()
        torch.testing.assert_close(norm(data.clone())["obs"], t(data.clone())["obs"])
        two = VecNorm(in_keys=["a", "b"])
        two(TensorDict(a=torch.randn(4, 1), b=torch.randn(4, 2), batch_size=[4]))
        assert isinstance(two.to_observation_norm(), Compose)

    def test_state_dict(self):
        t = VecNorm(in_keys=["obs", ("nested", "x")])
        t(
            TensorDict(
                obs=torch.randn(8, 2),
                nested=TensorDict(x=torch.randn(8, 1), batch_size=[8]),
                batch_size=[8],
            )
        )
        sd = t.state_dict()
        assert all(isinstance(v, torch.Tensor) for v in sd["_extra_state"].values())
        other = VecNorm(in_keys=["obs", ("nested", "x")])
        other.load_state_dict(sd)
        for key in ("obs", ("nested", "x")):
            for a, b in zip(other.loc_scale(key), t.loc_scale(key)):
                assert torch.equal(a, b)

    def test_shared_between_processes(self):
        env = PendulumEnv(batch_size=[2], seed=0)
        shared = VecNorm.build_td_for_shared_vecnorm(env, ["observation"])
        assert shared.is_shared()
        parent_side = VecNorm(in_keys=["observation"], shared_data=shared)
        ctx = mp.get_context("fork")
        proc = ctx.Process(target=_update_in_child, args=(shared,))
        proc.start()
        proc.join(30)
        assert proc.exitcode == 0
        assert parent_side.stats["observation", "count"].item() == pytest.approx(5 * 2)
        # load_state_dict writes in place: the statistics stay shared.
        parent_side.load_state_dict(parent_side.state_dict())
        assert parent_side.stats is shared

    def test_shared_missing_key(self):
        shared = VecNorm.build_td_for_shared_vecnorm(PendulumEnv(), ["observation"])
        t = VecNorm(in_keys=["thdot"], shared_data=shared)
        with pytest.raises(KeyError, match="build_td_for_shared_vecnorm"):
            t(TensorDict(thdot=torch.zeros(2), batch_size=[2]))

    def test_replay_buffer_eval(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[4], seed=0),
            Compose(StepCounter(10), VecNorm(in_keys=["observation"])),
        )
        raw = PendulumEnv(batch_size=[4], seed=1).rollout(10)
        env.rollout(20)
        vecnorm = env.transform[1]
        count = vecnorm.stats["observation", "count"].clone()
        rb_norm = vecnorm.frozen_copy()
        rb = ReplayBuffer(storage=LazyTensorStorage(100), transform=rb_norm, batch_size=8)
        rb.extend(raw.reshape(-1))
        sample = rb.sample()
        mean, std = vecnorm.loc_scale()
        # Sampled rows (and their next observations) are normalized with the env's statistics.
        stored = raw.reshape(-1)
        for key in ("observation", ("next", "observation")):
            rows = (sample[key] * std + mean).unsqueeze(1)
            assert ((rows - stored[key].unsqueeze(0)).abs().amax(-1).min(1).values < 1e-4).all()
        assert torch.equal(vecnorm.stats["observation", "count"], count)
        # In eval mode the env's own transform can be used too: it does not update.
        vecnorm.eval()
        rb2 = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=8)
        rb2.append_transform(vecnorm)
        rb2.extend(raw.reshape(-1))
        rb2.sample()
        assert torch.equal(vecnorm.stats["observation", "count"], count)

    def test_shapes(self):
        t = VecNorm(in_keys=["obs"], shapes=[(4,)], decay=1.0)
        data = torch.randn(8, 3, 4)
        t(TensorDict(obs=data, batch_size=[8]))
        mean, _ = t.loc_scale()
        torch.testing.assert_close(mean, data.reshape(-1, 4).mean(0))
        with pytest.raises(ValueError, match="declared shape"):
            t(TensorDict(obs=torch.randn(8, 3), batch_size=[8]))
        with pytest.raises(ValueError, match="shapes"):
            VecNorm(in_keys=["a", "b"], shapes=[(1,)])

    def test_errors(self):
        with pytest.raises(ValueError, match="decay"):
            VecNorm(decay=0.0)
        with pytest.raises(RuntimeError, match="no statistics"):
            VecNorm().loc_scale()

    @pytest.mark.skipif(not has_gym(), reason="gymnasium not installed")
    def test_gym(self):
        from torchrl.envs import GymEnv

        env = TransformedEnv(GymEnv("Pendulum-v1"), VecNorm())
        check_env_specs(env)


def _update_in_child(shared: TensorDict) -> None:
    t = VecNorm(in_keys=["observation"], shared_data=shared, decay=1.0)
    for _ in range(5):
        t(TensorDict(observation=torch.randn(2, 3), batch_size=[2]))
