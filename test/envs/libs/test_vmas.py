"""Tests of the VMAS wrapper (skipped when vmas is not installed, except the missing-package one)."""

import sys

import pytest
import torch

from torchrl.envs import MarlGroupMapType, check_env_specs
from torchrl.envs.libs.vmas import VmasEnv, VmasWrapper


def test_missing_vmas_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vmas", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[vmas\]"'):
        VmasEnv("navigation", num_envs=2)


vmas = pytest.importorskip("vmas")


def test_navigation_specs_and_shapes():
    env = VmasEnv("navigation", num_envs=32, seed=0)
    check_env_specs(env)
    assert env.batch_size == torch.Size([32])
    assert env.group_map == {"agents": ["agent_0", "agent_1", "agent_2", "agent_3"]}
    td = env.rollout(5)
    assert td.batch_size == torch.Size([32, 5])
    assert td["agents", "observation"].shape == (32, 5, 4, 18)
    assert td["agents", "action"].shape == (32, 5, 4, 2)
    assert td["next", "agents", "reward"].shape == (32, 5, 4, 1)
    assert td["next", "agents", "info", "pos_rew"].shape == (32, 5, 4)
    assert td["next", "done"].shape == (32, 5, 1)
    # VMAS ends episodes per sub-env: every agent sees its sub-env's flag
    done = td["next", "done"]
    assert (td["next", "agents", "done"] == done.unsqueeze(-2)).all()
    assert "VmasEnv(scenario=navigation" in repr(env)


def test_rewards_match_raw_vmas():
    env = VmasEnv("navigation", num_envs=4, n_agents=2)
    raw = vmas.make_env("navigation", num_envs=4, n_agents=2, terminated_truncated=True)
    # VMAS keeps one random state for all its envs: seed each right before its reset
    env.set_seed(3)
    td = env.reset()
    raw.seed(3)
    raw.reset()
    action = env.full_action_spec.rand()
    td = env.step(td.update(action))
    out = raw.step([action["agents", "action"][:, i] for i in range(2)])
    assert torch.allclose(td["next", "agents", "reward"][:, 0, 0], out[1][0])
    assert torch.allclose(td["next", "agents", "observation"][:, 1], out[0][1])


def test_seeding_is_reproducible():
    def run(seed):
        env = VmasEnv("navigation", num_envs=4, n_agents=2)
        env.set_seed(seed)
        torch.manual_seed(1)
        return env.rollout(3)["next", "agents", "observation"]

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))


def test_max_steps_truncates_and_partial_reset():
    env = VmasEnv("navigation", num_envs=3, max_steps=2, n_agents=2, seed=0)
    td = env.rollout(4, break_when_any_done=False)
    trunc = td["next", "truncated"].squeeze(-1)
    assert trunc[:, 1].all() and trunc[:, 3].all() and not trunc[:, 0].any()
    assert not td["next", "terminated"].any()
    td = env.reset()
    obs = td["agents", "observation"].clone()
    td["_reset"] = torch.tensor([[True], [False], [False]])
    td = env.reset(td)
    assert torch.equal(td["agents", "observation"][1:], obs[1:])
    assert not torch.equal(td["agents", "observation"][0], obs[0])
    # a group-level mask resets the same way
    td = env.rand_step(td)
    td = env.reset(td.get("next").clone())
    before = td["agents", "observation"].clone()
    td["agents", "_reset"] = torch.tensor([False, True, False]).view(3, 1, 1).expand(3, 2, 1)
    td = env.reset(td)
    assert torch.equal(td["agents", "observation"][0], before[0])
    assert not torch.equal(td["agents", "observation"][1], before[1])
    assert "_reset" not in td["agents"].keys()


