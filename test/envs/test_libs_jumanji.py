"""Tests of the jumanji wrappers (skipped without jumanji).

Every jitted function compiles in seconds here, so the tests share a few envs and a persistent
JAX compilation cache (a temp dir, also seen by ParallelEnv's spawned workers): envs that run
the same computation compile it once.
"""

import functools
import os
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
from torchrl.envs.libs.jumanji import JumanjiEnv, JumanjiWrapper
from torchrl.envs.utils import step_mdp


def test_missing_jumanji_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jumanji", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[jumanji\]"'):
        JumanjiEnv("Snake-v1")


pytest.importorskip("jumanji")

SNAKE = {"num_rows": 6, "num_cols": 6, "time_limit": 12}


def _walk_env(limit=4):
    """A jumanji env that compiles in a blink: a walker on a line, with a nested observation,
    a multi-discrete action, extras, termination at |position| >= 3 and truncation at the
    ``limit``-th step."""
    from typing import NamedTuple

    import chex
    import jax
    import jax.numpy as jnp
    from jumanji import specs
    from jumanji.env import Environment
    from jumanji.types import restart, termination, transition, truncation

    class Inner(NamedTuple):
        mask: chex.Array

    class Obs(NamedTuple):
        position: chex.Array
        inner: Inner

    @chex.dataclass
    class State:
        position: chex.Array
        step_count: chex.Array
        key: chex.PRNGKey

    class Walk(Environment):
        def _obs(self, state):
            return Obs(
                position=state.position.astype(jnp.float32)[None],
                inner=Inner(mask=jnp.array([True, state.position > 0])),
            )

        def reset(self, key):
            key, sub = jax.random.split(key)
            state = State(
                position=jax.random.randint(sub, (), -2, 3), step_count=jnp.int32(0), key=key
            )
            return state, restart(self._obs(state), extras={"steps": state.step_count})

        def step(self, state, action):
            move = action[0] - 1 + action[1]  # in {-1, 0, 1, 2}
            state = State(
                position=state.position + move, step_count=state.step_count + 1, key=state.key
            )
            obs = self._obs(state)
            reward = move.astype(jnp.float32)
            extras = {"steps": state.step_count}
            ended = jnp.abs(state.position) >= 3
            timestep = jax.lax.cond(
                ended,
                lambda: termination(reward, obs, extras=extras),
                lambda: jax.lax.cond(
                    state.step_count >= limit,
                    lambda: truncation(reward, obs, extras=extras),
                    lambda: transition(reward, obs, extras=extras),
                ),
            )
            return state, timestep

        @property
        def observation_spec(self):
            return specs.Spec(
                Obs,
                "Obs",
                position=specs.BoundedArray((1,), jnp.float32, -10.0, 10.0, "position"),
                inner=specs.Spec(
                    Inner, "Inner", mask=specs.BoundedArray((2,), bool, False, True, "mask")
                ),
            )

        @property
        def action_spec(self):
            return specs.MultiDiscreteArray(jnp.array([3, 2], jnp.int32), name="action")

    return Walk()


@pytest.fixture(scope="module", autouse=True)
def _jax_compilation_cache(tmp_path_factory):
    with jax_compilation_cache(tmp_path_factory.mktemp("jax_cache")):
        yield


@pytest.fixture(scope="module")
def env():
    return JumanjiEnv("Snake-v1", batch_size=[4], seed=0, **SNAKE)


@pytest.fixture(scope="module")
def walk():
    return JumanjiWrapper(_walk_env(), batch_size=[4], seed=0)


def test_snake_specs_keys_and_zero_copy(env):
    check_env_specs(env)
    obs = env.observation_spec
    assert obs["grid"].shape == (4, 6, 6, 5)
    assert obs["action_mask"].shape == (4, 4) and obs["action_mask"].dtype == torch.bool
    assert obs["step_count"].n == 12
    assert obs["state", "head_position", "row"].shape == (4,)
    assert obs["state", "key"].dtype == torch.uint32
    assert type(env.action_spec).__name__ == "OneHot" and env.action_spec.shape == (4, 4)
    assert env.reward_spec.shape == (4, 1)
    assert repr(env).startswith("JumanjiEnv(env=Snake-v1, batch_size=torch.Size([4])")
    # outputs are JAX's buffers seen through DLPack: no copy on the way out
    out = env.reset()
    assert out["grid"].untyped_storage().nbytes() == out["grid"].numel() * 4


