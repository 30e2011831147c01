"""Tests of the Genesis wrappers (skipped without ``genesis-world``).

``genesis-world`` downgrades Pillow and adds ``opencv-python``, so it lives in its own venv that
sees the project's (``docs/simulators.rst``); these tests ran there. Importing Genesis takes
~15-30 s and building a scene ~12 s once Genesis's kernel cache is warm (minutes when cold), so
one module-scoped env serves every fast test; the ``ParallelEnv`` test (two more processes, each
importing Genesis and building a scene) is slow-marked.
"""

import importlib.util
import sys

import pytest
import torch

from torchrl.envs import check_env_specs
from torchrl.envs.utils import step_mdp


def test_missing_genesis_names_the_extra(monkeypatch):
    from torchrl.envs.libs.genesis import GenesisEnv

    monkeypatch.setitem(sys.modules, "genesis", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[genesis\]"'):
        GenesisEnv("franka_reach")


requires_genesis = pytest.mark.skipif(
    importlib.util.find_spec("genesis") is None, reason="genesis-world is not installed"
)

from torchrl.envs.libs.genesis import GenesisEnv, GenesisWrapper  # noqa: E402


@pytest.fixture(scope="module")
def env():
    return GenesisEnv("franka_reach", batch_size=[3], device="cpu", max_steps=50)


@requires_genesis
def test_specs_keys_and_seeding(env):
    check_env_specs(env)
    assert env.batch_size == (3,)
    assert env.observation_spec["qpos"].shape == (3, 9)
    assert env.observation_spec["goal_pos"].shape == (3, 3)
    assert env.action_spec.shape == (3, 9) and env.reward_spec.shape == (3, 1)
    assert bool((env.action_spec.space.low < env.action_spec.space.high).all())
    rollouts = []
    for _ in range(2):
        env.set_seed(4)
        torch.manual_seed(0)
        rollouts.append(env.rollout(4))
    assert (rollouts[0] == rollouts[1]).all()
    goals = rollouts[0]["goal_pos"][:, 0]
    assert not torch.equal(goals[0], goals[1])  # one goal per env
    assert (rollouts[0]["next", "reward"] < 0).all()
    env.set_seed(5)
    assert not torch.equal(env.reset()["goal_pos"], goals)


@requires_genesis
def test_partial_reset_truncation_and_collector(env):
    from torchrl.collectors import SyncDataCollector

    td = env.reset()
    start = td["qpos"].clone()
    goals = td["goal_pos"].clone()
    for _ in range(3):
        td = step_mdp(env.rand_step(td))
    assert env._current_step.tolist() == [3, 3, 3]
    moved = td["qpos"].clone()
    td["_reset"] = torch.tensor([[True], [False], [True]])
    out = env.reset(td)
    assert env._current_step.tolist() == [0, 3, 0]
    torch.testing.assert_close(out["qpos"][[0, 2]], start[[0, 2]])
    torch.testing.assert_close(out["qpos"][1], moved[1])
    assert torch.equal(out["goal_pos"][1], goals[1]) and not torch.equal(out["goal_pos"], goals)

    env._max_steps = 3
    try:
        nxt = env.rollout(5, break_when_any_done=False)["next"]
    finally:
        env._max_steps = 50
    assert nxt["truncated"][:, 2].all() and not nxt["terminated"].any()
    assert not nxt["truncated"][:, 3].any()  # reset after the time-out, then counted anew
    assert (nxt["done"] == nxt["truncated"]).all()

    collector = SyncDataCollector(env, None, frames_per_batch=12, total_frames=24)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 2 and batches[0].batch_size == (3, 4)


@requires_genesis
def test_wrapper_defaults_and_bad_arguments(env):
    wrapped = GenesisWrapper(env.scene, max_steps=2, frame_skip=2)
    assert set(wrapped.observation_spec.keys()) == {"panda_qpos", "panda_qvel"}
    check_env_specs(wrapped)
    td = wrapped.rollout(3, break_when_any_done=False)
    assert (td["next", "reward"] == 0).all()
    assert td["next", "truncated"][:, 1].all()

    with pytest.raises(TypeError, match="must be a genesis Scene"):
        GenesisWrapper(object())
    with pytest.raises(ValueError, match=r"batch_size must be the scene's \[n_envs\]"):
        GenesisWrapper(env.scene, batch_size=[2])
    with pytest.raises(NotImplementedError, match="from_pixels"):
        GenesisWrapper(env.scene, from_pixels=True)
    with pytest.raises(ValueError, match="no task 'nope'"):
        GenesisEnv("nope")
    assert GenesisEnv.available_envs == ["franka_reach"]


@requires_genesis
@pytest.mark.slow
def test_parallel_env():
    from torchrl.envs import ParallelEnv

    parallel = GenesisEnv("franka_reach", device="cpu", num_workers=2, max_steps=10)
    assert isinstance(parallel, ParallelEnv)
    try:
        check_env_specs(parallel)
        assert parallel.rollout(3)["next", "reward"].shape == (2, 3, 1)
    finally:
        parallel.close()
