"""Tests of the gym backend choice (``set_gym_backend``/``gym_backend``), of GymEnv on gymnasium
and on the legacy gym 0.26, and of ``register_gym_spec_conversion``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

gymnasium = pytest.importorskip("gymnasium")
legacy_gym = pytest.importorskip("gym")

from torchrl.data import Bounded, Categorical, OneHot, Unbounded  # noqa: E402
from torchrl.envs import (  # noqa: E402
    GymEnv,
    GymWrapper,
    SerialEnv,
    gym_backend,
    register_gym_spec_conversion,
    set_gym_backend,
)
from torchrl.envs.libs.gym import gym_to_torchrl_spec_transform  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

BACKENDS = ["gymnasium", "gym"]


# ------------------------------------------------------------------------- set_gym_backend


def test_default_backend_is_gymnasium():
    assert gym_backend() is gymnasium
    assert gym_backend("spaces") is gymnasium.spaces


def test_context_manager_accepts_names_modules_and_callables():
    for backend in ("gym", legacy_gym, lambda: legacy_gym):
        with set_gym_backend(backend):
            assert gym_backend() is legacy_gym
            assert gym_backend("spaces") is legacy_gym.spaces
        assert gym_backend() is gymnasium
    with set_gym_backend("gym"):
        with set_gym_backend(gymnasium):  # nested uses stack
            assert gym_backend() is gymnasium
        assert gym_backend() is legacy_gym
    assert gym_backend() is gymnasium


def test_backend_restored_after_an_exception():
    with pytest.raises(RuntimeError, match="boom"):
        with set_gym_backend("gym"):
            raise RuntimeError("boom")
    assert gym_backend() is gymnasium


def test_decorator():
    @set_gym_backend("gym")
    def inner(x: int) -> tuple[Any, int]:
        return gym_backend(), x + 1

    assert inner(1) == (legacy_gym, 2)
    assert inner.__name__ == "inner"
    assert gym_backend() is gymnasium


def test_bad_backends():
    with pytest.raises(ValueError, match="unknown backend 'gymnasia'"):
        set_gym_backend("gymnasia")
    with pytest.raises(ValueError, match="'numpy' is not a gym backend"):
        set_gym_backend(np)
    with pytest.raises(TypeError, match="expected a module"):
        set_gym_backend(3)  # type: ignore[arg-type]
    with set_gym_backend(lambda: np):
        with pytest.raises(ValueError, match="not a gym backend"):
            gym_backend()


# ------------------------------------------------------------------------ GymEnv, two backends


@pytest.mark.parametrize("backend", BACKENDS)
def test_gym_env_cartpole_on_each_backend(backend):
    with set_gym_backend(backend):
        env = GymEnv("CartPole-v1")
        assert type(env.env).__module__.split(".")[0] == backend
        assert "CartPole-v1" in GymEnv.available_envs
    check_env_specs(env)
    assert isinstance(env.action_spec, OneHot)
    assert isinstance(env.observation_spec["observation"], Bounded)
    # env.set_seed seeds the env; the random actions come from torch's generator
    env.set_seed(0)
    torch.manual_seed(0)
    first = env.rollout(50)
    env.set_seed(0)
    torch.manual_seed(0)
    second = env.rollout(50)
    assert first["next", "done"][-1].item()
    assert torch.equal(first["next", "observation"], second["next", "observation"])
    assert first["next", "reward"].dtype == torch.float32


def test_both_backends_give_the_same_cartpole_episode():
    # the two packages ship the same CartPole dynamics: same seed and actions, same data
    rollouts = []
    for backend in BACKENDS:
        with set_gym_backend(backend):
            env = GymEnv("CartPole-v1", categorical_action_encoding=True)
        env.set_seed(3)
        rollouts.append(env.rollout(20, policy=lambda td: td.set("action", torch.tensor(1))))
    assert torch.allclose(rollouts[0]["next", "observation"], rollouts[1]["next", "observation"])
    assert isinstance(env.action_spec, Categorical)


def test_legacy_gym_box_actions_and_wrapper():
    # GymWrapper reads the package from the env itself: no set_gym_backend needed
    env = GymWrapper(legacy_gym.make("Pendulum-v1", disable_env_checker=True))
    check_env_specs(env)
    rollout = env.rollout(3)
    assert rollout["action"].shape == (3, 1)
    assert rollout["next", "observation"].shape == (3, 3)


def test_legacy_gym_from_pixels():
    pytest.importorskip("pygame")
    with set_gym_backend("gym"):
        env = GymEnv("CartPole-v1", from_pixels=True, pixels_only=False)
    rollout = env.rollout(2)
    assert rollout["next", "pixels"].shape == (2, 400, 600, 3)
    assert rollout["next", "observation"].shape == (2, 4)


def test_legacy_gym_serial_env():
    with set_gym_backend("gym"):
        env = SerialEnv(2, lambda: GymEnv("CartPole-v1"))
        rollout = env.rollout(4)
    assert rollout.batch_size == torch.Size([2, 4])


def test_legacy_gym_vector_envs_are_refused():
    with set_gym_backend("gym"):
        with pytest.raises(NotImplementedError, match="gymnasium's vector envs"):
            GymEnv("CartPole-v1", num_envs=2)
    vec = legacy_gym.vector.SyncVectorEnv([lambda: legacy_gym.make("CartPole-v1")])
    with pytest.raises(NotImplementedError, match="legacy gym"):
        GymWrapper(vec)
    vec.close()


# ------------------------------------------------------------- register_gym_spec_conversion


class Angle(gymnasium.spaces.Space):
    """A custom space (not a Box): one angle in [-pi, pi], as a float32 array of shape (1,)."""

    def __init__(self) -> None:
        super().__init__(shape=(1,), dtype=np.float32)

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        return self.np_random.uniform(-np.pi, np.pi, size=(1,)).astype(np.float32)

    def contains(self, x: Any) -> bool:
        return bool(np.all(np.abs(np.asarray(x)) <= np.pi))


class Spinner(gymnasium.Env):
    """An env whose observation and action are :class:`Angle` values."""

    def __init__(self) -> None:
        self.observation_space = Angle()
        self.action_space = Angle()
        self.angle = np.zeros(1, dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.angle = np.zeros(1, dtype=np.float32)
        return self.angle.copy(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.angle = np.clip(self.angle + np.asarray(action) / 10, -np.pi, np.pi)
        return self.angle.astype(np.float32), float(self.angle[0]), False, False, {}


def test_unregistered_space_names_the_registration():
    class Unknown(gymnasium.spaces.Space):
        pass

    with pytest.raises(NotImplementedError, match="register_gym_spec_conversion"):
        gym_to_torchrl_spec_transform(Unknown())


def test_registered_conversion_is_used_everywhere():
    calls = []

    @register_gym_spec_conversion(Angle)
    def angle_spec(space, dtype=None, device=None, batch_size=(), **kwargs):
        calls.append(kwargs)
        return Bounded(-np.pi, np.pi, shape=(*batch_size, 1), device=device)

    spec = gym_to_torchrl_spec_transform(Angle(), batch_size=[4])
    assert isinstance(spec, Bounded) and spec.shape == (4, 1)
    assert {"categorical_action_encoding", "remap_state_to_observation"} <= set(calls[0])
    # nested in a Dict space
    nested = gym_to_torchrl_spec_transform(gymnasium.spaces.Dict(a=Angle()))
    assert isinstance(nested["a"], Bounded)
    env = GymWrapper(Spinner())
    check_env_specs(env)
    rollout = env.rollout(3, policy=lambda td: td.set("action", torch.ones(1)))
    assert torch.allclose(rollout["next", "observation"].squeeze(-1), torch.tensor([0.1, 0.2, 0.3]))


def test_registered_conversion_by_name_and_errors(monkeypatch):
    class Wheel(gymnasium.spaces.Box):
        def __init__(self) -> None:
            super().__init__(-1.0, 1.0, shape=(2,))

    monkeypatch.setattr(gymnasium.spaces, "Wheel", Wheel, raising=False)

    @register_gym_spec_conversion("Wheel")
    def wheel_spec(space, device=None, batch_size=(), **kwargs):
        return Unbounded(shape=(*batch_size, 2), device=device)

    # the registered conversion comes before the built-in Box one
    assert isinstance(gym_to_torchrl_spec_transform(Wheel()), Unbounded)
    assert isinstance(gym_to_torchrl_spec_transform(gymnasium.spaces.Box(-1, 1)), Bounded)

    class Bad(gymnasium.spaces.Space):
        pass

    @register_gym_spec_conversion(Bad)
    def bad_spec(space, **kwargs):
        return "not a spec"

    with pytest.raises(TypeError, match="expected a torchrl TensorSpec"):
        gym_to_torchrl_spec_transform(Bad())
    with pytest.raises(TypeError, match="spec_type must be"):
        register_gym_spec_conversion(3)  # type: ignore[arg-type]
