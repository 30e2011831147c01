"""Tests of ProcgenEnv/ProcgenWrapper (skipped when procgen is not installed, but for one).

The first procgen env built in a process takes ~5 s (procgen loads its assets); later ones take
milliseconds, so the tests share one process-wide warm-up and use few ParallelEnv workers.
"""

import sys
import warnings

import numpy as np
import pytest
import torch

from torchrl.envs import ParallelEnv, SerialEnv, check_env_specs
from torchrl.envs.libs.procgen import ProcgenEnv, ProcgenWrapper


def test_missing_procgen_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "procgen", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[procgen\]"'):
        ProcgenEnv("coinrun")


procgen = pytest.importorskip("procgen")

# starpilot episodes end within ~50 random steps, coinrun's last hundreds
SHORT = "starpilot"


def make(num_envs=3, seed=0, game=SHORT):
    return ProcgenEnv(game, num_envs, distribution_mode="easy", seed=seed)


def make_one():
    return make(num_envs=1)


def _fixed_actions(steps, num_envs, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 15, (steps, num_envs)))


def _play(env, actions):
    td = env.reset()
    obs, rewards, dones = [td["observation"]], [], []
    for action in actions:
        td["action"] = action
        out, td = env.step_and_maybe_reset(td)
        obs.append(out["next", "observation"])
        rewards.append(out["next", "reward"])
        dones.append(out["next", "done"])
    return torch.stack(obs), torch.stack(rewards), torch.stack(dones)


def test_specs_and_names():
    env = make()
    check_env_specs(env)
    assert env.batch_size == (3,)
    spec = env.observation_spec["observation"]
    assert spec.shape == (3, 3, 64, 64) and spec.dtype == torch.uint8
    assert env.action_spec.n == 15 and env.action_spec.dtype == torch.int64
    assert env.reward_spec.shape == (3, 1) and env.reward_spec.dtype == torch.float32
    assert (
        env.env_name == SHORT and repr(env) == "ProcgenEnv(env=starpilot, num_envs=3, device=cpu)"
    )
    assert "coinrun" in ProcgenEnv.available_envs and len(ProcgenEnv.available_envs) == 16
    env.close()


def test_wrapper_accepts_gym3_and_baselines_envs():
    gym3_env = procgen.ProcgenGym3Env(num=2, env_name="coinrun", rand_seed=1)
    env = ProcgenWrapper(gym3_env)
    assert env.env is gym3_env and env.batch_size == (2,)
    # the frame is procgen's own, channels first; a reset at an episode start changes nothing
    _, obs, _ = gym3_env.observe()
    reset = env.reset()
    assert torch.equal(reset["observation"], torch.from_numpy(obs["rgb"]).permute(0, 3, 1, 2))
    check_env_specs(env)
    baselines = procgen.ProcgenEnv(2, "coinrun", rand_seed=1)
    assert ProcgenWrapper(baselines).env is baselines.env


def test_bad_arguments():
    with pytest.raises(ValueError, match="env_name must be one of"):
        ProcgenEnv("pong")
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        ProcgenEnv("coinrun", 0)
    with pytest.raises(TypeError, match="procgen env"):
        ProcgenWrapper(object())


def test_seeding_is_reproducible():
    actions = _fixed_actions(60, 3)
    a, b = make(seed=5), make(seed=5)
    obs_a, rew_a, done_a = _play(a, actions)
    obs_b, rew_b, done_b = _play(b, actions)
    assert torch.equal(obs_a, obs_b) and torch.equal(rew_a, rew_b) and torch.equal(done_a, done_b)
    assert done_a.any(), "no episode ended: the test does not cover the level restarts"
    # set_seed rebuilds the C env: same seed, same run; another seed, another run
    a.set_seed(5)
    again = _play(a, actions)
    assert torch.equal(again[0], obs_a)
    a.set_seed(6)
    other = _play(a, actions)
    assert not torch.equal(other[0], obs_a)


def test_done_step_shows_the_next_level_and_reset_keeps_it():
    env = make()
    td = env.reset()
    for action in _fixed_actions(200, 3):
        td["action"] = action
        out, td = env.step_and_maybe_reset(td)
        done = out["next", "done"].squeeze(-1)
        if done.any():
            break
    assert done.any()
    assert not out["next", "truncated"].any()
    assert torch.equal(out["next", "terminated"], out["next", "done"])
    # procgen restarted the finished sub-envs itself: the reset changes nothing
    assert torch.equal(td["observation"], out["next", "observation"])
    assert not td["done"].any()


def test_partial_reset_of_a_running_sub_env():
    env = make(seed=3)
    td = env.reset()
    start = td["observation"].clone()
    for action in _fixed_actions(10, 3):
        td["action"] = action
        td = env.step(td)["next"]
    assert not td["done"].any()
    before = td["observation"].clone()
    td["_reset"] = torch.tensor([[False], [True], [False]])
    td = env.reset(td)
    after = td["observation"]
    assert torch.equal(after[0], before[0]) and torch.equal(after[2], before[2])
    assert not torch.equal(after[1], before[1])
    # the env goes on from there (the fresh level is a new one, not a replay of the first)
    assert not torch.equal(after[1], start[1])
    td["action"] = torch.zeros(3, dtype=torch.int64)
    out = env.step(td)
    assert out["next", "observation"].shape == (3, 3, 64, 64)
    # a full reset after steps restarts every sub-env
    full = env.reset()
    assert not torch.equal(full["observation"], out["next", "observation"])


def test_serial_and_parallel_env_with_collector():
    from torchrl.collectors import SyncDataCollector

    serial = SerialEnv(2, make_one)
    check_env_specs(serial)
    serial.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = ParallelEnv(2, make_one)
    try:
        env.set_seed(0)
        collector = SyncDataCollector(env, None, frames_per_batch=200, total_frames=200)
        (batch,) = list(collector)
        collector.shutdown()
    finally:
        if not env.is_closed:
            env.close()
    # ParallelEnv of [1]-batched envs: batch [2, 1], then time
    assert batch["next", "observation"].shape == (2, 1, 100, 3, 64, 64)
    assert batch["next", "done"].any()
    # trajectories are split at the episode ends
    ends = batch["next", "done"].reshape(2, 100)
    traj = batch["collector", "traj_ids"].reshape(2, 100)
    assert (traj[:, 1:] != traj[:, :-1]).sum() == ends[:, :-1].sum()
