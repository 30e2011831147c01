"""Tests of LiberoEnv/LiberoWrapper (skipped when libero is not installed, but for one).

LIBERO renders on the CPU here (EGL software rendering): building a task takes 5-25 s and a step
with images tens to hundreds of milliseconds, so one module-wide env is shared and every test
that simulates is marked slow. Images are 32x32 and resets keep the model (``hard_reset=False``).
"""

import functools
import importlib.util
import sys
import warnings

import pytest
import torch

from torchrl.envs import ParallelEnv, SerialEnv, check_env_specs
from torchrl.envs.libs.libero import LiberoEnv, LiberoWrapper


def test_missing_libero_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "libero", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[libero\]"'):
        LiberoEnv("libero_spatial", 0)


def test_wrapper_argument_errors():
    with pytest.raises(TypeError, match="env is required"):
        LiberoWrapper()
    with pytest.raises(ValueError, match="init_state_mode must be"):
        LiberoWrapper(object(), init_state_mode="sorted")
    with pytest.raises(ValueError, match="which were not given"):
        LiberoWrapper(object(), init_state_mode="cycle")
    with pytest.raises(ValueError, match="needs init_state_mode='cycle' or 'fixed'"):
        LiberoWrapper(object(), group_repeats=2, group_id_mode="init_state")


needs_libero = pytest.mark.skipif(
    importlib.util.find_spec("libero") is None, reason="libero is not installed"
)

SMALL = {"camera_height": 32, "camera_width": 32, "env_kwargs": {"hard_reset": False}}


def make(**kwargs):
    options = {**SMALL, "settle_steps": 1, "max_episode_steps": 3, **kwargs}
    return LiberoEnv("libero_spatial", 0, **options)


@pytest.fixture(scope="module")
def env():
    # check_env_specs reads tensor leaves only: the instruction (non-tensor) is tested apart
    env = make(
        init_state_mode="cycle",
        wrist_camera="robot0_eye_in_hand",
        from_pixels=True,
        language_key=None,
    )
    yield env
    env.close()


@needs_libero
@pytest.mark.slow
def test_specs_keys_and_truncation(env):
    check_env_specs(env)
    assert "libero_spatial" in LiberoEnv.available_envs
    spec = env.observation_spec
    assert spec["observation", "image"].shape == (3, 32, 32)
    assert spec["observation", "wrist_image"].dtype == torch.uint8
    assert spec["observation", "state"].shape == (9,)  # eef pos 3 + quat 4 + gripper 2
    assert spec["pixels"].shape == (32, 32, 3)
    assert env.action_spec.shape == (7,) and env.action_spec.dtype == torch.float32
    td = env.reset()
    assert "language_instruction" not in td.keys() and env.task_id == 0
    assert torch.equal(td["pixels"], td["observation", "image"].permute(1, 2, 0))
    rollout = env.rollout(10)
    # no success in 3 random steps: truncated at max_episode_steps, reward 0
    assert rollout.batch_size == (3,)
    assert rollout["next", "truncated"].squeeze(-1).tolist() == [False, False, True]
    assert not rollout["next", "terminated"].any() and not rollout["next", "reward"].any()


@needs_libero
@pytest.mark.slow
def test_language_instruction_entry(env):
    # a second wrapper over the same LIBERO env (not closed: the fixture owns it)
    wrapped = LiberoWrapper(env.env, settle_steps=0, max_episode_steps=None)
    td = wrapped.reset()
    assert td["language_instruction"] == str(env.env.language_instruction) == wrapped.instruction
    assert wrapped.observation_spec["language_instruction"].example_data == wrapped.instruction
    td["action"] = torch.zeros(7)
    assert wrapped.step(td)["next", "language_instruction"] == wrapped.instruction
    assert env.instruction.startswith("pick up the black bowl")  # the task's, from the suite


@needs_libero
@pytest.mark.slow
def test_cycle_mode_walks_through_the_initial_states(env):
    seen = []
    for _ in range(2):
        env.reset()
        seen.append(env.init_state_index)
    assert seen[1] == (seen[0] + 1) % len(env.init_states)
    assert env.init_states.shape[0] == 50


@needs_libero
@pytest.mark.slow
def test_same_seed_same_initial_states_and_groups():
    env = make(init_state_mode="random", group_repeats=2, group_id_offset=100)
    try:
        env.set_seed(3)
        first = [env.reset() for _ in range(2)]
        index = env.init_state_index
        # a group replays one initial state and stamps its id
        assert first[0]["group_id"].item() == first[1]["group_id"].item() == 100
        # the same initial state; the gripper fingers settle within ~2e-3 of each other (the
        # controller's state is not part of LIBERO's initial state, hard_reset=False keeps it)
        torch.testing.assert_close(
            first[0]["observation", "state"], first[1]["observation", "state"], atol=5e-3, rtol=0
        )
        env.set_seed(3)
        env.reset()
        assert env.init_state_index == index
        env.set_seed(4)
        others = set()
        for _ in range(3):  # one group of 2 episodes, then a new draw
            env.reset()
            others.add(env.init_state_index)
        assert len(others) <= 2
    finally:
        env.close()


@needs_libero
@pytest.mark.slow
def test_serial_and_parallel_env_with_collector():
    from torchrl.collectors import SyncDataCollector

    options = {**SMALL, "settle_steps": 1, "max_episode_steps": 3}
    make_one = functools.partial(
        LiberoEnv, "libero_spatial", 0, language_key=None, init_state_mode="cycle", **options
    )
    serial = SerialEnv(1, make_one)
    check_env_specs(serial)
    serial.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # EGL contexts do not survive a fork (forked workers hang): spawn them
        env = ParallelEnv(2, make_one, mp_start_method="spawn")
    try:
        env.set_seed(0)
        collector = SyncDataCollector(env, None, frames_per_batch=8, total_frames=8)
        (batch,) = list(collector)
        collector.shutdown()
    finally:
        if not env.is_closed:
            env.close()
    assert batch["next", "observation", "image"].shape == (2, 4, 3, 32, 32)
    # episodes of 3 steps: truncated at step 3, then a new episode
    assert batch["next", "truncated"].squeeze(-1)[:, 2].all()
