"""Tests of the envpool wrappers (skipped when envpool is not installed, except the missing-package one)."""

import sys

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from torchrl.data import Bounded, Categorical, OneHot, Unbounded
from torchrl.envs import MultiThreadedEnv, MultiThreadedEnvWrapper, check_env_specs


def test_missing_envpool_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[envpool\]"'):
        MultiThreadedEnv(2, "CartPole-v1")


envpool = pytest.importorskip("envpool")
gym = pytest.importorskip("gymnasium")

# CartPole's termination thresholds (gymnasium and envpool agree)
X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * np.pi / 360


def _pool(task, n=3, seed=0, **kwargs):
    return envpool.make(task, env_type="gymnasium", num_envs=n, seed=seed, **kwargs)


# ------------------------------------------------------------------------------------- specs


@pytest.mark.parametrize("categorical", [False, True])
def test_cartpole_specs(categorical):
    env = MultiThreadedEnv(
        4, "CartPole-v1", create_env_kwargs={"seed": 0}, categorical_action_encoding=categorical
    )
    check_env_specs(env)
    assert env.batch_size == torch.Size([4]) and env.num_workers == 4
    assert isinstance(env.observation_spec["observation"], Bounded)
    assert env.observation_spec["observation"].shape == (4, 4)
    expected = Categorical if categorical else OneHot
    assert isinstance(env.action_spec, expected)
    assert env.action_spec.shape == ((4,) if categorical else (4, 2))
    assert env.reward_spec.shape == (4, 1) and env.reward_spec.dtype == torch.float32
    assert env.done_spec["done"].shape == (4, 1)
    assert repr(env) == "MultiThreadedEnv(env=CartPole-v1, num_workers=4, device=cpu)"


def test_pendulum_specs_and_rollout_shapes():
    env = MultiThreadedEnv(3, "Pendulum-v1", create_env_kwargs={"seed": 0})
    check_env_specs(env)
    assert isinstance(env.action_spec, Bounded) and env.action_spec.shape == (3, 1)
    td = env.rollout(5)
    assert td.batch_size == torch.Size([3, 5])
    assert td["next", "observation"].shape == (3, 5, 3)
    assert td["next", "reward"].shape == (3, 5, 1)
    assert td["next", "done"].dtype == torch.bool


def test_dict_observations_and_placeholder_bounds():
    # envpool's dm_control tasks declare unbounded floats as [tiny, max]: they become Unbounded
    env = MultiThreadedEnv(2, "CheetahRun-v1", create_env_kwargs={"seed": 0})
    assert set(env.observation_spec.keys()) == {"position", "velocity"}
    assert isinstance(env.observation_spec["position"], Unbounded)
    assert env.observation_spec["velocity"].dtype == torch.float64
    check_env_specs(env)


def test_wrapper_on_a_user_pool():
    pool = envpool.make("Acrobot-v1", env_type="gym", num_envs=2, seed=1)
    env = MultiThreadedEnvWrapper(pool, categorical_action_encoding=True)
    assert env.env is pool
    check_env_specs(env)
    assert env.action_spec.n == 3
    assert "MultiThreadedEnvWrapper(env=Acrobot" in repr(env)


def test_atari_pool_built_as_in_torchrl_docs():
    pool = envpool.make(task_id="Pong-v5", env_type="gym", num_envs=2, gym_reset_return_info=True)
    env = MultiThreadedEnvWrapper(pool)
    check_env_specs(env)
    assert env.observation_spec["observation"].dtype == torch.uint8
    assert env.observation_spec["observation"].shape == (2, 4, 84, 84)
    assert env.action_spec.shape == (2, 6)


def test_available_envs():
    names = MultiThreadedEnv.available_envs
    assert "CartPole-v1" in names and "Pendulum-v1" in names


# ------------------------------------------------------------------------------------ errors


def test_bad_arguments():
    with pytest.raises(ValueError, match="no task 'CartPole-v9'.*CartPole-v1"):
        MultiThreadedEnv(2, "CartPole-v9")
    with pytest.raises(ValueError, match="num_workers must be >= 1"):
        MultiThreadedEnv(0, "CartPole-v1")
    with pytest.raises(ValueError, match=r"create_env_kwargs\['num_envs'\]=3 differs"):
        MultiThreadedEnv(2, "CartPole-v1", create_env_kwargs={"num_envs": 3})
    with pytest.raises(ValueError, match="env_type must be 'gymnasium'"):
        MultiThreadedEnv(2, "CartPole-v1", create_env_kwargs={"env_type": "dm"})
    with pytest.raises(ValueError, match="frame_skip must be >= 1"):
        MultiThreadedEnv(2, "CartPole-v1", frame_skip=0)


