"""Tests of the MO-Gymnasium wrappers (skipped when mo-gymnasium is not installed, but for one)."""

import sys
import warnings

import numpy as np
import pytest
import torch

from torchrl.envs import ParallelEnv, SerialEnv, check_env_specs
from torchrl.envs.libs.mo_gym import MOGymEnv, MOGymWrapper


def test_missing_mo_gymnasium_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mo_gymnasium", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[mo_gym\]"'):
        MOGymEnv("deep-sea-treasure-v0")


mo_gymnasium = pytest.importorskip("mo_gymnasium")
gym = pytest.importorskip("gymnasium")

# deep-sea-treasure's reward_space has float64 bounds: gymnasium warns on every make
pytestmark = pytest.mark.filterwarnings("ignore:.*precision lowered.*:UserWarning")

DST = "deep-sea-treasure-v0"


def _reference_rewards(env_id, seed, actions, **kwargs):
    env = mo_gymnasium.make(env_id, **kwargs)
    env.reset(seed=seed)
    out = []
    for a in actions:
        _, r, term, trunc, _ = env.step(a)
        out.append(np.asarray(r, dtype=np.float32))
        if term or trunc:
            break
    return np.stack(out)


def test_vector_reward_spec_and_values():
    env = MOGymEnv("mo-mountaincar-v0", categorical_action_encoding=True)
    check_env_specs(env)
    assert env.reward_spec.shape == (3,) and env.reward_dim == 3
    assert env.reward_spec.dtype == torch.float32
    env.set_seed(5)
    td = env.reset()
    actions = [0, 2, 1, 2, 2]
    rewards = []
    for a in actions:
        td["action"] = torch.tensor(a)
        out = env.step(td)
        rewards.append(out["next", "reward"])
        td = out["next"]
    expected = _reference_rewards("mo-mountaincar-v0", 5, actions)
    np.testing.assert_array_equal(torch.stack(rewards).numpy(), expected)


def test_deep_sea_treasure_terminal_treasure():
    env = MOGymEnv(DST, categorical_action_encoding=True)
    env.set_seed(0)
    # action 1 (down) from the start reaches the first treasure: (0.7 treasure, -1 time)
    td = env.reset()
    td["action"] = torch.tensor(1)
    out = env.step(td)["next"]
    assert out["reward"].tolist() == pytest.approx([0.7, -1.0])
    assert out["done"].item() and out["terminated"].item() and not out["truncated"].item()


def test_one_hot_actions_and_frame_skip_sums_the_vectors():
    plain = MOGymEnv("mo-mountaincar-v0")
    assert plain.action_spec.shape == (3,)
    skip = MOGymEnv("mo-mountaincar-v0", categorical_action_encoding=True, frame_skip=3)
    skip.set_seed(1)
    td = skip.reset()
    td["action"] = torch.tensor(2)
    reward = skip.step(td)["next", "reward"]
    expected = _reference_rewards("mo-mountaincar-v0", 1, [2, 2, 2]).sum(0)
    np.testing.assert_allclose(reward.numpy(), expected)


def test_seeding_is_reproducible():
    def run(seed):
        env = MOGymEnv("mo-mountaincar-v0", categorical_action_encoding=True)
        env.set_seed(seed)
        torch.manual_seed(seed)
        return env.rollout(20)

    a, b = run(3), run(3)
    assert torch.equal(a["next", "observation"], b["next", "observation"])
    assert torch.equal(a["next", "reward"], b["next", "reward"])
    assert not torch.equal(a["observation"][0], run(4)["observation"][0])


def test_bad_action_and_bad_inputs():
    env = MOGymEnv(DST, categorical_action_encoding=True)
    td = env.reset()
    td["action"] = torch.tensor(7)
    with pytest.raises(ValueError, match="action"):
        env.step(td)
    with pytest.raises(ValueError, match="not a multi-objective env"):
        MOGymWrapper(gym.make("CartPole-v1"))
    vec = gym.make_vec("CartPole-v1", num_envs=2)
    with pytest.raises(NotImplementedError, match="vector envs are not supported"):
        MOGymWrapper(vec)
    vec.close()
    with pytest.raises(NotImplementedError, match="num_envs"):
        MOGymEnv(DST, num_envs=2)
    assert DST in MOGymEnv.available_envs
    assert "CartPole-v1" not in MOGymEnv.available_envs


def test_serial_env_partial_reset():
    env = SerialEnv(2, lambda: MOGymEnv(DST, categorical_action_encoding=True))
    check_env_specs(env)
    env.set_seed(0)
    td = env.reset()
    assert env.reward_spec.shape == (2, 2)
    # sub-env 0 dives onto the first treasure (done), sub-env 1 moves right (not done)
    td["action"] = torch.tensor([1, 3])
    out, td = env.step_and_maybe_reset(td)
    assert out["next", "done"].squeeze(-1).tolist() == [True, False]
    assert out["next", "reward"][0].tolist() == pytest.approx([0.7, -1.0])
    assert td["observation"][0].tolist() == [0, 0]  # back at the start
    assert td["observation"][1].tolist() == out["next", "observation"][1].tolist()


def test_parallel_env_and_collector():
    from torchrl.collectors import SyncDataCollector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = ParallelEnv(2, lambda: MOGymEnv(DST, categorical_action_encoding=True))
    try:
        env.set_seed(0)
        collector = SyncDataCollector(env, None, frames_per_batch=20, total_frames=20)
        (batch,) = list(collector)
        collector.shutdown()
    finally:
        if not env.is_closed:
            env.close()
    assert batch["next", "reward"].shape == (2, 10, 2)
    # the time objective is -1 at every step of deep-sea-treasure
    assert (batch["next", "reward"][..., 1] == -1).all()
