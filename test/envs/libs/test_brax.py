"""Tests of the brax wrapper (skipped without brax). jit compilation takes 5-30 s per function
on 2 cores, so the tests that build an env share one and are marked slow."""

import sys

import pytest
import torch

from torchrl.envs import check_env_specs
from torchrl.envs.libs.brax import BraxEnv, BraxWrapper
from torchrl.envs.utils import step_mdp


def test_missing_brax_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "brax.envs", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[brax\]"'):
        BraxEnv("inverted_pendulum", batch_size=[4])


pytest.importorskip("jax")
pytest.importorskip("brax")


def test_wrapper_checks_its_input():
    with pytest.raises(TypeError, match="needs a brax Env"):
        BraxWrapper(object())


@pytest.fixture(scope="module")
def env():
    return BraxEnv("inverted_pendulum", batch_size=[4], seed=0)


@pytest.mark.slow
def test_inverted_pendulum_specs(env):
    check_env_specs(env)
    td = env.rollout(5, break_when_any_done=False)
    assert td["next", "observation"].shape == (4, 5, 4)
    assert td["next", "reward"].shape == (4, 5, 1)
    assert td["state", "pipeline_state", "q"].shape == (4, 5, 2)
    assert env.action_spec.shape == (4, 1)
    assert "BraxEnv(env=inverted_pendulum, backend=generalized" in repr(env)


@pytest.mark.slow
def test_zero_copy_and_seeding(env):
    env.set_seed(3)
    a = env.reset()
    env.set_seed(3)
    b = env.reset()
    assert torch.equal(a["observation"], b["observation"])
    assert not torch.equal(a["observation"][0], a["observation"][1])
    # the observation is the state's obs leaf itself: no copy between jax and torch
    assert a["observation"].data_ptr() == a["state", "obs"].data_ptr()


@pytest.mark.slow
def test_partial_reset_and_episode_end(env):
    td = env.reset()
    td = step_mdp(env.rand_step(td))
    q = td["state", "pipeline_state", "q"].clone()
    td["_reset"] = torch.tensor([[True], [False], [False], [True]])
    td = env.reset(td)
    assert torch.equal(td["state", "pipeline_state", "q"][1:3], q[1:3])
    assert not torch.equal(td["state", "pipeline_state", "q"][0], q[0])
    # full pushes topple the pole: episodes end (terminated), and are reset in place
    policy = lambda td: td.set("action", torch.ones(4, 1))  # noqa: E731
    out = env.rollout(60, policy, break_when_any_done=False)
    assert out["next", "terminated"].any() and not out["next", "truncated"].any()


@pytest.mark.slow
def test_policy_gradient_through_rollout_matches_finite_differences():
    from tensordict.nn import TensorDictModule

    env = BraxEnv("inverted_pendulum", batch_size=[2], seed=0, requires_grad=True)
    net = torch.nn.Linear(4, 1)
    with torch.no_grad():
        # a stabilizing start: the pole stays up for the 10 steps (no reset mid-rollout)
        net.weight.copy_(torch.tensor([[0.1, 1.0, 0.1, 0.3]]))
        net.bias.fill_(0.05)
    policy = TensorDictModule(lambda x: torch.tanh(net(x)), ["observation"], ["action"])

    def loss_fn():
        env.set_seed(0)
        td = env.rollout(10, policy)
        assert td.batch_size == (2, 10)
        return td["next", "observation"][..., :2].pow(2).sum()

    loss_fn().backward()
    grad = torch.cat([p.grad.flatten() for p in net.parameters()])
    eps = 1e-2
    numeric = []
    with torch.no_grad():
        for p in net.parameters():
            flat = p.view(-1)
            for i in range(flat.numel()):
                old = flat[i].item()
                flat[i] = old + eps
                up = loss_fn()
                flat[i] = old - eps
                down = loss_fn()
                flat[i] = old
                numeric.append((up - down) / (2 * eps))
    assert torch.allclose(grad, torch.stack(numeric), rtol=1e-2, atol=1e-3)
    assert grad.abs().min() > 0


def test_bad_batch_size():
    from brax import envs

    with pytest.raises(ValueError, match="supports batch sizes"):
        BraxWrapper(envs.get_environment("inverted_pendulum"), batch_size=[2, 2])
    with pytest.raises(ValueError, match="no env named 'nope'"):
        BraxEnv("nope")
