"""CatTensors, Exclude/Select/Rename, Flatten/Unsqueeze/Squeeze/Permute."""

from __future__ import annotations

import pytest
import torch
from envs.transforms.transform_envs import AgentsEnv, CountEnv, ImageEnv, has_gym
from tensordict import TensorDict

from torchrl.data import Bounded
from torchrl.envs import PendulumEnv, check_env_specs
from torchrl.envs.transforms import (
    CatTensors,
    Compose,
    ExcludeTransform,
    FlattenObservation,
    PermuteTransform,
    RenameTransform,
    SelectTransform,
    SqueezeTransform,
    StepCounter,
    ToTensorImage,
    TransformedEnv,
    UnsqueezeTransform,
)


class TestCatTensors:
    def test_env(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[2], seed=0), CatTensors(["observation", "thdot", "th"], "vec")
        )
        check_env_specs(env)
        # th and thdot are states the pendulum reads back: kept despite del_keys.
        assert {"th", "thdot"} <= set(env.observation_spec.keys())
        assert "observation" not in env.observation_spec.keys()
        r = env.rollout(3)
        # Sorted: observation (3), th, thdot.
        assert torch.equal(r["next", "vec"][..., 3], r["next", "th"])
        assert torch.equal(r["next", "vec"][..., 4], r["next", "thdot"])
        obs = r["next", "vec"][..., :3]
        torch.testing.assert_close(obs[..., 0], r["next", "th"].cos())
        spec = env.observation_spec["vec"]
        assert spec.shape == (2, 5) and not isinstance(spec, Bounded)

    def test_bounded_spec(self):
        env = TransformedEnv(
            PendulumEnv(seed=0), CatTensors(["observation", "thdot"], "vec", del_keys=False)
        )
        spec = env.observation_spec["vec"]
        assert isinstance(spec, Bounded) and spec.shape == (4,)
        assert spec.high[-1] == spec.high[-2] == 8.0
        check_env_specs(env)

    def test_inferred_keys(self):
        env = TransformedEnv(CountEnv(), CatTensors(out_key="vec"))
        assert env.transform.in_keys == ["observation"]
        check_env_specs(env)

    def test_module(self):
        t = CatTensors(["a", "b"], "c", dim=-2, del_keys=False)
        out = t(TensorDict(a=torch.zeros(2, 1, 3), b=torch.ones(2, 2, 3), batch_size=[2]))
        assert out["c"].shape == (2, 3, 3) and "a" in out.keys()

    def test_errors(self):
        with pytest.raises(ValueError, match="negative"):
            CatTensors(["a"], "b", dim=0)
        with pytest.raises(KeyError, match="CatTensors.*'b'"):
            CatTensors(["a", "b"], "c")(TensorDict(a=torch.zeros(1)))
        with pytest.raises(ValueError, match="cannot concatenate"):
            TransformedEnv(
                PendulumEnv(seed=0),
                CatTensors(
                    ["observation", ("params", "g")], "x", dim=-2, unsqueeze_if_needed=False
                ),
            )


class TestExcludeSelect:
    def test_exclude(self):
        env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), StepCounter())
        env.append_transform(ExcludeTransform("step_count", ("params", "g")))
        assert "step_count" not in env.observation_spec.keys()
        td = env.reset()
        assert "step_count" not in td.keys() and "g" not in td["params"].keys()
        env = TransformedEnv(CountEnv(batch_size=[2]), StepCounter())
        env.append_transform(ExcludeTransform("terminated"))
        check_env_specs(env)

    def test_exclude_inverse(self):
        env = TransformedEnv(CountEnv(), ExcludeTransform("junk", inverse=True))
        td = env.reset()
        td["action"] = torch.zeros(1, dtype=torch.long)
        td["junk"] = torch.zeros(1)
        env.step(td)
        assert "junk" in td.keys()  # removed from the base env's input only
        check_env_specs(env)

    def test_select(self):
        env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), StepCounter(3))
        env.append_transform(SelectTransform("observation"))
        check_env_specs(env)
        keys = set(env.observation_spec.keys())
        assert "step_count" in keys  # a state of StepCounter: kept
        assert keys == {"observation", "th", "thdot", "params", "step_count"}
        assert set(env.reward_spec.shape) == {2, 1}

    def test_select_drops(self):
        env = TransformedEnv(AgentsEnv(), SelectTransform(keep_dones=True))
        assert list(env.observation_spec.keys(True, True)) == []
        check_env_specs(env)

    def test_select_module(self):
        out = SelectTransform("a")(TensorDict(a=torch.zeros(1), b=torch.zeros(1)))
        assert list(out.keys()) == ["a"]