@pytest.mark.parametrize(
    "categorical, kwargs, spec",
    [
        (True, {}, "Categorical"),
        (False, {}, "OneHot"),
        (True, {"multidiscrete_actions": True}, "MultiCategorical"),
        (False, {"multidiscrete_actions": True}, "MultiOneHot"),
    ],
)
def test_discrete_actions(categorical, kwargs, spec):
    env = VmasEnv(
        "simple_spread",
        num_envs=4,
        continuous_actions=False,
        categorical_actions=categorical,
        max_steps=2,
        **kwargs,
    )
    assert type(env.full_action_spec["agents", "action"]).__name__ == spec
    check_env_specs(env)


def test_group_maps():
    env = VmasEnv(
        "navigation", num_envs=2, n_agents=3, group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT
    )
    assert env.group_names == ["agent_0", "agent_1", "agent_2"]
    check_env_specs(env)
    td = env.rollout(2)
    assert td["next", "agent_1", "reward"].shape == (2, 2, 1, 1)
    env = VmasEnv(
        "navigation",
        num_envs=2,
        n_agents=3,
        group_map={"a": ["agent_0"], "b": ["agent_2", "agent_1"]},
    )
    check_env_specs(env)
    assert env.full_action_spec["b", "action"].shape == (2, 2, 2)
    with pytest.raises(ValueError, match="leaves out the agents"):
        VmasEnv("navigation", num_envs=2, n_agents=3, group_map={"a": ["agent_0"]})


def test_wrapper_checks_its_input():
    raw = vmas.make_env("navigation", num_envs=2)
    env = VmasWrapper(raw)
    assert env.env is raw and env.n_agents == 4
    check_env_specs(env)  # a raw env without terminated_truncated: done counts as terminated
    with pytest.raises(TypeError, match="needs a vmas Environment"):
        VmasWrapper(object())
    with pytest.raises(ValueError, match="differs from the VMAS env's device"):
        VmasWrapper(raw, device="meta")
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        VmasEnv("navigation", num_envs=0)


def test_transforms_on_group_keys():
    from torchrl.envs import RewardSum, StepCounter, TransformedEnv

    env = TransformedEnv(VmasEnv("navigation", num_envs=3, n_agents=2, max_steps=3), RewardSum())
    env.append_transform(StepCounter())
    check_env_specs(env)
    td = env.rollout(5, break_when_any_done=False)
    rewards = td["next", "agents", "reward"]
    returns = td["next", "agents", "episode_reward"]
    assert torch.allclose(returns[:, 2], rewards[:, :3].sum(1))
    assert torch.allclose(returns[:, 4], rewards[:, 3:5].sum(1))
    assert td["next", "step_count"][0].squeeze(-1).tolist() == [1, 2, 3, 1, 2]


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
        ),
    ],
)
def test_batched_on_device_with_a_policy_there(device):
    """VMAS simulates all sub-envs on ``device`` (the GPU: batched there); a collector with a
    policy on the same device keeps every tensor there, partial resets included."""
    from tensordict.nn import TensorDictModule
    from torch import nn

    from torchrl.collectors import SyncDataCollector
    from torchrl.modules import MultiAgentMLP

    env = VmasEnv("navigation", num_envs=512, n_agents=2, max_steps=8, seed=0, device=device)
    assert env.device.type == device
    check_env_specs(env)
    td = env.rollout(3)
    for key in [("agents", "observation"), ("next", "agents", "reward"), ("next", "done")]:
        assert td[key].device.type == device, key
    obs_dim = env.observation_spec["agents", "observation"].shape[-1]
    net = MultiAgentMLP(obs_dim, 2, n_agents=2, centralized=False, share_params=True, depth=1)
    policy = TensorDictModule(
        nn.Sequential(net, nn.Tanh()).to(device),
        [("agents", "observation")],
        [("agents", "action")],
    )
    collector = SyncDataCollector(env, policy, frames_per_batch=512 * 10, total_frames=512 * 20)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 2
    for batch in batches:
        assert batch.batch_size == torch.Size([512, 10])
        assert batch["agents", "action"].device.type == device
        assert batch["next", "agents", "observation"].device.type == device
        # max_steps=8 within 10 steps: every sub-env was truncated and reset once
        assert batch["next", "truncated"].any(-2).all()
