"""Tests of OpenEnvWrapper/OpenEnvEnv on a small OpenEnv environment defined here.

The environment runs in-process (an ``openenv.core.Environment``) or behind OpenEnv's own
FastAPI server, started by a fixture on 127.0.0.1 in a thread (no Docker, no network).
"""

import importlib.util
import random
import socket
import sys
import threading
import time
import warnings

import pytest
import torch

from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import ParallelEnv, SerialEnv, check_env_specs
from torchrl.envs.libs.openenv import OpenEnvEnv, OpenEnvWrapper


def test_missing_openenv_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "openenv", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[openenv\]"'):
        OpenEnvWrapper(object())


_has_openenv = all(importlib.util.find_spec(m) is not None for m in ("openenv", "uvicorn"))
needs_openenv = pytest.mark.skipif(not _has_openenv, reason="openenv (or uvicorn) is missing")

if _has_openenv:
    import uvicorn
    from openenv.core import GenericEnvClient
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class GuessAction(Action):
        guess: int

    class GuessObservation(Observation):
        hint: int = 0  # -1: the guess is too small, 1: too large, 0: right (or no guess yet)
        tries: int = 0

    class GuessEnv(Environment):
        """Guess a number in [0, 10) within 5 tries; reward 1 for the right guess."""

        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self._rng = random.Random(0)
            self._target = 0
            self._state = State(step_count=0)

        def reset(self, seed=None, episode_id=None, **kwargs):
            if seed is not None:
                self._rng = random.Random(seed)
            self._target = self._rng.randrange(10)
            self._state = State(episode_id=episode_id, step_count=0)
            return GuessObservation(done=False, reward=0.0)

        def step(self, action, timeout_s=None, **kwargs):
            self._state.step_count += 1
            gap = action.guess - self._target
            done = gap == 0 or self._state.step_count >= 5
            hint = (gap > 0) - (gap < 0)
            return GuessObservation(
                hint=hint, tries=self._state.step_count, done=done, reward=float(gap == 0)
            )

        @property
        def state(self):
            return self._state

    OBS_SPEC = Composite(
        hint=Unbounded(shape=(), dtype=torch.int64), tries=Unbounded(shape=(1,), dtype=torch.int64)
    )
    ACTION_SPEC = Composite(guess=Categorical(10))