class TestRename:
    def test_env(self):
        env = TransformedEnv(
            PendulumEnv(seed=0),
            RenameTransform(
                ["observation", "th"], ["obs", "theta"], in_keys_inv=["th"], out_keys_inv=["theta"]
            ),
        )
        check_env_specs(env)
        assert "theta" in env.state_spec.keys() and "th" not in env.state_spec.keys()
        r = env.rollout(3)
        assert "theta" in r.keys() and "th" not in r.keys()

    def test_copy_and_reward(self):
        env = TransformedEnv(CountEnv(), RenameTransform(["reward"], ["r"], create_copy=True))
        check_env_specs(env)
        assert set(env.full_reward_spec.keys()) == {"reward", "r"}

    def test_action_rename(self):
        env = TransformedEnv(
            CountEnv(), RenameTransform([], [], in_keys_inv=["action"], out_keys_inv=["act"])
        )
        assert env.action_keys == ["act"]
        check_env_specs(env)
        assert "act" in env.rollout(2).keys()

    def test_errors(self):
        with pytest.raises(ValueError, match="out_keys_inv"):
            RenameTransform(["a"], ["b"], in_keys_inv=["c"])
        with pytest.raises(KeyError, match="RenameTransform.*'nope'"):
            TransformedEnv(CountEnv(), RenameTransform(["nope"], ["b"]))


class TestShapes:
    def test_flatten(self):
        env = TransformedEnv(
            ImageEnv(batch_size=[2]),
            Compose(ToTensorImage(), FlattenObservation(-3, -1, in_keys=["pixels"])),
        )
        check_env_specs(env)
        assert env.observation_spec["pixels"].shape == (2, 3 * 12 * 10)
        with pytest.raises(ValueError, match="negative"):
            FlattenObservation(0, 1)

    def test_unsqueeze_squeeze_roundtrip(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[2], seed=0),
            Compose(
                UnsqueezeTransform(-1, in_keys=["thdot"], out_keys=["thdot1"]),
                SqueezeTransform(
                    -1, in_keys=["thdot1"], out_keys=["thdot2"], in_keys_inv=["action"]
                ),
            ),
        )
        check_env_specs(env)
        assert env.observation_spec["thdot1"].shape == (2, 1)
        assert env.observation_spec["thdot2"].shape == (2,)
        assert env.action_spec.shape == (2,)
        r = env.rollout(2)
        assert torch.equal(r["next", "thdot2"], r["next", "thdot"])

    def test_unsqueeze_inverse(self):
        env = TransformedEnv(
            CountEnv(batch_size=[3]), UnsqueezeTransform(-1, in_keys_inv=["action"])
        )
        assert env.action_spec.shape == (3, 1, 1)
        check_env_specs(env)

    def test_squeeze_error(self):
        with pytest.raises(ValueError, match="size 1"):
            SqueezeTransform(-1, in_keys=["a"])(TensorDict(a=torch.zeros(3)))

    def test_permute(self):
        env = TransformedEnv(
            ImageEnv(batch_size=[2]), PermuteTransform((-1, -3, -2), in_keys=["pixels"])
        )
        check_env_specs(env)
        assert env.observation_spec["pixels"].shape == (2, 3, 12, 10)
        t = PermuteTransform((-2, -1, -3), in_keys_inv=["x"])
        x = torch.randn(4, 5, 6)
        assert torch.equal(t._inv_apply_transform(t._apply_transform(x)), x)
        with pytest.raises(ValueError, match="permutation"):
            PermuteTransform((0, -1))

    @pytest.mark.skipif(not has_gym(), reason="gymnasium not installed")
    def test_gym(self):
        from torchrl.envs import GymEnv

        env = TransformedEnv(GymEnv("Pendulum-v1"), UnsqueezeTransform(-2, in_keys=["observation"]))
        check_env_specs(env)
        assert env.observation_spec["observation"].shape == (1, 3)
