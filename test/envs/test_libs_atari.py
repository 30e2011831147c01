"""Atari through ale-py: GymEnv("ALE/..."), the preprocessing transforms and make_atari_env.

Skipped when ale-py (or gymnasium) is missing, except the missing-package test.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from torchrl.envs import (
    GymEnv,
    PendulumEnv,
    SerialEnv,
    StepCounter,
    TransformedEnv,
    check_env_specs,
)
from torchrl.envs.libs import atari as atari_lib
from torchrl.envs.libs.atari import atari_game_env, make_atari_env, register_ale_envs
from torchrl.envs.transforms.atari import MaxPoolFrameSkip


def test_missing_ale_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)
    monkeypatch.setattr(atari_lib, "_has_ale", False)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[atari\]"'):
        make_atari_env("ALE/Pong-v5")


# ------------------------------------------------------------------ MaxPoolFrameSkip, no ALE


def test_max_pool_frame_skip_pools_the_last_two_frames():
    torch.manual_seed(0)
    pooled = TransformedEnv(PendulumEnv(seed=0), StepCounter())
    pooled.append_transform(MaxPoolFrameSkip(3, in_keys=["th", "thdot"]))
    plain = PendulumEnv(seed=0)
    td_p = pooled.reset()
    for _ in range(4):
        action = torch.rand(1) * 4 - 2
        # Pendulum keeps its state in the data: the reference starts from the same data
        td_r = td_p.exclude("step_count").clone()
        td_p["action"] = action
        td_p = pooled.step(td_p)
        frames, reward = [], 0.0
        for _ in range(3):
            td_r["action"] = action
            td_r = plain.step(td_r)
            frames.append(td_r["next"].select("th", "thdot").clone())
            reward += td_r["next", "reward"]
            td_r = td_r["next"].clone()
        for key in ("th", "thdot"):
            expected = torch.maximum(frames[-2][key], frames[-1][key])
            torch.testing.assert_close(td_p["next", key], expected)
        torch.testing.assert_close(td_p["next", "reward"], reward)
        assert int(td_p["next", "step_count"]) == int(td_p["step_count"]) + 3
        td_p = td_p["next"].clone()
    check_env_specs(pooled)


def test_max_pool_frame_skip_errors():
    with pytest.raises(ValueError, match="pool must be in"):
        MaxPoolFrameSkip(2, pool=3)
    with pytest.raises(ValueError, match="frame_skip must be >= 1"):
        MaxPoolFrameSkip(0)
    env = TransformedEnv(PendulumEnv(seed=0), MaxPoolFrameSkip(2, in_keys=["pixels"]))
    with pytest.raises(KeyError, match="'pixels' to max-pool is missing"):
        env.rollout(2)
    with pytest.raises(RuntimeError, match="use it in a TransformedEnv"):
        MaxPoolFrameSkip(2)(env.reset())


# ------------------------------------------------------------------------------ with ale-py

pytest.importorskip("gymnasium")
pytest.importorskip("ale_py")
import gymnasium as gym  # noqa: E402


def _random_actions(env, steps, seed=0):
    gen = torch.Generator().manual_seed(seed)
    n = int(env.action_spec.space.n)
    return torch.randint(n, (steps, *env.batch_size), generator=gen)


def test_gym_env_ale_id_after_registration():
    register_ale_envs()
    register_ale_envs()  # a second call is a no-op
    env = GymEnv("ALE/Pong-v5", categorical_action_encoding=True)
    check_env_specs(env)
    assert env.observation_spec["observation"].shape == (210, 160, 3)
    env.close()


def test_gym_env_registers_ale_ids_lazily(monkeypatch):
    """``GymEnv("ALE/...")`` with the ids not registered yet (the registration hook in GymEnv)."""
    registry = gym.envs.registry
    for key in [k for k in registry if k.startswith("ALE/")]:
        monkeypatch.delitem(registry, key)
    env = GymEnv("ALE/Pong-v5")
    assert env.observation_spec["observation"].shape == (210, 160, 3)
    env.close()


@pytest.mark.parametrize("obs_type", ["rgb", "grayscale"])
def test_make_atari_env_specs_and_output(obs_type):
    env = make_atari_env("ALE/Breakout-v5", 2, obs_type=obs_type, seed=0)
    check_env_specs(env)
    spec = env.observation_spec
    assert spec["pixels"].shape == (2, 4, 84, 84) and spec["pixels"].dtype == torch.float32
    assert set(spec.keys()) == {"pixels", "lives", "end-of-life"}
    td = env.rollout(20, break_when_any_done=False)
    pixels = td["next", "pixels"]
    assert pixels.shape == (2, 20, 4, 84, 84)
    assert pixels.min() >= 0 and pixels.max() <= 1 and pixels.std() > 0
    assert set(td["next", "reward"].unique().tolist()) <= {-1.0, 0.0, 1.0}
    env.close()


def test_single_game_and_serial_env():
    game = atari_game_env("Pong-v5", noop_max=2)  # the ALE/ prefix may be left out
    check_env_specs(game)
    assert game.batch_size == () and game.action_spec.space.n == 6
    env = SerialEnv(2, lambda: atari_game_env("ALE/Pong-v5", noop_max=2))
    check_env_specs(env)
    assert env.rollout(3)["next", "observation"].shape == (2, 3, 210, 160)
    env.close()


def test_parallel_env_and_collector():
    from torchrl.collectors import SyncDataCollector

    env = make_atari_env("ALE/Pong-v5", 2, parallel=True, noop_max=4, seed=0)
    try:
        collector = SyncDataCollector(env, None, frames_per_batch=32, total_frames=64)
        batches = list(collector)
        assert len(batches) == 2
        assert batches[0]["next", "pixels"].shape == (2, 16, 4, 84, 84)
        assert (batches[1]["collector", "traj_ids"] >= 0).all()
        collector.shutdown()
    finally:
        if not env.is_closed:
            env.close()


def _rollout(seed, steps=12):
    env = make_atari_env("ALE/Breakout-v5", 2, seed=seed)
    actions = _random_actions(env, steps)
    td = env.reset()
    frames = []
    for t in range(steps):
        td["action"] = actions[t]
        out, td = env.step_and_maybe_reset(td)
        frames.append(out["next", "pixels"])
    env.close()
    return torch.stack(frames)


def test_seeding_is_reproducible():
    first, again, other = _rollout(3), _rollout(3), _rollout(4)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_frame_skip_and_grey_resize_match_a_hand_computation():
    """One game, 4 frames per step: the pixels are the grey 84x84 max of the last two frames."""
    cv2 = pytest.importorskip("cv2")
    env = make_atari_env("ALE/Breakout-v5", 0, noop_max=0, frame_stack=1, seed=5)
    register_ale_envs()
    raw = gym.make("ALE/Breakout-v5", frameskip=1, obs_type="grayscale")
    raw.reset(seed=5)
    td = env.reset()
    actions = _random_actions(env, 30)
    for t in range(30):
        td["action"] = actions[t]
        td = env.step(td)
        frames, reward = [], 0.0
        for _ in range(4):
            obs, r, terminated, truncated, _ = raw.step(int(actions[t]))
            frames.append(obs)
            reward += r
        pooled = np.maximum(frames[-2], frames[-1])
        # resized as gymnasium's AtariPreprocessing does, then scaled to [0, 1]
        resized = cv2.resize(pooled, (84, 84), interpolation=cv2.INTER_AREA)
        expected = torch.from_numpy(resized).float().div(255)
        assert torch.equal(td["next", "pixels"][0], expected)
        assert float(td["next", "reward"]) == float(np.sign(reward))
        td = td["next"].clone()
    env.close()
    raw.close()


def test_an_episode_ending_inside_a_step_pools_the_frames_it_saw():
    """ALE truncates after 10 frames: the third step stops at its second frame."""
    game = atari_game_env("ALE/Breakout-v5", noop_max=0, max_episode_frames=10, episodic_life=False)
    game.set_seed(3)
    register_ale_envs()
    raw = gym.make(
        "ALE/Breakout-v5", frameskip=1, obs_type="grayscale", max_num_frames_per_episode=10
    )
    raw.reset(seed=3)
    td = game.reset()
    for t in range(3):
        td["action"] = torch.tensor(1)
        td = game.step(td)
        frames, reward = [], 0.0
        for _ in range(4):
            obs, r, terminated, truncated, _ = raw.step(1)
            frames.append(obs)
            reward += r
            if terminated or truncated:
                break
        assert len(frames) == (2 if t == 2 else 4)
        expected = np.maximum(frames[-2], frames[-1])
        assert torch.equal(td["next", "observation"], torch.from_numpy(expected))
        assert bool(td["next", "truncated"]) == (t == 2)
        td = td["next"].clone()
    game.close()
    raw.close()


def test_atari_skip_pool_drives_only_a_passively_wrapped_game():
    from torchrl.envs.libs._atari_gym import AtariSkipPool

    register_ale_envs()
    game = gym.make("ALE/Breakout-v5", frameskip=1, obs_type="grayscale")
    with pytest.raises(ValueError, match="expected only .* got TimeLimit"):
        AtariSkipPool(gym.wrappers.TimeLimit(game, 100), 4, 2, 0)
    with pytest.raises(ValueError, match="screen_size must be >= 1"):
        AtariSkipPool(game, 4, 2, 0, screen_size=0)
    skipping = gym.make("ALE/Breakout-v5", frameskip=4)
    with pytest.raises(ValueError, match="frameskip=1 and discrete actions, got frameskip=4"):
        AtariSkipPool(skipping, 4, 2, 0)
    skipping.close()
    pooled = AtariSkipPool(game, 4, 2, 0, screen_size=84, lives=True)
    obs, info = pooled.reset(seed=0)
    assert obs["observation"].shape == (84, 84) and obs["lives"].tolist() == [info["lives"]]
    assert pooled.observation_space["observation"].shape == (84, 84)
    game.close()


def test_batch_of_games_steps_in_one_call():
    """The games of make_atari_env are plain GymWrappers: SerialEnv's batched stepper runs them
    (one TensorDict per batched step); the lives travel as an observation."""
    env = make_atari_env("ALE/Breakout-v5", 2, noop_max=0, seed=0)
    env.reset()
    assert env.base_env._stepper is not None
    assert env.base_env.observation_spec["lives"].shape == (2, 1)
    env.close()


def test_frame_stack_shifts_and_reset_fills():
    env = make_atari_env("ALE/Breakout-v5", 0, noop_max=0, seed=1)
    td = env.reset()
    stack = td["pixels"]
    assert all(torch.equal(stack[i], stack[0]) for i in range(4))
    actions = _random_actions(env, 5)
    for t in range(5):
        td["action"] = actions[t]
        td = env.step(td)
        assert torch.equal(td["next", "pixels"][:3], td["pixels"][1:])
        td = td["next"].clone()
    env.close()


def test_noop_reset_starts_at_random_frames():
    torch.manual_seed(0)
    game = atari_game_env("ALE/Breakout-v5", noop_max=30, frame_skip=4)
    ale = game.base_env.env.unwrapped.ale
    starts = set()
    for _ in range(5):
        game.reset()
        starts.add(ale.getEpisodeFrameNumber())
    assert all(0 <= s <= 30 for s in starts) and len(starts) > 1
    game.close()


def test_end_of_life_marks_the_lost_life_only():
    torch.manual_seed(0)
    game = atari_game_env("ALE/Breakout-v5", noop_max=0)
    td = game.rollout(400, break_when_any_done=True)
    lives = td["next", "lives"].squeeze(-1)
    eol = td["next", "end-of-life"].squeeze(-1)
    done = td["next", "done"].squeeze(-1)
    lost = torch.cat([td["lives"][:1].squeeze(-1), lives[:-1]]) > lives
    assert lost.any(), "random play lost no life in 400 steps"
    assert torch.equal(eol, lost | done)
    assert not done[lost & ~done].any()  # losing a life does not end the episode
    game.close()


def test_partial_reset_resets_only_the_marked_game():
    env = make_atari_env("ALE/Breakout-v5", 2, noop_max=0, seed=2)
    td = env.reset()
    actions = _random_actions(env, 6)
    for t in range(6):
        td["action"] = actions[t]
        td = env.step(td)["next"].clone()
    before = td["pixels"].clone()
    td["_reset"] = torch.tensor([[True], [False]])
    after = env.reset(td)
    assert torch.equal(after["pixels"][1], before[1])  # game 1 untouched
    fresh = after["pixels"][0]
    assert all(torch.equal(fresh[i], fresh[0]) for i in range(4))  # game 0's stack refilled
    assert not torch.equal(fresh, before[0])
    env.close()


def test_make_atari_env_errors():
    with pytest.raises(ValueError, match="backend must be 'ale' or 'envpool'"):
        make_atari_env("ALE/Pong-v5", backend="gym")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="frame_stack must be >= 1"):
        make_atari_env("ALE/Pong-v5", frame_stack=0)
    with pytest.raises(ValueError, match="obs_type must be"):
        atari_game_env("ALE/Pong-v5", obs_type="ram")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="frame_skip must be >= 1"):
        atari_game_env("ALE/Pong-v5", frame_skip=0)
    with pytest.raises(TypeError, match="env_name must be a game id"):
        atari_game_env("")


def test_envpool_backend():
    pytest.importorskip("envpool")
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        make_atari_env("ALE/Pong-v5", 0, backend="envpool")
    env = make_atari_env("ALE/Pong-v5", 2, backend="envpool", seed=0)
    check_env_specs(env)
    td = env.rollout(10, break_when_any_done=False)
    assert td["next", "pixels"].shape == (2, 10, 4, 84, 84)
    assert td["next", "pixels"].max() <= 1
    last = td[:, -1]["next"].clone()
    last["_reset"] = torch.tensor([[True], [False]])
    after = env.reset(last)
    assert torch.equal(after["pixels"][1], last["pixels"][1])
    env.close()