@pytest.fixture(scope="module")
def server():
    app = create_app(
        GuessEnv, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=8
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline, "the OpenEnv server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


def make_tensor_client(base_url):
    return OpenEnvWrapper(
        GenericEnvClient(base_url=base_url), observation_spec=OBS_SPEC, action_spec=ACTION_SPEC
    )


def make_in_process():
    return OpenEnvWrapper(
        GuessEnv(), action_cls=GuessAction, observation_spec=OBS_SPEC, action_spec=ACTION_SPEC
    )


def _bisect(env, seed):
    """Plays one episode by bisection; returns the rewards and hints."""
    env.set_seed(seed)
    td = env.reset()
    low, high, rewards, hints = 0, 9, [], []
    while True:
        guess = (low + high) // 2
        td["guess"] = torch.tensor(guess)
        td = env.step(td)["next"]
        rewards.append(float(td["reward"]))
        hint = int(td["hint"])
        hints.append(hint)
        if td["done"].item():
            return rewards, hints
        low, high = (guess + 1, high) if hint < 0 else (low, guess - 1)


@needs_openenv
def test_non_tensor_observations_and_actions_over_a_server(server):
    env = OpenEnvWrapper(GenericEnvClient(base_url=server))
    td = env.reset()
    assert td["observation"] == {"metadata": {}, "hint": 0, "tries": 0}
    assert "reward" not in td.keys() and not td["done"].any()
    td["action"] = {"guess": 11}  # too large whatever the number
    out = env.step(td)
    assert out["next", "observation"]["hint"] == 1 and out["next", "reward"].item() == 0.0
    assert out["next", "reward"].dtype == torch.float32 and out["next", "reward"].shape == (1,)
    assert not out["next", "truncated"].any()
    env.close()


@needs_openenv
def test_in_process_environment_with_models(server):
    env = OpenEnvWrapper(GuessEnv(), action_cls=GuessAction, return_observation_dict=True)
    td = env.reset()
    assert td["observation"]["hint"] == 0
    td["action"] = {"guess": -1}  # built into GuessAction
    assert env.step(td)["next", "observation"]["hint"] == -1
    td["action"] = GuessAction(guess=-1)
    assert env.step(td)["next", "observation"]["tries"] == 2
    kept = OpenEnvWrapper(GuessEnv()).reset()["observation"]
    assert isinstance(kept, GuessObservation)


@needs_openenv
@pytest.mark.parametrize("where", ["server", "in_process"])
def test_tensor_fields_specs_and_episodes(server, where):
    env = make_tensor_client(server) if where == "server" else make_in_process()
    check_env_specs(env)
    assert env.observation_spec["tries"].shape == (1,)
    assert env.action_spec.n == 10
    rewards, hints = _bisect(env, seed=3)
    assert rewards[-1] == 1.0 and hints[-1] == 0 and sum(rewards) == 1.0
    rollout = env.rollout(20)
    assert rollout["next", "done"][-1].all() and rollout.batch_size[0] <= 5
    env.close()


@needs_openenv
def test_set_seed_reaches_the_reset(server):
    env = make_tensor_client(server)
    first = _bisect(env, seed=7)
    assert _bisect(env, seed=7) == first
    assert any(_bisect(env, seed=s) != first for s in range(8, 12))
    env.close()


@needs_openenv
def test_errors(server):
    with pytest.raises(ValueError, match="batch_size must be empty"):
        OpenEnvWrapper(GuessEnv(), batch_size=[2])
    with pytest.raises(ValueError, match="field names"):
        OpenEnvWrapper(GuessEnv(), observation_spec=Composite(a=Composite(b=Unbounded(()))))
    env = OpenEnvWrapper(
        GuessEnv(), observation_spec=Composite(missing=Unbounded(shape=(), dtype=torch.int64))
    )
    with pytest.raises(KeyError, match="no field 'missing'"):
        env.reset()


@needs_openenv
def test_reward_none_warns_once(server):
    class NoReward(GuessEnv):
        def step(self, action, timeout_s=None, **kwargs):
            obs = super().step(action)
            obs.reward = None
            return obs

    env = OpenEnvWrapper(NoReward(), action_cls=GuessAction)
    td = env.reset()
    td["action"] = {"guess": 0}
    with pytest.warns(UserWarning, match="reward=None"):
        out = env.step(td)
    assert out["next", "reward"].item() == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.step(td.exclude("next"))


@needs_openenv
def test_openenv_env_by_name(server):
    env = OpenEnvEnv(
        "guess",
        auto_action=False,
        env_kwargs={"base_url": server, "skip_install": True},
        observation_spec=OBS_SPEC,
        action_spec=ACTION_SPEC,
    )
    assert env.env_name == "guess" and OpenEnvEnv.available_envs == []
    check_env_specs(env)
    env.close()


@needs_openenv
def test_serial_and_parallel_env_with_collector(server):
    from functools import partial

    from torchrl.collectors import SyncDataCollector

    serial = SerialEnv(2, make_in_process)
    check_env_specs(serial)
    serial.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = ParallelEnv(2, partial(make_tensor_client, server))
    try:
        env.set_seed(0)
        collector = SyncDataCollector(env, None, frames_per_batch=40, total_frames=40)
        (batch,) = list(collector)
        collector.shutdown()
    finally:
        if not env.is_closed:
            env.close()
    assert batch["next", "hint"].shape == (2, 20)
    assert batch["next", "done"].any()
    # random guesses: an episode ends by a right guess (reward 1) or after 5 tries
    ends = batch["next", "done"].squeeze(-1)
    right = batch["next", "reward"].squeeze(-1) == 1
    tries = batch["next", "tries"].squeeze(-1)
    assert torch.equal(ends, right | (tries == 5))
