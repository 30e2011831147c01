"""Tests of the gymnax wrappers (skipped without gymnax; Craftax tests without craftax).

Every jitted function compiles in seconds (Craftax: minutes, slow-marked), so the tests share
envs and a persistent JAX compilation cache in a temp dir: envs that run the same computation
compile it once.
"""

import functools
import sys

import pytest
import torch
from envs._jax_helpers import (
    collect_two_batches,
    jax_compilation_cache,
    seeded_rollout,
    serial_and_parallel_rollouts,
)

from torchrl.envs import SerialEnv, check_env_specs
from torchrl.envs.libs.gymnax import GymnaxEnv, GymnaxWrapper
from torchrl.envs.utils import step_mdp


def test_missing_gymnax_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "gymnax", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[gymnax\]"'):
        GymnaxEnv("CartPole-v1")


pytest.importorskip("gymnax")


@pytest.fixture(scope="module", autouse=True)
def _jax_compilation_cache(tmp_path_factory):
    with jax_compilation_cache(tmp_path_factory.mktemp("jax_cache")):
        yield


def _line_env():
    """A gymnax env that compiles in a blink: a walker on a line with a Dict observation,
    termination at |position| >= 3 and truncation at ``max_steps_in_episode`` (4)."""
    import jax
    import jax.numpy as jnp
    from flax import struct
    from gymnax.environments import environment, spaces

    @struct.dataclass
    class State(environment.EnvState):
        position: jax.Array

    @struct.dataclass
    class Params(environment.EnvParams):
        max_steps_in_episode: int = 4

    class Line(environment.Environment):
        @property
        def default_params(self):
            return Params()

        def _obs(self, state):
            return {
                "position": state.position.astype(jnp.float32)[None],
                "parity": jnp.mod(state.position, 2).astype(jnp.int32),
            }

        def reset_env(self, key, params):
            state = State(time=0, position=jax.random.randint(key, (), -2, 3))
            return self._obs(state), state

        def step_env(self, key, state, action, params):
            move = action.astype(jnp.int32) - 1
            state = State(time=state.time + 1, position=state.position + move)
            terminated = jnp.abs(state.position) >= 3
            return self._obs(state), state, move.astype(jnp.float32), terminated, {}

        def action_space(self, params):
            return spaces.Discrete(3)

        def observation_space(self, params):
            return spaces.Dict(
                {
                    "position": spaces.Box(-10.0, 10.0, (1,), jnp.float32),
                    "parity": spaces.Discrete(2),
                }
            )

    return Line()


@pytest.fixture(scope="module")
def line():
    env = _line_env()
    return GymnaxWrapper(env, env.default_params, batch_size=[4], seed=0)


def test_dict_observation_specs_and_flags(line):
    check_env_specs(line)
    obs = line.observation_spec
    assert obs["position"].shape == (4, 1) and type(obs["position"]).__name__ == "Bounded"
    assert obs["parity"].dtype == torch.int32
    assert obs["state", "env", "position"].shape == (4,)
    assert obs["state", "rng"].shape == (4, 2) and obs["state", "rng"].dtype == torch.uint32
    assert type(line.action_spec).__name__ == "OneHot" and line.action_spec.shape == (4, 3)
    stay = lambda td: td.set("action", torch.tensor([False, True, False]).expand(4, 3))  # noqa: E731
    out = line.rollout(4, stay)
    assert out["next", "truncated"][:, -1].all() and not out["next", "terminated"].any()
    assert not out["next", "truncated"][:, :-1].any()
    right = lambda td: td.set("action", torch.tensor([False, False, True]).expand(4, 3))  # noqa: E731
    out = line.rollout(5, right, break_when_any_done=False)
    # from -1..2 the walker steps off within 4 moves; from -2 the 4-step limit comes first
    start = out["state", "env", "position"][:, 0]
    assert torch.equal(out["next", "terminated"].any(1).squeeze(-1), start > -2)
    assert (out["next", "reward"] == 1).all()
    assert torch.equal(out["next", "done"], out["next", "terminated"] | out["next", "truncated"])


def test_seeding_partial_reset_and_step_mask(line):
    assert (seeded_rollout(line, 4, 6) == seeded_rollout(line, 4, 6)).all()
    td = line.reset()
    td = step_mdp(line.rand_step(td))
    time = td["state", "env", "time"].clone()
    rng = td["state", "rng"].clone()
    td["done"][:] = False
    td["_reset"] = torch.tensor([[False], [True], [False], [True]])
    td = line.reset(td)
    assert (td["state", "env", "time"][[1, 3]] == 0).all()
    assert torch.equal(td["state", "env", "time"][[0, 2]], time[[0, 2]])
    assert torch.equal(td["state", "rng"][[0, 2]], rng[[0, 2]])
    td = line.rand_action(td)
    td["_step"] = torch.tensor([True, False, False, True])
    before = td["state", "env", "time"].clone()
    td = line.step(td)
    assert torch.equal(td["next", "state", "env", "time"], before + torch.tensor([1, 0, 0, 1]))


def test_collector_and_serial_env(line):
    collect_two_batches(line)

    raw = _line_env()
    make = functools.partial(GymnaxWrapper, raw, raw.default_params, seed=0)
    serial = SerialEnv(2, make)
    check_env_specs(serial)
    a = seeded_rollout(serial, 1, 6)
    assert (seeded_rollout(serial, 1, 6) == a).all()
    serial.close()


def test_cartpole_categorical_frame_skip_nested_batch():
    env = GymnaxEnv(
        "CartPole-v1", categorical_action_encoding=True, frame_skip=2, batch_size=[2, 2], seed=0
    )
    assert type(env.action_spec).__name__ == "Categorical" and env.action_spec.shape == (2, 2)
    check_env_specs(env)
    td = env.rollout(3, break_when_any_done=False)
    assert td["next", "observation"].shape == (2, 2, 3, 4)
    steps = td["next", "state", "env", "time"][..., 0]
    assert ((steps == 2) | td["next", "done"][..., 0, 0]).all()  # two moves per step
    assert repr(env).startswith("GymnaxEnv(env=CartPole-v1, batch_size=torch.Size([2, 2])")


@pytest.mark.slow
def test_parallel_env_matches_serial_env():
    make = functools.partial(GymnaxEnv, "CartPole-v1", seed=0)
    a, b = serial_and_parallel_rollouts(make, 5, 30)
    assert torch.equal(a["next", "observation"], b["next", "observation"])
    assert a["next", "done"].any()


@pytest.mark.slow
def test_craftax_classic_symbolic():
    pytest.importorskip("craftax")
    env = GymnaxEnv("Craftax-Classic-Symbolic-v1", batch_size=[2], seed=0)  # compiles: minutes
    check_env_specs(env)
    td = env.rollout(10, break_when_any_done=False)
    assert td["next", "observation"].shape == (2, 10, 1345)
    assert env.action_spec.shape == (2, 17)


def test_bad_arguments():
    with pytest.raises(TypeError, match="must have gymnax's API"):
        GymnaxWrapper(object())
    with pytest.raises(ValueError, match="no env named 'Nope-v0'"):
        GymnaxEnv("Nope-v0")
    with pytest.raises(ValueError, match="frame_skip must be >= 1"):
        GymnaxWrapper(_line_env(), frame_skip=0)
