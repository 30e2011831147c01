"""DTypeCastTransform and DoubleToFloat."""

from __future__ import annotations

import pytest
import torch
from envs.transforms.transform_envs import DoubleEnv
from tensordict import TensorDict

from torchrl.envs import PendulumEnv, check_env_specs
from torchrl.envs.transforms import DoubleToFloat, DTypeCastTransform, TransformedEnv


class TestDoubleToFloat:
    def test_infers_keys(self):
        env = TransformedEnv(DoubleEnv(batch_size=[2]), DoubleToFloat())
        t = env.transform
        assert set(t.in_keys) == {"observation", "pos", "reward"}
        assert set(t.in_keys_inv) == {"pos", "action"}
        for key in ("observation", "pos"):
            assert env.observation_spec[key].dtype == torch.float32
        assert env.state_spec["pos"].dtype == torch.float32
        assert env.action_spec.dtype == torch.float32 and env.reward_spec.dtype == torch.float32
        check_env_specs(env)  # the base env raises unless actions come back as float64
        r = env.rollout(3)
        assert r["next", "observation"].dtype == torch.float32
        assert r["action"].dtype == torch.float32

    def test_explicit_keys(self):
        env = TransformedEnv(
            DoubleEnv(), DoubleToFloat(in_keys=["observation"], in_keys_inv=["action"])
        )
        assert env.observation_spec["observation"].dtype == torch.float32
        assert env.observation_spec["pos"].dtype == torch.float64
        assert env.action_spec.dtype == torch.float32
        check_env_specs(env)

    def test_out_keys(self):
        env = TransformedEnv(
            DoubleEnv(), DoubleToFloat(in_keys=["observation"], out_keys=["obs32"], in_keys_inv=[])
        )
        assert env.observation_spec["obs32"].dtype == torch.float32
        assert env.observation_spec["observation"].dtype == torch.float64
        check_env_specs(env)

    def test_module_use(self):
        td = TensorDict(a=torch.zeros(2, dtype=torch.float64), b=torch.zeros(2, dtype=torch.int64))
        out = DoubleToFloat()(td)
        assert out["a"].dtype == torch.float32 and out["b"].dtype == torch.int64

    def test_wrong_dtype_spec(self):
        with pytest.raises(TypeError, match="float64"):
            TransformedEnv(
                PendulumEnv(seed=0), DoubleToFloat(in_keys=["observation"], in_keys_inv=[])
            )


class TestDTypeCast:
    def test_float_to_double(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[2], seed=0),
            DTypeCastTransform(
                torch.float32, torch.float64, in_keys=["observation"], in_keys_inv=["action"]
            ),
        )
        check_env_specs(env)
        assert env.action_spec.dtype == torch.float64
        r = env.rollout(2)
        assert r["next", "observation"].dtype == torch.float64

    def test_bad_dtype(self):
        with pytest.raises(TypeError, match="dtype"):
            DTypeCastTransform("float32", torch.float64)