def test_snake_seeding_is_reproducible(env):
    a, b = seeded_rollout(env, 7, 6), seeded_rollout(env, 7, 6)
    assert (a == b).all()
    assert not torch.equal(a["grid"][0, 0], a["grid"][1, 0])  # sub-envs get their own keys
    env.set_seed(8)
    assert not torch.equal(env.reset()["grid"], a["grid"][:, 0])
    # into the wall: the snake dies within 6 moves, and jumanji counts that as termination
    up = lambda td: td.set("action", torch.tensor([True, False, False, False]).expand(4, 4))  # noqa: E731
    out = env.rollout(7, up)
    assert out["next", "terminated"][:, -1].any()


def test_nested_observation_multidiscrete_action_and_extras(walk):
    check_env_specs(walk)
    obs = walk.observation_spec
    assert obs["position"].shape == (4, 1) and type(obs["position"]).__name__ == "Bounded"
    assert obs["inner", "mask"].shape == (4, 2) and obs["inner", "mask"].dtype == torch.bool
    assert obs["extras", "steps"].dtype == torch.int32
    assert type(walk.action_spec).__name__ == "MultiOneHot"
    assert walk.action_spec.shape == (4, 5)


def test_terminated_and_truncated(walk):
    def policy(value):
        # [stay-or-move, extra step]: one-hot halves of the MultiOneHot action
        first = torch.nn.functional.one_hot(torch.tensor(value[0]), 3).bool()
        second = torch.nn.functional.one_hot(torch.tensor(value[1]), 2).bool()
        action = torch.cat([first, second]).expand(4, 5)
        return lambda td: td.set("action", action)

    out = walk.rollout(4, policy((1, 0)))  # stand still: truncated at the 4th step
    nxt = out["next"]
    assert nxt["truncated"][:, -1].all() and not nxt["terminated"].any()
    assert nxt["truncated"][:, :-1].sum() == 0
    assert torch.equal(nxt["extras", "steps"][0], torch.arange(1, 5, dtype=torch.int32))
    # +2 per step: out of [-2, 2] within 3 steps
    out = walk.rollout(3, policy((2, 1)), break_when_any_done=False)
    assert out["next", "terminated"].any(1).all() and not out["next", "truncated"].any()
    assert (out["next", "reward"] == 2).all()


def test_partial_reset_keeps_the_other_sub_envs(walk):
    walk.set_seed(0)
    td = walk.reset()
    td = step_mdp(walk.rand_step(td))
    td = step_mdp(walk.rand_step(td))
    count = td["state", "step_count"].clone()
    keys = td["state", "key"].clone()
    td["_reset"] = torch.tensor([[True], [False], [True], [False]])
    td["done"][:] = False
    td = walk.reset(td)
    assert (td["state", "step_count"][[0, 2]] == 0).all()
    assert torch.equal(td["state", "step_count"][[1, 3]], count[[1, 3]])
    assert torch.equal(td["state", "key"][[1, 3]], keys[[1, 3]])
    assert not torch.equal(td["state", "key"][[0, 2]], keys[[0, 2]])
    assert "_reset" not in td.keys()


def test_step_mask_and_collector(walk):
    td = walk.reset()
    before = td["state", "step_count"].clone()
    td = walk.rand_action(td)
    td["_step"] = torch.tensor([True, False, True, False])
    td = walk.step(td)
    after = td["next", "state", "step_count"]
    assert torch.equal(after[[1, 3]], before[[1, 3]])
    assert (after[[0, 2]] == before[[0, 2]] + 1).all()

    batches = collect_two_batches(walk)  # 4-step episodes: resets inside the batches
    assert (batches[-1]["state", "step_count"] < 4).all()