def test_wrapper_rejects_other_objects_and_modes():
    with pytest.raises(TypeError, match="needs an envpool pool"):
        MultiThreadedEnvWrapper(gym.make("CartPole-v1"))
    dm_pool = envpool.make("CartPole-v1", env_type="dm", num_envs=2)
    with pytest.raises(TypeError, match="env_type='gymnasium'"):
        MultiThreadedEnvWrapper(dm_pool)
    async_pool = _pool("CartPole-v1", n=4, batch_size=2)
    with pytest.raises(ValueError, match="synchronous mode only"):
        MultiThreadedEnvWrapper(async_pool)


# ------------------------------------------------------------------- episodes and partial resets


def test_rollout_resets_finished_sub_envs():
    env = MultiThreadedEnv(3, "CartPole-v1", create_env_kwargs={"seed": 0})
    td = env.rollout(200, break_when_any_done=False)
    done = td["next", "done"].squeeze(-1)
    assert done.sum() >= 3  # random actions end CartPole episodes within ~20 steps
    # the step ending an episode returns the true last observation, not envpool's reset one
    last = td["next", "observation"][done]
    ended = (last[:, 0].abs() > X_LIMIT) | (last[:, 2].abs() > THETA_LIMIT)
    assert ended.all()
    # the step after it starts from a fresh reset state (all entries within +-0.05)
    after = td["observation"][:, 1:][done[:, :-1]]
    assert (after.abs() <= 0.05).all()
    # rewards: 1 per step, including the last step of every episode
    assert (td["next", "reward"] == 1).all()


def test_partial_reset_keeps_the_other_sub_envs():
    env = MultiThreadedEnv(3, "CartPole-v1", create_env_kwargs={"seed": 0})
    td = env.reset()
    for _ in range(5):
        td = env.rand_action(td)
        _, td = env.step_and_maybe_reset(td)
    before = td["observation"].clone()
    td["_reset"] = torch.tensor([[True], [False], [True]])
    out = env.reset(td)
    assert "_reset" not in out.keys()
    assert torch.equal(out["observation"][1], before[1])
    assert not torch.equal(out["observation"][0], before[0])
    assert (out["observation"][[0, 2]].abs() <= 0.05).all()
    assert not out["done"].any()
    # the reset sub-envs step on from their new state (no second reset by envpool)
    state = out["observation"].clone()
    out["action"] = torch.tensor([[True, False]] * 3)
    nxt = env.step(out)["next", "observation"]
    assert (nxt - state).abs().max() < 0.5


def test_partial_reset_without_previous_observations():
    env = MultiThreadedEnv(2, "Pendulum-v1", create_env_kwargs={"seed": 0})
    env.reset()
    td = TensorDict({"_reset": torch.tensor([[False], [True]])}, batch_size=[2])
    out = env.reset(td)
    assert out["observation"].shape == (2, 3)
    assert torch.equal(out["observation"][0], torch.zeros(3))
    assert out["observation"][1].norm() > 0


# ----------------------------------------------------------------------------------- seeding


def _actions(steps, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(steps, n, 1, generator=g) * 4 - 2).float()


def _run(env, actions):
    td = env.reset()
    obs = [td["observation"].clone()]
    for a in actions:
        td["action"] = a
        _, td = env.step_and_maybe_reset(td)
        obs.append(td["observation"].clone())
    return torch.stack(obs)


def test_seeding_is_reproducible():
    actions = _actions(20, 3)
    env = MultiThreadedEnv(3, "Pendulum-v1")
    assert env.set_seed(7) == MultiThreadedEnv(3, "Pendulum-v1").set_seed(7)
    first = _run(env, actions)
    env.set_seed(7)
    assert torch.equal(_run(env, actions), first)
    # the same seed through create_env_kwargs
    same = MultiThreadedEnv(3, "Pendulum-v1", create_env_kwargs={"seed": 7})
    assert torch.equal(_run(same, actions), first)
    env.set_seed(8)
    assert not torch.equal(_run(env, actions), first)
    # sub-envs get different seeds
    assert not torch.equal(first[0, 0], first[0, 1])
    # seeds outside int32 wrap around instead of failing
    env.set_seed(2**32 - 1)
    env.rollout(2)


# ------------------------------------------------------------------------- gymnasium parity


def test_pendulum_matches_gymnasium_dynamics():
    n, steps = 3, 30
    env = MultiThreadedEnv(n, "Pendulum-v1", create_env_kwargs={"seed": 3})
    td = env.reset()
    refs = []
    for i in range(n):
        ref = gym.make("Pendulum-v1")
        ref.reset(seed=i)
        cos, sin, speed = td["observation"][i].double().tolist()
        ref.unwrapped.state = np.array([np.arctan2(sin, cos), speed])
        refs.append(ref)
    for a in _actions(steps, n):
        td["action"] = a
        env.step(td)
        for i, ref in enumerate(refs):
            obs, reward, *_ = ref.step(a[i].numpy())
            np.testing.assert_allclose(td["next", "observation"][i].numpy(), obs, atol=1e-5)
            assert td["next", "reward"][i].item() == pytest.approx(reward, abs=1e-4)
        td = td["next"].exclude("reward")


