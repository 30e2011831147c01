"""Tests of the MuJoCo Playground wrappers (skipped without ``playground``).

Importing mujoco_playground takes ~15 s here and MJX's JAX pipeline compiles a reset and a step
in ~30 s per batch size, so the fast tests share one module-level env (CartpoleBalance, 3
sub-envs) for the specs, seeding and a collector (~50 s here, mostly compilation) and the
rest are slow-marked.
"""

import functools
import importlib.util
import sys

import pytest
import torch

from torchrl.envs import check_env_specs
from torchrl.envs.utils import step_mdp


def test_missing_playground_names_the_extra(monkeypatch):
    from torchrl.envs.libs.mujoco_playground import MujocoPlaygroundEnv

    monkeypatch.setitem(sys.modules, "mujoco_playground", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[mujoco_playground\]"'):
        MujocoPlaygroundEnv("CartpoleBalance")


def test_agent_mapping_validation():
    from torchrl.envs.libs.mujoco_playground import (
        KNOWN_MARL_MAPPINGS,
        MujocoPlaygroundAgentMapping,
        MujocoPlaygroundAgentSpec,
    )

    ok = MujocoPlaygroundAgentMapping(
        [MujocoPlaygroundAgentSpec("a", [0], [0, 1]), MujocoPlaygroundAgentSpec("b", [1], [2])]
    )
    ok.validate(action_size=2, observation_size=3)
    with pytest.raises(ValueError, match=r"missing \[1\], repeated \[0\]"):
        MujocoPlaygroundAgentMapping(
            [MujocoPlaygroundAgentSpec("a", [0], [0]), MujocoPlaygroundAgentSpec("b", [0], [0])]
        ).validate(2, 3)
    with pytest.raises(ValueError, match=r"observation indices \[3\] are outside \[0, 3\)"):
        MujocoPlaygroundAgentMapping([MujocoPlaygroundAgentSpec("a", [0, 1], [3])]).validate(2, 3)
    with pytest.raises(ValueError, match="must be unique"):
        MujocoPlaygroundAgentMapping(
            [MujocoPlaygroundAgentSpec("a", [0], [0]), MujocoPlaygroundAgentSpec("a", [1], [0])]
        ).validate(2, 3)
    with pytest.raises(ValueError, match="needs a flat observation"):
        MujocoPlaygroundAgentMapping(
            [MujocoPlaygroundAgentSpec("a", [0], {"state": [0]})], homogenization_mode="max"
        ).validate(1, {"state": (4,)})
    # the known mappings fit the playground envs they are written for (CheetahRun: 6 actions,
    # 17 observations; WalkerWalk: 6 actions, 24 observations)
    KNOWN_MARL_MAPPINGS["halfcheetah_6x1"].validate(6, 17)
    KNOWN_MARL_MAPPINGS["walker2d_2x3"].validate(6, 24)


requires_mujoco_playground = pytest.mark.skipif(
    importlib.util.find_spec("mujoco_playground") is None,
    reason="mujoco_playground is not installed",
)

from torchrl.envs.libs.mujoco_playground import (  # noqa: E402
    MujocoPlaygroundAgentMapping,
    MujocoPlaygroundAgentSpec,
    MujocoPlaygroundEnv,
    MujocoPlaygroundWrapper,
)


@pytest.fixture(scope="module")
def env():
    return MujocoPlaygroundEnv("CartpoleBalance", batch_size=[3], seed=0)


@requires_mujoco_playground
def test_specs_keys_and_seeding(env):
    check_env_specs(env)
    assert env.observation_spec["observation"].shape == (3, 5)
    assert env.observation_spec["mjx_state", "data", "qpos"].shape == (3, 2)
    assert env.action_spec.shape == (3, 1) and env.reward_spec.shape == (3, 1)
    env.set_seed(7)
    torch.manual_seed(0)
    a = env.rollout(4)
    env.set_seed(7)
    torch.manual_seed(0)
    b = env.rollout(4)
    assert (a == b).all()
    assert not torch.equal(a["observation"][0, 0], a["observation"][1, 0])
    assert repr(env).startswith("MujocoPlaygroundEnv(env=CartpoleBalance")


@requires_mujoco_playground
@pytest.mark.slow
def test_partial_reset_and_step_mask(env):
    # the merged reset is a third compiled function (~25 s)
    td = env.reset()
    td = step_mdp(env.rand_step(td))
    time = td["mjx_state", "data", "time"].clone()
    assert (time > 0).all()
    td["_reset"] = torch.tensor([[True], [False], [True]])
    td = env.reset(td)
    assert (td["mjx_state", "data", "time"][[0, 2]] == 0).all()
    assert torch.equal(td["mjx_state", "data", "time"][1], time[1])
    td = env.rand_action(td)
    td["_step"] = torch.tensor([True, False, True])
    out = env.step(td)["next", "mjx_state", "data", "time"]
    assert torch.equal(out[1], td["mjx_state", "data", "time"][1])
    assert (out[[0, 2]] > 0).all()


@requires_mujoco_playground
def test_collector(env):
    from torchrl.collectors import SyncDataCollector

    collector = SyncDataCollector(env, None, frames_per_batch=12, total_frames=24)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 2 and batches[0].batch_size == (3, 4)


@requires_mujoco_playground
def test_bad_arguments():
    with pytest.raises(TypeError, match="must be a mujoco_playground MjxEnv"):
        MujocoPlaygroundWrapper(object())
    with pytest.raises(ValueError, match="no env named 'Nope'"):
        MujocoPlaygroundEnv("Nope")
    with pytest.raises(ValueError, match="not a known mapping"):
        MujocoPlaygroundEnv("CartpoleBalance", agent_mapping="nope")
    with pytest.raises(ValueError, match="written for 'WalkerWalk'"):
        MujocoPlaygroundEnv("CartpoleBalance", agent_mapping="walker2d_2x3")
    assert "CartpoleBalance" in MujocoPlaygroundEnv.available_envs


@requires_mujoco_playground
@pytest.mark.slow
def test_warp_backend_is_refused_when_batched():
    with pytest.raises(ValueError, match="shared by the whole batch"):
        MujocoPlaygroundEnv("CartpoleBalance", config_overrides={"impl": "warp"}, batch_size=[2])


@requires_mujoco_playground
@pytest.mark.slow
def test_serial_and_parallel_envs(tmp_path):
    from envs._jax_helpers import jax_compilation_cache

    # the spawned workers load the unbatched env's compiled functions from the cache
    with jax_compilation_cache(tmp_path):
        _serial_and_parallel()


def _serial_and_parallel():
    from torchrl.envs import ParallelEnv, SerialEnv

    make = functools.partial(MujocoPlaygroundEnv, "CartpoleBalance", seed=0)
    serial = SerialEnv(2, make)
    check_env_specs(serial)
    serial.set_seed(3)
    torch.manual_seed(0)
    a = serial.rollout(3)
    serial.close()
    parallel = MujocoPlaygroundEnv("CartpoleBalance", seed=0, num_workers=2)
    assert isinstance(parallel, ParallelEnv)
    parallel.set_seed(3)
    torch.manual_seed(0)
    b = parallel.rollout(3)
    parallel.close()
    assert torch.allclose(a["next", "observation"], b["next", "observation"])


@requires_mujoco_playground
@pytest.mark.slow
def test_agent_mapping_max_and_frame_skip():
    mapping = MujocoPlaygroundAgentMapping(
        [
            MujocoPlaygroundAgentSpec("cart", [0], [0, 3]),
            MujocoPlaygroundAgentSpec("pole", [], [1, 2, 4]),
        ],
        homogenization_mode="max",
    )
    env = MujocoPlaygroundEnv(
        "CartpoleBalance", agent_mapping=mapping, batch_size=[2], frame_skip=2, seed=0
    )
    check_env_specs(env)
    assert env.observation_spec["cart", "observation"].shape == (2, 5)  # 2 agents + 3
    assert env.action_spec["pole", "action"].shape == (2, 1)
    td = env.rollout(2)
    obs = td["next", "cart", "observation"]
    assert (obs[..., :2] == torch.tensor([1.0, 0.0])).all() and (obs[..., -1] == 0).all()
    assert torch.equal(td["next", "cart", "reward"], td["next", "pole", "reward"])
    assert (td["next", "mjx_state", "data", "time"][:, 0] > 0.015).all()  # 2 x 0.01 s
