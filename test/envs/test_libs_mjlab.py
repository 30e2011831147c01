"""Tests of the mjlab wrappers (skipped without ``mjlab``).

mjlab 1.6 pins ``mujoco~=3.11``, so it lives in its own venv, not in the project's test venv;
these tests ran there (``docs/simulators.rst``). Building an env takes ~10 s on the CPU (Warp's
kernels come from its cache after the first run), so one module-level env serves the fast tests.
"""

import functools
import importlib.util
import sys

import pytest
import torch

from torchrl.envs import check_env_specs
from torchrl.envs.utils import step_mdp

TASK = "Mjlab-Cartpole-Balance"


def test_missing_mjlab_names_the_extra(monkeypatch):
    from torchrl.envs.libs.mjlab import MJLabEnv

    monkeypatch.setitem(sys.modules, "mjlab", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[mjlab\]"'):
        MJLabEnv(TASK)


requires_mjlab = pytest.mark.skipif(
    importlib.util.find_spec("mjlab") is None, reason="mjlab is not installed"
)

from torchrl.envs.libs.mjlab import MJLabEnv, MJLabWrapper  # noqa: E402


@pytest.fixture(scope="module")
def env():
    env = MJLabEnv(TASK, num_envs=3, device="cpu")
    yield env
    env.close()


@requires_mjlab
def test_specs_keys_and_seeding(env):
    check_env_specs(env)
    assert env.observation_spec["actor"].shape == (3, 5)
    assert env.action_spec.shape == (3, 1) and env.reward_spec.shape == (3, 1)
    assert not env.env.cfg.auto_reset  # torchrl drives the resets
    rollouts = []
    for _ in range(2):
        env.set_seed(4)
        torch.manual_seed(0)
        rollouts.append(env.rollout(4))
    assert (rollouts[0] == rollouts[1]).all()
    assert not torch.equal(rollouts[0]["actor"][0, 0], rollouts[0]["actor"][1, 0])


@requires_mjlab
def test_partial_reset_and_collector(env):
    from torchrl.collectors import SyncDataCollector

    td = env.reset()
    for _ in range(2):
        td = step_mdp(env.rand_step(td))
    steps = env.env.episode_length_buf.clone()
    assert (steps == 2).all()
    td["_reset"] = torch.tensor([[True], [False], [True]])
    env.reset(td)
    assert env.env.episode_length_buf.tolist() == [0, 2, 0]

    collector = SyncDataCollector(env, None, frames_per_batch=12, total_frames=24)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 2 and batches[0].batch_size == (3, 4)


@requires_mjlab
def test_time_out_is_truncated():
    env = MJLabEnv(TASK, num_envs=2, device="cpu")
    try:
        env.env.cfg.episode_length_s = 2.5 * env.env.step_dt  # 3 steps
        td = env.rollout(5, break_when_any_done=False)
        nxt = td["next"]
        assert nxt["truncated"][:, 2].all() and not nxt["terminated"].any()
        assert not nxt["truncated"][:, 3].any()  # reset after the time-out, then counted anew
        assert (nxt["done"] == nxt["truncated"]).all()
    finally:
        env.close()


@requires_mjlab
def test_bad_arguments(env):
    with pytest.raises(TypeError, match="must be a mjlab ManagerBasedRlEnv"):
        MJLabWrapper(object())
    with pytest.raises(ValueError, match="batch_size must be \\[num_envs\\]"):
        MJLabWrapper(env.env, batch_size=[2])
    with pytest.raises(NotImplementedError, match="native_autoreset"):
        MJLabWrapper(env.env, native_autoreset=True)
    with pytest.raises(ValueError, match="has no task 'Nope'"):
        MJLabEnv("Nope")
    assert TASK in MJLabEnv.available_envs


@requires_mjlab
@pytest.mark.slow
def test_serial_and_parallel_envs():
    from torchrl.envs import ParallelEnv, SerialEnv

    make = functools.partial(MJLabEnv, TASK, num_envs=1, device="cpu")
    serial = SerialEnv(2, make)
    check_env_specs(serial)
    assert serial.rollout(3)["next", "actor"].shape == (2, 1, 3, 5)
    serial.close()
    parallel = MJLabEnv(TASK, num_envs=1, device="cpu", num_workers=2)
    assert isinstance(parallel, ParallelEnv)
    assert parallel.rollout(3)["next", "reward"].shape == (2, 1, 3, 1)
    parallel.close()