def test_cartpole_matches_gymnasium_dynamics():
    env = MultiThreadedEnv(
        2, "CartPole-v1", create_env_kwargs={"seed": 1}, categorical_action_encoding=True
    )
    td = env.reset()
    refs = []
    for i in range(2):
        ref = gym.make("CartPole-v1")
        ref.reset(seed=i)
        ref.unwrapped.state = td["observation"][i].double().numpy().copy()
        refs.append(ref)
    ended = [False, False]
    for t in range(40):
        td["action"] = torch.tensor([t % 3 == 0, 1])  # env 1 always pushes right: it falls
        env.step(td)
        for i, ref in enumerate(refs):
            if ended[i]:
                continue
            obs, _, terminated, _, _ = ref.step(int(td["action"][i]))
            np.testing.assert_allclose(td["next", "observation"][i].numpy(), obs, atol=1e-5)
            assert td["next", "terminated"][i].item() == terminated
            ended[i] = terminated
        if all(ended) or td["next", "done"].any():
            break
        td = td["next"].exclude("reward")
    assert any(ended)


# -------------------------------------------------------------------------------- frame skip


def test_frame_skip_sums_rewards_and_stops_at_episode_ends():
    # always pushing right ends every CartPole episode within ~10 steps, at different steps
    plain = MultiThreadedEnv(
        4, "CartPole-v1", create_env_kwargs={"seed": 0}, categorical_action_encoding=True
    )
    td = plain.reset()
    lengths = torch.zeros(4, dtype=torch.long)
    alive = torch.ones(4, dtype=torch.bool)
    while alive.any():
        td["action"] = torch.ones(4, dtype=torch.long)
        plain.step(td)
        lengths += alive.long()
        alive &= ~td["next", "done"].squeeze(-1)
        td = td["next"].exclude("reward")
    skip = MultiThreadedEnv(
        4,
        "CartPole-v1",
        create_env_kwargs={"seed": 0},
        categorical_action_encoding=True,
        frame_skip=3,
    )
    assert skip.frame_skip == 3
    td = skip.reset()
    total = torch.zeros(4)
    alive = torch.ones(4, dtype=torch.bool)
    skips = 0
    while alive.any():
        td["action"] = torch.ones(4, dtype=torch.long)
        skip.step(td)
        skips += 1
        total += td["next", "reward"].squeeze(-1) * alive
        done = td["next", "done"].squeeze(-1)
        last = td["next", "observation"][done & alive]
        assert ((last[:, 0].abs() > X_LIMIT) | (last[:, 2].abs() > THETA_LIMIT)).all()
        alive &= ~done
        td = td["next"].exclude("reward")
    assert torch.equal(total, lengths.float())
    assert skips == int((lengths.max() + 2) // 3)


def test_frame_skip_pendulum_matches_repeated_steps():
    actions = _actions(4, 2)
    plain = MultiThreadedEnv(2, "Pendulum-v1", create_env_kwargs={"seed": 4})
    skip = MultiThreadedEnv(2, "Pendulum-v1", create_env_kwargs={"seed": 4}, frame_skip=2)
    td_p, td_s = plain.reset(), skip.reset()
    for a in actions:
        reward = torch.zeros(2, 1)
        for _ in range(2):
            td_p["action"] = a
            plain.step(td_p)
            reward += td_p["next", "reward"]
            td_p = td_p["next"].exclude("reward")
        td_s["action"] = a
        skip.step(td_s)
        torch.testing.assert_close(td_s["next", "reward"], reward)
        torch.testing.assert_close(td_s["next", "observation"], td_p["observation"])
        td_s = td_s["next"].exclude("reward")


# ------------------------------------------------------------------------------------- misc


def test_out_of_order_results_are_put_back_in_order():
    env = MultiThreadedEnv(4, "CartPole-v1")
    obs = np.arange(8).reshape(4, 2)
    (ordered,) = env._in_order(np.array([2, 0, 3, 1], dtype=np.int32), obs)
    np.testing.assert_array_equal(ordered, obs[[1, 3, 0, 2]])
    (same,) = env._in_order(np.arange(4, dtype=np.int32), obs)
    assert same is obs


def test_close_closes_the_pool():
    env = MultiThreadedEnv(2, "CartPole-v1")
    pool = env.env
    env.close()
    assert env.is_closed and pool.closed


def test_sync_data_collector():
    from torchrl.collectors import SyncDataCollector

    env = MultiThreadedEnv(4, "CartPole-v1", create_env_kwargs={"seed": 0})
    collector = SyncDataCollector(env, None, frames_per_batch=80, total_frames=240)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 3
    for batch in batches:
        assert batch.batch_size == torch.Size([4, 20])
        assert batch["next", "observation"].shape == (4, 20, 4)
    # episodes ended across batches and were numbered apart
    ids = torch.cat([b["collector", "traj_ids"].flatten() for b in batches]).unique()
    assert ids.numel() > 4
