"""The batched fast path of SerialEnv (``_batched_stepper``) against stepping env by env.

A ``SerialEnv`` of plain ``GymWrapper`` envs steps them through one batched stepper; here every
result of that path (observations, rewards, done flags, partial and automatic resets, seeds)
is compared with the general path, forced by removing the stepper, and the cases that must fall
back to the general path are listed.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from tensordict import TensorDict

from torchrl.envs import GymEnv, GymWrapper, ParallelEnv, SerialEnv

gymnasium = pytest.importorskip("gymnasium")
from gymnasium import spaces  # noqa: E402
from gymnasium.wrappers import TimeLimit  # noqa: E402


class DictEnv(gymnasium.Env):
    """A small env with a Dict observation and a MultiDiscrete action (the generic readers)."""

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {
                "pos": spaces.Box(-10.0, 10.0, shape=(2,), dtype="float64"),
                "count": spaces.Discrete(50),
            }
        )
        self.action_space = spaces.MultiDiscrete([3, 2])
        self.t = 0
        self.pos = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.pos = self.np_random.uniform(-1, 1, size=2)
        return {"pos": self.pos.copy(), "count": 0}, {}

    def step(self, action):
        self.t += 1
        self.pos = self.pos + (action - [1, 0.5]) * 0.1
        reward = float(-abs(self.pos).sum())
        terminated = bool(abs(self.pos).max() > 1.5)
        return {"pos": self.pos.copy(), "count": self.t}, reward, terminated, False, {}


def make_dict_env() -> GymWrapper:
    return GymWrapper(TimeLimit(DictEnv(), max_episode_steps=7))


class SlowStepGymEnv(GymEnv):
    """A subclass changing ``_step``: must be stepped through it, not batched."""

    def _step(self, tensordict):
        return super()._step(tensordict)


CASES = {
    "cartpole": partial(GymEnv, "CartPole-v1"),
    "cartpole_categorical": partial(GymEnv, "CartPole-v1", categorical_action_encoding=True),
    "pendulum": partial(GymEnv, "Pendulum-v1", max_episode_steps=9),
    "pendulum_frame_skip": partial(GymEnv, "Pendulum-v1", max_episode_steps=9, frame_skip=2),
    "dict_multidiscrete": make_dict_env,
}


def _pair(make, n: int = 4) -> tuple[SerialEnv, SerialEnv]:
    """Two SerialEnvs seeded alike: one on the fast path, one forced on the general path."""
    fast, slow = SerialEnv(n, make), SerialEnv(n, make)
    fast.start()
    slow.start()
    assert fast._stepper is not None
    slow._stepper = None
    assert fast.set_seed(3) == slow.set_seed(3)
    return fast, slow


def _assert_same(a: TensorDict, b: TensorDict) -> None:
    keys = set(a.keys(True, True))
    assert keys == set(b.keys(True, True))
    for key in keys:
        x, y = a.get(key), b.get(key)
        assert x.dtype == y.dtype and x.shape == y.shape, key
        assert torch.equal(x, y), key


@pytest.mark.parametrize("name", sorted(CASES))
def test_rollout_matches_general_path(name):
    fast, slow = _pair(CASES[name])
    try:
        outs = []
        for env in (fast, slow):
            torch.manual_seed(0)
            # 40 steps: every case has several episode ends, hence automatic partial resets
            outs.append(env.rollout(40, break_when_any_done=False))
        assert bool(outs[0]["next", "done"].any())
        _assert_same(*outs)
        # step() (no reset), as rollouts stopping at the first done make it
        for env in (fast, slow):
            torch.manual_seed(1)
            env.set_seed(5)
            outs.append(env.rollout(40))
        _assert_same(outs[2], outs[3])
    finally:
        fast.close()
        slow.close()


@pytest.mark.parametrize("name", ["cartpole", "dict_multidiscrete"])
def test_step_and_maybe_reset_and_partial_reset(name):
    fast, slow = _pair(CASES[name], n=3)
    try:
        tds = [fast.reset(), slow.reset()]
        _assert_same(*tds)
        for t in range(25):
            action = fast.rand_action(tds[0].clone()).get("action")
            pairs = []
            for env, td in zip((fast, slow), tds):
                pairs.append(env.step_and_maybe_reset(td.clone().set("action", action.clone())))
            _assert_same(pairs[0][0], pairs[1][0])
            _assert_same(pairs[0][1], pairs[1][1])
            tds = [pairs[0][1], pairs[1][1]]
            if t == 10:
                # an explicit partial reset of worker 1 goes through the envs' own reset
                mask = torch.tensor([[False], [True], [False]])
                tds = [
                    env.reset(td.clone().set("_reset", mask)) for env, td in zip((fast, slow), tds)
                ]
                _assert_same(*tds)
    finally:
        fast.close()
        slow.close()


def test_fast_path_equals_envs_stepped_one_by_one():
    serial = SerialEnv(3, CASES["cartpole"])
    singles = [GymEnv("CartPole-v1") for _ in range(3)]
    seed = serial.set_seed(11)
    chained = 11
    for env in singles:
        chained = env.set_seed(chained)
    assert seed == chained
    td = serial.reset()
    roots = [env.reset() for env in singles]
    for _ in range(30):
        td = serial.rand_action(td)
        transition, td = serial.step_and_maybe_reset(td)
        for i, env in enumerate(singles):
            step_in = roots[i].set("action", transition["action"][i].clone())
            single_transition, roots[i] = env.step_and_maybe_reset(step_in)
            _assert_same(transition[i], single_transition)
            _assert_same(td[i], roots[i])
    serial.close()


def test_parallel_of_fast_serial_matches_serial():
    make = CASES["cartpole"]
    serial = SerialEnv(4, make)
    serial.start()
    serial._stepper = None
    parallel = ParallelEnv(2, partial(SerialEnv, 2, make))
    try:
        assert serial.set_seed(7) == parallel.set_seed(7)
        outs = []
        for env in (serial, parallel):
            torch.manual_seed(0)
            outs.append(env.rollout(30, break_when_any_done=False))
        _assert_same(outs[0], outs[1].reshape(4, 30))
    finally:
        serial.close()
        parallel.close()


def _transformed() -> object:
    from torchrl.envs import StepCounter, TransformedEnv

    return TransformedEnv(GymEnv("CartPole-v1"), StepCounter(5))


def _with_reader() -> GymEnv:
    from torchrl.data import Unbounded
    from torchrl.envs.libs.gym import default_info_dict_reader

    reader = default_info_dict_reader(["x"], spec=[Unbounded(())])
    return GymEnv("CartPole-v1").set_info_dict_reader(reader)


@pytest.mark.parametrize(
    "make",
    [
        _transformed,
        partial(SlowStepGymEnv, "CartPole-v1"),
        _with_reader,
        partial(GymEnv, "CartPole-v1", num_envs=2),
        [partial(GymEnv, "CartPole-v1"), partial(SlowStepGymEnv, "CartPole-v1")],
    ],
    ids=["transformed", "subclass_step", "info_reader", "vector_env", "mixed_classes"],
)
def test_fallback_to_general_path(make):
    n = 2
    env = SerialEnv(n, make)
    try:
        env.start()
        assert env._stepper is None
        env.set_seed(0)
        rollout = env.rollout(12, break_when_any_done=False)
        assert rollout.batch_size[0] == n and rollout.batch_size[-1] == 12
    finally:
        env.close()


def test_fast_path_rebuilt_after_restart():
    env = SerialEnv(2, CASES["cartpole"])
    env.start()
    first = env._stepper
    assert first is not None
    env.close()
    assert env._stepper is None
    env.rollout(3)
    assert env._stepper is not None and env._stepper is not first
    env.close()


@pytest.mark.parametrize("batch", [[], [3]])
def test_rand_action_one_hot_sampler_matches_spec(batch):
    from torchrl.data import OneHot
    from torchrl.envs import PendulumEnv

    env = PendulumEnv(batch_size=batch)
    env.action_spec = OneHot(4, shape=(*batch, 4), dtype=torch.bool)
    assert env._spec_cache().action_rand is not None
    torch.manual_seed(0)
    ours = [env.rand_action()["action"] for _ in range(20)]
    torch.manual_seed(0)
    theirs = [env.action_spec.rand() for _ in range(20)]
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b) and a.dtype == b.dtype
    # the rows are copies: editing a sample leaves the next ones intact
    ours[0].zero_()
    assert bool(env.rand_action()["action"].any(-1).all())
    # a mask set on the spec afterwards is honoured
    mask = torch.tensor([False, False, True, False]).expand(*batch, 4)
    env.action_spec.update_mask(mask)
    for _ in range(10):
        assert bool(env.rand_action()["action"][..., 2].all())


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize(
    "name,action,expected",
    [
        ("CartPole-v1", torch.tensor(1), "OneHot"),  # an index given to a one-hot env
        ("Pendulum-v1", torch.tensor(0.0), "Bounded"),  # the trailing action dim missing
    ],
)
def test_action_of_the_wrong_shape_names_key_and_spec(batched, name, action, expected):
    if batched:
        env = SerialEnv(2, partial(GymEnv, name))
        action = action.expand(2)
    else:
        env = GymEnv(name)
    td = env.reset()
    td["action"] = action
    with pytest.raises(ValueError, match=rf"'action' does not fit the action spec {expected}"):
        env.step(td)
    env.close()
