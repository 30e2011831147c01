"""Tests of the dm_control wrapper (skipped when dm_control is not installed, but for one)."""

import sys

import pytest
import torch

from torchrl.envs import check_env_specs
from torchrl.envs.libs.dm_control import DMControlEnv, DMControlWrapper


def test_missing_dm_control_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "dm_control.suite", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[dm_control\]"'):
        DMControlEnv("cheetah", "run")


pytest.importorskip("dm_control")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    # MuJoCo writes MUJOCO_LOG.TXT into the working directory
    monkeypatch.chdir(tmp_path)


def test_cheetah_run_specs():
    env = DMControlEnv("cheetah", "run", seed=0)
    check_env_specs(env)
    assert sorted(env.observation_spec.keys()) == ["position", "velocity"]
    assert env.observation_spec["position"].dtype == torch.float64
    assert env.action_spec.shape == (6,)
    assert env.action_spec.dtype == torch.float64
    assert (env.action_spec.space.low == -1).all()
    td = env.rollout(5)
    assert td["next", "velocity"].shape == (5, 9)
    assert td["next", "reward"].dtype == torch.float64
    assert "DMControlEnv(env=cheetah, task=run" in repr(env)


def test_time_limit_truncates_and_frame_skip():
    env = DMControlEnv("cartpole", "balance", seed=0, task_kwargs={"time_limit": 0.1})
    td = env.rollout(100)
    # control timestep 0.01 s: 10 steps, the last one truncated (not terminated)
    assert td.batch_size == (10,)
    assert td["next", "truncated"][-1].all() and not td["next", "terminated"].any()
    assert td["next", "done"][:-1].sum() == 0
    env = DMControlEnv("cartpole", "balance", seed=0, frame_skip=3, task_kwargs={"time_limit": 0.1})
    assert env.rollout(100).batch_size == (4,)
    with pytest.raises(ValueError, match="frame_skip must be >= 1"):
        DMControlEnv("cartpole", "balance", frame_skip=0)


def test_seeding_is_reproducible():
    env = DMControlEnv("cartpole", "swingup")
    env.set_seed(1)
    a = env.reset()["position"]
    env.set_seed(1)
    b = env.reset()["position"]
    env.set_seed(2)
    c = env.reset()["position"]
    assert torch.equal(a, b) and not torch.equal(a, c)
    first = DMControlEnv("cartpole", "swingup", seed=5).reset()["position"]
    assert torch.equal(first, DMControlEnv("cartpole", "swingup", seed=5).reset()["position"])


def test_physics_state():
    env = DMControlEnv("walker", "walk", seed=0, return_physics=True)
    check_env_specs(env)
    td = env.reset()
    # scalar observations get a trailing dim of 1
    assert td["height"].shape == (1,)
    state = env.get_physics_state()
    assert torch.equal(td["physics"], state)
    td = env.rand_step(td)
    assert not torch.equal(env.get_physics_state(), state)
    env.set_physics_state(state)
    assert torch.equal(env.get_physics_state(), state)


def test_pixels():
    env = DMControlEnv(
        "cartpole",
        "balance",
        seed=0,
        from_pixels=True,
        render_kwargs={"height": 32, "width": 48},
    )
    check_env_specs(env)
    td = env.rollout(2)
    assert td["next", "pixels"].shape == (2, 32, 48, 3)
    assert td["next", "pixels"].dtype == torch.uint8
    assert "position" in td.keys()
    assert td["next", "pixels"].float().std() > 0  # an actual image, not a blank frame
    env = DMControlEnv(
        "cartpole", "balance", from_pixels=True, pixels_only=True, render_kwargs={"height": 16}
    )
    assert list(env.observation_spec.keys()) == ["pixels"]


def test_wrapper_and_errors():
    from dm_control import suite

    raw = suite.load("cartpole", "balance", task_kwargs={"random": 0})
    env = DMControlWrapper(raw)
    assert env.env is raw and env.physics is raw.physics
    check_env_specs(env)
    with pytest.raises(TypeError, match="needs a dm_control control.Environment"):
        DMControlWrapper(object())
    with pytest.raises(ValueError, match="unknown task \\('cheetah', 'fly'\\); tasks of 'cheetah'"):
        DMControlEnv("cheetah", "fly")
    with pytest.raises(ValueError, match="pixels_only=True needs from_pixels=True"):
        DMControlWrapper(raw, pixels_only=True)
    assert ("cheetah", "run") in DMControlEnv.available_envs()