def test_categorical_actions_frame_skip_and_nested_batch():
    env = JumanjiWrapper(
        _walk_env(limit=6),
        categorical_action_encoding=True,
        frame_skip=2,
        batch_size=[2, 3],
        seed=0,
    )
    assert type(env.action_spec).__name__ == "MultiCategorical"
    assert env.action_spec.shape == (2, 3, 2) and env.action_spec.dtype == torch.int64
    check_env_specs(env)
    stay = lambda td: td.set("action", torch.tensor([1, 0]).expand(2, 3, 2))  # noqa: E731
    td = env.rollout(3, stay)
    assert td["next", "position"].shape == (2, 3, 3, 1)
    assert (td["next", "state", "step_count"] == torch.tensor([2, 4, 6])).all()
    assert td["next", "truncated"][..., -1, 0].all()
    run = lambda td: td.set("action", torch.tensor([2, 1]).expand(2, 3, 2))  # noqa: E731
    td = env.rollout(1, run)  # the episode ends after the 1st or 2nd of the 2 moves
    ended_early = td["next", "state", "step_count"][..., 0] == 1
    expected = torch.where(ended_early, 2.0, 4.0)
    assert torch.equal(td["next", "reward"][..., 0, 0], expected)


@pytest.mark.slow
def test_eager_and_jitted_agree(walk):
    # eager JAX dispatches (and compiles) op by op: seconds for a few steps
    walk.jit = False
    try:
        eager = seeded_rollout(walk, 3, 3)
    finally:
        walk.jit = True
    jitted = seeded_rollout(walk, 3, 3)
    assert (eager == jitted).all()


def test_serial_env_matches_the_vmapped_env():
    make = functools.partial(JumanjiWrapper, _walk_env(), seed=0)
    serial = SerialEnv(2, make)
    check_env_specs(serial)
    a = seeded_rollout(serial, 5, 5)
    assert a["next", "position"].shape == (2, 5, 1)
    assert (seeded_rollout(serial, 5, 5) == a).all()
    serial.close()


@pytest.mark.slow
def test_parallel_env_matches_serial_env():
    # spawned workers import torchrl and jumanji and compile (or load from the cache) the env
    make = functools.partial(JumanjiEnv, "Snake-v1", seed=0, **SNAKE)
    a, b = serial_and_parallel_rollouts(make, 5, 5)
    assert torch.equal(a["next", "grid"], b["next", "grid"])
    assert torch.equal(a["next", "state", "key"], b["next", "state", "key"])


def test_bad_arguments():
    with pytest.raises(TypeError, match="must be a jumanji Environment"):
        JumanjiWrapper(object())
    with pytest.raises(ValueError, match="no env named 'Nope-v0'"):
        JumanjiEnv("Nope-v0")
    with pytest.raises(NotImplementedError, match="from_pixels"):
        JumanjiWrapper(_walk_env(), from_pixels=True)
    with pytest.raises(ValueError, match="frame_skip must be >= 1"):
        JumanjiWrapper(_walk_env(), frame_skip=0)
    assert "Snake-v1" in JumanjiEnv.available_envs


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_ppo_jumanji_example_learns_snake(seed, tmp_path, monkeypatch):
    """PPO on Snake 6x6 eats several times more fruit than random legal moves (about 1 min)."""
    examples = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
    monkeypatch.syspath_prepend(os.path.abspath(examples))
    import importlib

    module = importlib.import_module("ppo_jumanji")
    torch.set_num_threads(1)
    history = module.train(module.Config(seed=seed, out=str(tmp_path), progress=False))
    print(
        f"\nppo_jumanji seed {seed}: {history['final_return']:.2f} fruits per episode "
        f"(random legal moves {history['random_return']:.2f}) after {history['frames']} "
        f"frames, {history['wall']:.1f} s; evaluations {history['eval']}",
        file=sys.stderr,
    )
    assert history["final_return"] >= max(3 * history["random_return"], 6.0)
