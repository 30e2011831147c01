"""Actions are checked against the action spec at the env boundary (``validate_actions``)."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from torchrl.data import Bounded, Categorical, OneHot, Unbounded
from torchrl.envs import (
    EnvBase,
    GymEnv,
    ParallelEnv,
    PendulumEnv,
    SerialEnv,
    check_env_specs,
)
from torchrl.envs.transforms import ClipTransform, StepCounter, TransformedEnv

NAN = float("nan")


def _gym_state(env: GymEnv) -> np.ndarray:
    return np.array(env.env.unwrapped.state, dtype=np.float64).copy()


def _step_rejected(env: EnvBase, td: TensorDict, action: torch.Tensor, match: str) -> None:
    """Steps with ``action``: a ValueError naming the key and the spec, nothing stepped."""
    td = td.clone()
    td["action"] = action
    before = td.clone()
    with pytest.raises(ValueError, match=match) as info:
        env.step(td)
    message = str(info.value)
    assert "'action'" in message and type(env.action_spec).__name__ in message
    assert "next" not in td.keys()
    for key in before.keys(True, True):
        torch.testing.assert_close(td[key], before[key], rtol=0, atol=0, equal_nan=True)


# ------------------------------------------------------------------- the cases of the issue
@pytest.mark.parametrize(
    "action,match",
    [
        (torch.tensor([True, False, False]), r"wrong shape: expected \(2,\), got \(3,\)"),
        (torch.tensor([0.5, 0.5]), "wrong dtype"),
        (torch.tensor([NAN, 1.0]), "wrong dtype"),
        (torch.tensor([True, True]), "not one-hot"),
        (torch.tensor([False, False]), "not one-hot"),
        (torch.tensor([2, 0]), "cannot hold"),  # int64 rows are read as numbers
        (torch.tensor(1), "spec.encode"),  # an index given to a one-hot env
    ],
)
def test_cartpole_one_hot_rejects(action, match):
    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    td = env.reset()
    state = _gym_state(env)
    _step_rejected(env, td, action, match)
    np.testing.assert_array_equal(_gym_state(env), state)  # the simulator did not move


def test_cartpole_accepts_int_one_hot_rows():
    env = GymEnv("CartPole-v1")
    td = env.reset()
    td["action"] = torch.nn.functional.one_hot(torch.tensor(1), 2)  # int64, as F.one_hot gives
    assert env.step(td)["next", "observation"].shape == (4,)


def test_cartpole_categorical_out_of_range():
    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    td = env.reset()
    state = _gym_state(env)
    for bad in (torch.tensor(2), torch.tensor(-1)):
        _step_rejected(env, td, bad, "out of range")
    _step_rejected(env, td, torch.tensor(1.0), "wrong dtype")
    np.testing.assert_array_equal(_gym_state(env), state)


def test_cartpole_categorical_out_of_range_without_checks_names_the_spec():
    # gymnasium's own bare AssertionError becomes an error naming the spec and the action
    env = GymEnv("CartPole-v1", categorical_action_encoding=True, validate_actions=False)
    td = env.reset()
    td["action"] = torch.tensor(2)
    with pytest.raises(ValueError, match="Categorical.*out of range"):
        env.step(td)


@pytest.mark.parametrize(
    "action,match",
    [
        (torch.tensor([NAN]), r"NaN at index \(0,\)"),
        (torch.tensor([2.5]), "out of bounds"),
        (torch.tensor([-math.inf]), "out of bounds"),
        (torch.tensor(0.0), "wrong shape"),
        (torch.tensor([0], dtype=torch.int64), "wrong dtype"),
    ],
)
def test_gym_pendulum_rejects(action, match):
    env = GymEnv("Pendulum-v1")
    env.set_seed(0)
    td = env.reset()
    state = _gym_state(env)
    _step_rejected(env, td, action, match)
    np.testing.assert_array_equal(_gym_state(env), state)


def test_gym_pendulum_accepts_float64_in_range():
    env = GymEnv("Pendulum-v1")
    td = env.reset()
    td["action"] = torch.tensor([1.5], dtype=torch.float64)
    assert not env.step(td)["next", "observation"].isnan().any()


@pytest.mark.parametrize(
    "action,match",
    [
        (torch.zeros(3), r"wrong shape: expected \(1,\), got \(3,\)"),
        (torch.tensor([NAN]), "NaN"),
        (torch.tensor([2.01]), "out of bounds"),
        (torch.zeros(1, 1), "wrong shape"),
    ],
)
def test_torch_pendulum_rejects(action, match):
    env = PendulumEnv(seed=0)
    _step_rejected(env, env.reset(), action, match)


def test_torch_pendulum_batch_unlocked_inputs_are_checked():
    env = PendulumEnv(seed=0)  # batch [], but any input batch is fine
    td = env.reset(TensorDict(batch_size=[5]))
    td["action"] = torch.zeros(5, 1)
    assert env.step(td)["next", "observation"].shape == (5, 3)
    td = env.reset(TensorDict(batch_size=[5]))
    action = torch.zeros(5, 1)
    action[3] = 7.0
    _step_rejected(env, td, action, r"value\[3, 0\]")
    _step_rejected(env, td, torch.zeros(5, 3), "wrong shape")


def test_missing_action_names_the_key():
    env = PendulumEnv(seed=0)
    td = env.reset()
    with pytest.raises(KeyError, match="no action entry .*action.* entries present"):
        env.step(td)


def test_validate_actions_false_skips_the_checks():
    env = PendulumEnv(seed=0, validate_actions=False)
    td = env.reset()
    td["action"] = torch.tensor([100.0])  # the env clamps it itself
    assert env.step(td)["next", "observation"].shape == (3,)
    gym_env = GymEnv("CartPole-v1", validate_actions=False)
    td = gym_env.reset()
    td["action"] = torch.tensor([0.5, 0.5])  # stepped as action 0, as before the checks
    gym_env.step(td)
    gym_env.validate_actions = True  # a plain attribute, switched at any time
    with pytest.raises(ValueError):
        gym_env.step(td)


def test_masked_one_hot_checks_the_mask():
    env = GymEnv("CartPole-v1")
    td = env.reset()
    env.action_spec.update_mask(torch.tensor([False, True]))
    try:
        _step_rejected(env, td, torch.tensor([True, False]), "mask")
        td["action"] = torch.tensor([False, True])
        env.step(td)
    finally:
        env.action_spec.update_mask(None)


# ------------------------------------------------------------------------ nested envs
def test_serial_env_checks_its_batch_once(monkeypatch):
    env = SerialEnv(3, partial(GymEnv, "CartPole-v1"))
    env.set_seed(0)
    td = env.reset()
    action = env.action_spec.rand()
    action[1] = torch.tensor([True, True])
    for method in (env.step, lambda t: env.step_and_maybe_reset(t)[0]):
        bad = td.clone()
        bad["action"] = action
        with pytest.raises(ValueError, match=r"value\[1\]"):
            method(bad)
    # the sub-envs are stepped below their step(): their own checks do not run again
    calls = []
    for sub in env.envs:
        check = sub._spec_cache().check_actions
        monkeypatch.setattr(sub._cache, "check_actions", lambda t, c=check: calls.append(t) or c(t))
    td["action"] = env.action_spec.rand()
    env.step_and_maybe_reset(td)
    env.step(td)
    assert calls == []
    env.close()


SERIAL_GYM_CASES = [
    # (env name, categorical, a bad action for 3 envs, what the error says)
    ("CartPole-v1", False, torch.tensor([[True, False], [True, True], [False, True]]), "value"),
    ("CartPole-v1", False, torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]), "dtype"),
    ("CartPole-v1", True, torch.tensor([0, 2, 1]), "value"),
    ("Pendulum-v1", False, torch.tensor([[0.0], [NAN], [1.0]]), "NaN"),
    ("Pendulum-v1", False, torch.tensor([[0.0], [2.5], [1.0]]), "value"),
    ("Pendulum-v1", False, torch.tensor([0.0, 1.0, 1.0]), "shape"),
]


@pytest.mark.parametrize("name, categorical, bad, match", SERIAL_GYM_CASES)
def test_serial_gym_fast_path_checks_in_its_conversion(name, categorical, bad, match):
    make = partial(GymEnv, name, categorical_action_encoding=categorical)
    env = SerialEnv(3, make)
    env.set_seed(0)
    td = env.reset()
    assert env._stepper is not None and env._spec_cache().check_actions is None
    states = [sub.env.unwrapped.state.copy() for sub in env.envs]
    for method in (env.step, lambda t: env.step_and_maybe_reset(t)[0]):
        with pytest.raises(ValueError, match=match):
            method(td.clone().set("action", bad))
    # nothing was stepped
    for sub, state in zip(env.envs, states):
        assert np.array_equal(sub.env.unwrapped.state, state)
    # the checked conversion gives what the plain one gives (same seeds, same trajectory)
    plain = SerialEnv(3, make, validate_actions=False)
    plain.set_seed(0)
    plain.reset()
    torch.manual_seed(0)
    checked_rollout = env.rollout(20, break_when_any_done=False)
    torch.manual_seed(0)
    plain_rollout = plain.rollout(20, break_when_any_done=False)
    assert (checked_rollout == plain_rollout).all()
    env.close()
    plain.close()


def test_serial_gym_fast_path_vouches_for_other_dtypes():
    # int64 one-hot rows (F.one_hot) fit a bool OneHot spec: the generic check accepts them
    env = SerialEnv(2, partial(GymEnv, "CartPole-v1"))
    td = env.reset()
    td["action"] = torch.nn.functional.one_hot(torch.tensor([0, 1]), 2)
    env.step(td)
    assert td["next", "observation"].shape == (2, 4)
    env.close()


def test_serial_env_of_torch_envs_rejects_bad_rows():
    env = SerialEnv(2, partial(PendulumEnv, seed=0))
    td = env.reset()
    td["action"] = torch.tensor([[0.0], [NAN]])
    with pytest.raises(ValueError, match="NaN at index"):
        env.step_and_maybe_reset(td)
    env.close()


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_batched_env_validate_actions_keyword(cls):
    env = cls(2, partial(PendulumEnv, seed=0), validate_actions=False)
    assert not env.validate_actions
    td = env.reset()
    td["action"] = torch.tensor([[0.0], [NAN]])
    env.step(td)  # not checked: the NaN reaches the envs
    assert td["next", "observation"][1].isnan().any()
    env.close()
    env = cls(2, partial(PendulumEnv, seed=0))
    assert env.validate_actions
    td = env.reset()
    td["action"] = torch.tensor([[0.0], [NAN]])
    with pytest.raises(ValueError, match="NaN at index"):
        env.step(td)
    env.close()


def test_transformed_env_checks_what_reaches_the_base_env():
    base = PendulumEnv(seed=0)
    env = TransformedEnv(base, ClipTransform(in_keys_inv=["action"], low=-0.1, high=0.1))
    td = env.reset()
    td["action"] = torch.tensor([5.0])  # out of the outer spec, clipped by the transform
    env.step(td)
    td = env.reset()
    td["action"] = torch.tensor([NAN])  # NaN survives the clip: the base env refuses it
    with pytest.raises(ValueError, match="PendulumEnv.step.*NaN"):
        env.step(td)
    assert "next" not in td.keys()


def test_transformed_env_follows_the_base_flag_and_checks_once(monkeypatch):
    base = GymEnv("CartPole-v1", validate_actions=False)
    assert not TransformedEnv(base, StepCounter()).validate_actions
    assert TransformedEnv(base, StepCounter(), validate_actions=True).validate_actions
    # a generic check (PendulumEnv) runs once per step, at the base env
    env = TransformedEnv(PendulumEnv(seed=0), StepCounter())
    calls = []
    check = env.base_env._spec_cache().check_actions
    monkeypatch.setattr(env.base_env._cache, "check_actions", lambda t: calls.append(1) or check(t))
    env.rollout(3)
    assert len(calls) == 3
    check_env_specs(env)


def test_gym_env_checks_while_converting(monkeypatch):
    # a single gymnasium env checks its actions in the conversion it does anyway, once per step,
    # also under a TransformedEnv; its generic check is not built
    env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter())
    base = env.base_env
    assert base._spec_cache().check_actions is None
    calls = []
    write = base._checked_write
    monkeypatch.setattr(base, "_checked_write", lambda a: calls.append(1) or write(a))
    env.rollout(3, break_when_any_done=False)
    assert len(calls) == 3
    td = env.reset()
    td["action"] = torch.tensor([True, True])
    with pytest.raises(ValueError, match="GymEnv.step: the action 'action'.*not one-hot"):
        env.step(td)


@pytest.mark.parametrize("categorical", [False, True])
def test_gym_checked_writer_matches_the_plain_writer(categorical):
    # the checked conversion gives the gymnasium actions the plain one gives
    for name in ("CartPole-v1", "Pendulum-v1"):
        env = GymEnv(name, categorical_action_encoding=categorical)
        env._spec_cache()
        assert env._checked_write is not None
        for _ in range(20):
            action = env.action_spec.rand()
            checked, plain = env._checked_write(action), env._write_action(action)
            np.testing.assert_array_equal(np.asarray(checked), np.asarray(plain))
            assert np.asarray(checked).dtype == np.asarray(plain).dtype


def test_gym_masked_action_goes_through_the_generic_check():
    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    td = env.reset()
    env.action_spec.update_mask(torch.tensor([False, True]))
    try:
        _step_rejected(env, td, torch.tensor(0), "mask")
        td["action"] = torch.tensor(1)
        env.step(td)
    finally:
        env.action_spec.update_mask(None)


# ------------------------------------------------------------ property-based: random steps
class _SpecEnv(EnvBase):
    """A tiny stateless env whose action spec is given: it echoes the action as a float."""

    def __init__(self, action_spec, batch_size=()):
        super().__init__(batch_size=batch_size)
        self.observation_spec = Unbounded(shape=(*self.batch_size, 1))
        self.action_spec = action_spec
        self.steps = 0

    def _reset(self, tensordict, **kwargs):
        return TensorDict(observation=torch.zeros(*self.batch_size, 1), batch_size=self.batch_size)

    def _step(self, tensordict):
        self.steps += 1
        obs = tensordict["action"].float().reshape(*self.batch_size, -1)[..., :1]
        return TensorDict(observation=obs, reward=obs.clone(), batch_size=self.batch_size)

    def _set_seed(self, seed):
        pass


_SPECS = {
    "bounded": lambda b: Bounded(-1.5, 2.0, shape=(*b, 2)),
    "bounded_per_dim": lambda b: Bounded(
        torch.tensor([-1.0, 0.0]).expand(*b, 2), torch.tensor([1.0, 3.0]).expand(*b, 2)
    ),
    "bounded_int": lambda b: Bounded(0, 5, shape=(*b, 1), dtype=torch.int64),
    "unbounded": lambda b: Unbounded(shape=(*b, 3)),
    "categorical": lambda b: Categorical(4, shape=b),
    "one_hot": lambda b: OneHot(3, shape=(*b, 3)),
}
_BATCHES = [(), (3,), (70,)]  # (70,) goes through the tensor path (more than 64 entries)


def _corrupt(kind, spec, draw, batch_ndim=0):
    """An action that must be refused, drawn from one of the ways to break ``spec``."""
    good = spec.rand()
    ways = ["shape", "dtype"]
    if good.dtype.is_floating_point:
        ways.append("nan")
    if kind.startswith("bounded") or kind == "categorical":
        ways.append("range")
    if kind == "one_hot":
        ways.append("one_hot")
    way = draw(st.sampled_from(ways))
    if way == "shape":  # the batch dims are kept: the feature dims are wrong
        if good.dim() == batch_ndim:
            return good.unsqueeze(-1)
        if draw(st.booleans()):
            return torch.cat([good, good[..., :1]], -1)
        return good[..., :-1] if good.shape[-1] > 1 else good[..., 0]
    if way == "dtype":
        return good.float() + 0.5 if not good.dtype.is_floating_point else good.long()
    flat = good.clone().reshape(-1)
    index = draw(st.integers(0, flat.numel() - 1))
    if way == "nan":
        flat[index] = NAN
    elif way == "range":
        if kind == "categorical":
            flat[index] = draw(st.sampled_from([-1, 4, 100]))
        else:
            high = spec.high.reshape(-1)[index].item()
            low = spec.low.reshape(-1)[index].item()
            above = draw(st.booleans())
            delta = draw(st.sampled_from([1, 0.5, 1e-3] if good.dtype.is_floating_point else [1]))
            flat[index] = high + delta if above else low - delta
    else:  # one-hot: a row with two ones or none
        rows = flat.reshape(-1, spec.n)
        row = index // spec.n
        rows[row] = draw(st.booleans())  # all ones or all zeros
    return flat.reshape(good.shape)


def _valid(kind, spec, draw):
    """A valid action: ``spec.rand()``, or random in-range values with some at the bounds."""
    if draw(st.booleans()) or kind in ("categorical", "one_hot", "bounded_int"):
        return spec.rand()
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    u = torch.rand(spec.shape, generator=generator)
    flat = u.reshape(-1)
    for index in draw(st.lists(st.integers(0, flat.numel() - 1), max_size=3)):
        flat[index] = draw(st.sampled_from([0.0, 1.0]))  # exactly on a bound
    if kind == "unbounded":
        return (u - 0.5) * draw(st.sampled_from([1.0, 1e3, 1e30]))
    low, high = spec.low, spec.high
    return torch.where(u == 1, high, low + u * (high - low)).clamp(low, high)


def _check_random_steps(data):
    kind = data.draw(st.sampled_from(sorted(_SPECS)))
    batch = data.draw(st.sampled_from(_BATCHES))
    spec = _SPECS[kind](batch)
    env = _ENVS.setdefault((kind, batch), _SpecEnv(spec, batch))
    spec = env.action_spec
    td = env.reset()
    if data.draw(st.booleans()):
        td["action"] = _valid(kind, spec, data.draw)
        out = env.step(td)
        for key in ("observation", "reward", "done"):
            assert out["next", key].shape[: len(batch)] == batch
        assert env.full_observation_spec["observation"].is_in(out["next", "observation"])
        assert env.full_done_spec["done"].is_in(out["next", "done"])
    else:
        td["action"] = _corrupt(kind, spec, data.draw, len(batch))
        steps = env.steps
        with pytest.raises(ValueError, match="does not fit the action spec"):
            env.step(td)
        assert env.steps == steps and "next" not in td.keys()


_ENVS: dict = {}


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_actions_property(data):
    _check_random_steps(data)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_actions_property_slow(data):
    _check_random_steps(data)


_GYM: dict = {}


def _gym_env(name):
    env = _GYM.get(name)
    if env is None:
        env = _GYM[name] = GymEnv(name)
        env.set_seed(0)
    return env


def _check_gym_steps(data):
    name = data.draw(st.sampled_from(["CartPole-v1", "Pendulum-v1"]))
    env = _gym_env(name)
    td = env.reset()
    spec = env.action_spec
    if data.draw(st.booleans()):
        if name == "Pendulum-v1" and data.draw(st.booleans()):
            td["action"] = torch.tensor([data.draw(st.floats(-2.0, 2.0, width=32))])
        else:
            td["action"] = spec.rand()
        out = env.step(td)
        assert env.full_observation_spec["observation"].is_in(out["next", "observation"])
        assert env.full_reward_spec["reward"].is_in(out["next", "reward"])
    else:
        kind = "one_hot" if name == "CartPole-v1" else "bounded"
        td["action"] = _corrupt(kind, spec, data.draw)
        state = _gym_state(env)
        with pytest.raises(ValueError, match="does not fit the action spec"):
            env.step(td)
        np.testing.assert_array_equal(_gym_state(env), state)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_gym_actions_property(data):
    _check_gym_steps(data)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_gym_actions_property_slow(data):
    _check_gym_steps(data)
