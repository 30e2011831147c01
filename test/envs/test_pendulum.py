"""The stateless, batched PendulumEnv."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from torchrl._utils import has_module
from torchrl.envs import PendulumEnv, check_env_specs


@pytest.mark.parametrize("batch", [(), (4,), (2, 3)])
def test_check_env_specs(batch):
    check_env_specs(PendulumEnv(batch_size=batch, seed=0))


def test_check_env_specs_bigger_input():
    # A batch-unlocked env checked on an input with extra leading dims.
    check_env_specs(PendulumEnv(seed=0), tensordict=TensorDict(batch_size=[5]))
    check_env_specs(PendulumEnv(batch_size=[2], seed=0), tensordict=TensorDict(batch_size=[3, 2]))


def test_rollout_shapes_and_never_done():
    env = PendulumEnv(batch_size=[5], seed=0)
    r = env.rollout(50)
    assert r.batch_size == torch.Size([5, 50])
    assert r["observation"].shape == torch.Size([5, 50, 3])
    assert r["next", "reward"].shape == torch.Size([5, 50, 1])
    assert not r["next", "done"].any()
    assert (r["next", "reward"] <= 0).all()
    obs = r["next", "observation"]
    assert torch.allclose(obs[..., 0] ** 2 + obs[..., 1] ** 2, torch.ones(5, 50))
    assert (obs[..., 2].abs() <= 8).all()
    # Each step starts where the previous one ended.
    assert torch.equal(r["th"][:, 1:], r["next", "th"][:, :-1])


def test_seeding_reproducible():
    a = PendulumEnv(batch_size=[3], seed=1).rollout(10, policy=_zero_policy)
    b = PendulumEnv(batch_size=[3], seed=1).rollout(10, policy=_zero_policy)
    c = PendulumEnv(batch_size=[3], seed=2).rollout(10, policy=_zero_policy)
    assert torch.equal(a["observation"], b["observation"])
    assert not torch.equal(a["observation"], c["observation"])
    env = PendulumEnv(batch_size=[3])
    env.set_seed(1)
    assert torch.equal(env.reset()["th"], a["th"][:, 0])


def _zero_policy(td):
    td["action"] = torch.zeros(*td.batch_size, 1)
    return td


def test_seed_does_not_touch_global_rng():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    PendulumEnv(seed=3).rollout(5, policy=_zero_policy)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.skipif(not has_module("gymnasium"), reason="gymnasium not installed")
def test_matches_gymnasium_physics():
    import gymnasium as gym

    genv = gym.make("Pendulum-v1").unwrapped
    genv.reset(seed=0)
    # out-of-range torques reach the env's own clamp only without the action check
    env = PendulumEnv(batch_size=[4], seed=0, validate_actions=False)
    td = env.reset()
    torques = torch.tensor([[-3.0], [-0.5], [1.2], [2.0]])
    td["action"] = torques
    nxt = env.step(td)["next"]
    for i in range(4):
        genv.state = np.array([td["th"][i].item(), td["thdot"][i].item()])
        obs, reward, terminated, truncated, _ = genv.step(torques[i].numpy())
        np.testing.assert_allclose(nxt["observation"][i].numpy(), obs, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(nxt["reward"][i].item(), reward, rtol=1e-5, atol=1e-5)
        assert not terminated and not truncated


def test_batch_unlocked_inputs():
    env = PendulumEnv(seed=0)  # batch_size []
    assert not env.batch_locked
    td = env.reset(TensorDict(batch_size=[6]))
    assert td["observation"].shape == torch.Size([6, 3])
    assert td["params", "g"].shape == torch.Size([6])
    td = env.rand_step(td)
    assert td["next", "observation"].shape == torch.Size([6, 3])
    r = env.rollout(4, tensordict=TensorDict(batch_size=[6]), auto_reset=True)
    assert r.batch_size == torch.Size([6, 4])


def test_run_type_checks_unlocked_batch():
    env = PendulumEnv(seed=0)
    env.run_type_checks = True
    td = env.rand_step(env.reset(TensorDict(batch_size=[3])))
    assert td["next", "observation"].shape == torch.Size([3, 3])
    batched = PendulumEnv(batch_size=[2], seed=0)
    batched.run_type_checks = True
    batched.rollout(3)


def test_params_override_and_travel():
    params = PendulumEnv.gen_params([2], g=0.0, max_speed=100.0)
    env = PendulumEnv(batch_size=[2], td_params=params, seed=0)
    td = env.reset()
    assert (td["params", "g"] == 0).all()
    # Params given in the input win over the env's own.
    td = env.reset(PendulumEnv.gen_params([2], g=20.0))
    assert (td["params", "g"] == 20).all()
    td["thdot"] = torch.zeros(2)
    td["th"] = torch.full((2,), math.pi / 2)
    td["action"] = torch.zeros(2, 1)
    nxt = env.step(td)["next"]
    # thdot += 3 g / (2 l) sin(th) dt = 3 * 20 / 2 * 1 * 0.05
    assert torch.allclose(nxt["thdot"], torch.full((2,), 1.5))
    with pytest.raises(KeyError, match="unknown pendulum parameters"):
        PendulumEnv.gen_params(gravity=1.0)


def test_torque_and_speed_clamped():
    env = PendulumEnv(seed=0, validate_actions=False)  # 100 is out of the action spec
    td = env.reset()
    td["th"] = torch.tensor(math.pi / 2)
    td["thdot"] = torch.tensor(7.99)
    td["action"] = torch.tensor([100.0])
    nxt = env.step(td)["next"]
    assert nxt["thdot"].item() == pytest.approx(8.0)
    assert nxt["reward"].item() == pytest.approx(
        -((math.pi / 2) ** 2 + 0.1 * 7.99**2 + 0.001 * 4.0), rel=1e-5
    )


def test_partial_reset_keeps_others():
    env = PendulumEnv(batch_size=[3], seed=0)
    td = env.rand_step(env.reset())
    from torchrl.envs import step_mdp

    td = step_mdp(td)
    before = td["th"].clone()
    td["_reset"] = torch.tensor([[False], [True], [False]])
    td = env.reset(td)
    assert td["th"][0] == before[0] and td["th"][2] == before[2]
    assert td["th"][1] != before[1]
    assert torch.equal(td["observation"][:, 0], td["th"].cos())


def test_differentiable():
    env = PendulumEnv(batch_size=[2], seed=0)
    td = env.reset()
    action = torch.zeros(2, 1, requires_grad=True)
    td["action"] = action
    loss = env.step(td)["next", "reward"].sum()
    loss.backward()
    assert action.grad is not None and action.grad.shape == (2, 1)


def test_specs():
    env = PendulumEnv(batch_size=[2])
    assert set(env.observation_keys) >= {"observation", "th", "thdot"}
    assert set(env.state_keys) >= {"th", "thdot"}
    assert env.action_spec.shape == torch.Size([2, 1])
    assert env.full_done_spec["done"].dtype == torch.bool
