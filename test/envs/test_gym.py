"""Tests of the gymnasium wrappers (``torchrl.envs.libs.gym``)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")
from gymnasium import spaces  # noqa: E402

from torchrl.data.specs import (  # noqa: E402
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)
from torchrl.envs.libs.gym import (  # noqa: E402
    GymEnv,
    GymWrapper,
    default_info_dict_reader,
)
from torchrl.envs.libs.gym import (  # noqa: E402
    gym_to_torchrl_spec_transform as _gym_to_torchrl_spec_transform,
)
from torchrl.envs.utils import check_env_specs  # noqa: E402


# ------------------------------------------------------------------------ tiny custom envs
class _CountingEnv(gym.Env):
    """Terminates after ``horizon`` steps; reward 1 per step; info carries the step count."""

    def __init__(self, action_space, observation_space, horizon=5):
        self.action_space = action_space
        self.observation_space = observation_space
        self.horizon = horizon
        self.t = 0
        self.actions = []

    def _obs(self):
        sample = self.observation_space.sample()
        return sample

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(1 << 30)))
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.actions.append(action)
        self.t += 1
        info = {"count": self.t, "half": self.t / 2}
        return self._obs(), 1.0, self.t >= self.horizon, False, info


def _multidiscrete_env():
    return _CountingEnv(
        spaces.MultiDiscrete([3, 4], start=[0, -1]),
        spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32),
    )


def _multibinary_env():
    return _CountingEnv(spaces.MultiBinary(3), spaces.MultiBinary(4))


def _dict_env():
    return _CountingEnv(
        spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32),
        spaces.Dict(
            {
                "position": spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float64),
                "goal": spaces.Discrete(5, start=2),
                "nested": spaces.Dict({"flags": spaces.MultiBinary(2)}),
            }
        ),
    )


def _tuple_env():
    return _CountingEnv(
        spaces.Tuple((spaces.Discrete(2), spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32))),
        spaces.Tuple((spaces.Box(0, 10, shape=(2,), dtype=np.int64), spaces.Discrete(3))),
    )


# --------------------------------------------------------------------------- spec mapping
class TestSpecs:
    def test_box(self):
        spec = _gym_to_torchrl_spec_transform(spaces.Box(-1.0, 2.0, shape=(3,)), batch_size=[2])
        assert isinstance(spec, Bounded)
        assert spec.shape == (2, 3) and spec.dtype == torch.float32
        spec = _gym_to_torchrl_spec_transform(spaces.Box(-np.inf, np.inf, shape=(2,)))
        assert isinstance(spec, Unbounded)
        low, high = np.array([-1.0, -np.inf], np.float32), np.array([1.0, np.inf], np.float32)
        half = spaces.Box(low, high, dtype=np.float32)
        spec = _gym_to_torchrl_spec_transform(half)
        assert isinstance(spec, Bounded) and spec.is_in(spec.rand())
        assert not spec.is_in(torch.tensor([2.0, 0.0]))
        spec = _gym_to_torchrl_spec_transform(spaces.Box(0, 255, shape=(4, 4), dtype=np.uint8))
        assert isinstance(spec, Bounded) and spec.dtype == torch.uint8

    def test_discrete(self):
        one_hot = _gym_to_torchrl_spec_transform(spaces.Discrete(4))
        assert isinstance(one_hot, OneHot) and one_hot.shape == (4,)
        index = _gym_to_torchrl_spec_transform(spaces.Discrete(4), categorical_action_encoding=True)
        assert isinstance(index, Categorical) and index.shape == () and index.dtype == torch.int64

    def test_multi(self):
        space = spaces.MultiDiscrete([2, 3])
        assert isinstance(_gym_to_torchrl_spec_transform(space), MultiOneHot)
        spec = _gym_to_torchrl_spec_transform(space, categorical_action_encoding=True)
        assert isinstance(spec, MultiCategorical) and spec.shape == (2,)
        spec = _gym_to_torchrl_spec_transform(spaces.MultiBinary(5), batch_size=[3])
        assert isinstance(spec, Binary) and spec.shape == (3, 5)

    def test_composite(self):
        space = spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Tuple((spaces.Discrete(3),))})
        spec = _gym_to_torchrl_spec_transform(space, batch_size=[2])
        assert isinstance(spec, Composite) and spec.shape == (2,)
        assert spec["b", "0"].shape == (2, 3)

    def test_unsupported(self):
        # Text maps to NonTensor (test_spec_checks_nontensor.py); Sequence has no spec
        with pytest.raises(NotImplementedError, match="Sequence"):
            _gym_to_torchrl_spec_transform(spaces.Sequence(spaces.Discrete(2)))


# --------------------------------------------------------------------------- check_env_specs
@pytest.mark.parametrize("categorical", [False, True])
def test_cartpole_specs(categorical):
    env = GymEnv("CartPole-v1", categorical_action_encoding=categorical)
    check_env_specs(env, seed=0)
    spec = env.action_spec
    assert isinstance(spec, Categorical if categorical else OneHot)
    assert env.observation_spec["observation"].dtype == torch.float32
    assert env.reward_spec.dtype == torch.float32 and env.reward_spec.shape == (1,)
    assert env.done_spec["done"].dtype == torch.bool


def test_pendulum_specs():
    env = GymEnv("Pendulum-v1")
    check_env_specs(env, seed=0)
    assert isinstance(env.action_spec, Bounded)


@pytest.mark.parametrize("categorical", [False, True])
@pytest.mark.parametrize("make", [_multidiscrete_env, _multibinary_env, _dict_env, _tuple_env])
def test_custom_spaces_specs(make, categorical):
    env = GymWrapper(make(), categorical_action_encoding=categorical)
    check_env_specs(env, seed=0)
    rollout = env.rollout(10)
    assert rollout.batch_size == (5,)  # terminates after 5 steps


def test_dict_observation_keys():
    env = GymWrapper(_dict_env())
    keys = set(env.observation_spec.keys(include_nested=True, leaves_only=True))
    assert keys == {"position", "goal", ("nested", "flags")}
    assert env.observation_spec["position"].dtype == torch.float64  # the space's dtype is kept
    td = env.reset()
    # Discrete(5, start=2) is a 0-based one-hot in torchrl
    assert td["goal"].shape == (5,) and td["goal"].sum() == 1


def test_tuple_keys():
    env = GymWrapper(_tuple_env(), categorical_action_encoding=True)
    assert set(env.observation_spec["observation"].keys()) == {"0", "1"}
    assert set(env.full_action_spec["action"].keys()) == {"0", "1"}


def test_action_start_offsets():
    gym_env = _multidiscrete_env()
    env = GymWrapper(gym_env, categorical_action_encoding=True)
    env.reset()
    td = env.reset()
    td["action"] = torch.tensor([2, 0])
    env.step(td)
    assert list(gym_env.actions[-1]) == [2, -1]
    one_hot = GymWrapper(_multidiscrete_env())
    one_hot.reset()
    td["action"] = torch.tensor([0, 1, 0, 0, 0, 0, 1], dtype=torch.bool)
    one_hot.step(td)
    assert list(one_hot.env.actions[-1]) == [1, 2]


def test_discrete_observation_one_hot():
    env = GymEnv("FrozenLake-v1")
    check_env_specs(env, seed=0)
    assert env.reset()["observation"].tolist() == [True] + [False] * 15
    env = GymEnv("FrozenLake-v1", categorical_action_encoding=True)
    assert env.reset()["observation"].item() == 0


# ------------------------------------------------------------------------------ done handling
def test_terminated_vs_truncated():
    env = GymEnv("CartPole-v1", max_episode_steps=4, categorical_action_encoding=True)
    env.set_seed(0)
    rollout = env.rollout(10, policy=lambda td: td.set("action", torch.tensor(0)))
    assert rollout.batch_size == (4,)
    assert rollout["next", "truncated"][-1].item() and not rollout["next", "terminated"][-1]
    assert rollout["next", "done"][-1].item() and not rollout["next", "done"][:-1].any()

    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    env.set_seed(0)
    rollout = env.rollout(100, policy=lambda td: td.set("action", torch.tensor(0)))
    assert rollout.batch_size[0] < 100
    assert rollout["next", "terminated"][-1].item() and not rollout["next", "truncated"][-1]


def test_vector_env_done_handling():
    n, steps = 4, 120
    env = GymEnv("CartPole-v1", num_envs=n, max_episode_steps=30)
    assert env.batch_size == (n,)
    check_env_specs(env, seed=0)
    env.set_seed(1)
    rollout = env.rollout(steps, break_when_any_done=False)
    assert rollout.batch_size == (n, steps)
    obs, next_obs = rollout["observation"], rollout["next", "observation"]
    done = rollout["next", "done"].squeeze(-1)
    terminated = rollout["next", "terminated"].squeeze(-1)
    assert done.any(1).all()  # every sub-env finished an episode
    assert (rollout["next", "truncated"].squeeze(-1) | terminated).eq(done).all()
    # a non-final step hands its next observation over unchanged ...
    same = (obs[:, 1:] == next_obs[:, :-1]).all(-1)
    assert same[~done[:, :-1]].all()
    # ... and after a done, the next root observation is a fresh reset observation
    after = obs[:, 1:][done[:, :-1]]
    assert not same[done[:, :-1]].any()
    assert (after.abs() <= 0.05).all()
    # the step that ends an episode returns the true final observation: a terminal state
    final = next_obs[terminated]
    out = (final[:, 0].abs() > 2.4) | (final[:, 2].abs() > 12 * 2 * np.pi / 360)
    assert out.all()


def test_vector_partial_reset():
    env = GymEnv("CartPole-v1", num_envs=3)
    td = env.reset()
    before = td["observation"].clone()
    td["_reset"] = torch.tensor([[False], [True], [False]])
    td = env.reset(td)
    assert (td["observation"][[0, 2]] == before[[0, 2]]).all()
    assert not (td["observation"][1] == before[1]).all()
    assert "_reset" not in td.keys()


def test_vector_env_next_step_rejected():
    vec = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    with pytest.raises(ValueError, match="autoreset_mode"):
        GymWrapper(vec)
    vec.close()


def test_vector_wrapper_disabled():
    vec = gym.make_vec(
        "CartPole-v1",
        num_envs=2,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED},
    )
    env = GymWrapper(vec, categorical_action_encoding=True)
    assert env.batch_size == (2,) and env.action_spec.shape == (2,)
    check_env_specs(env, seed=0)


# ---------------------------------------------------------------------------- pixels, skipping
@pytest.mark.parametrize("pixels_only", [True, False])
def test_from_pixels(pixels_only):
    env = GymEnv("CartPole-v1", from_pixels=True, pixels_only=pixels_only)
    keys = set(env.observation_spec.keys())
    assert keys == ({"pixels"} if pixels_only else {"pixels", "observation"})
    td = env.reset()
    assert td["pixels"].dtype == torch.uint8 and td["pixels"].shape == (400, 600, 3)
    assert td["pixels"].float().std() > 0  # something was drawn
    check_env_specs(env, seed=0)
    env.close()


def test_from_pixels_needs_rgb_array():
    with pytest.raises(ValueError, match="render_mode"):
        GymWrapper(gym.make("CartPole-v1"), from_pixels=True)


def test_frame_skip():
    env = GymWrapper(_multibinary_env(), frame_skip=2)
    rollout = env.rollout(10)
    # 5-step episodes: two full skips then one cut short by the termination
    assert rollout["next", "reward"].squeeze(-1).tolist() == [2.0, 2.0, 1.0]
    assert len(env.env.actions) == 5
    cartpole = GymEnv("CartPole-v1", frame_skip=3)
    cartpole.set_seed(0)
    reward = cartpole.rollout(2)["next", "reward"]
    assert reward.squeeze(-1).tolist() == [3.0, 3.0]
    with pytest.raises(ValueError, match="frame_skip"):
        GymEnv("CartPole-v1", frame_skip=0)


def test_frame_skip_vector():
    # a vector env stops repeating as soon as any sub-env finishes (a finished sub-env cannot
    # be stepped before its reset)
    env = GymEnv("CartPole-v1", num_envs=2, frame_skip=2, max_episode_steps=5)
    check_env_specs(env, seed=0)
    rollout = env.rollout(6, break_when_any_done=False)
    reward = rollout["next", "reward"].squeeze(-1)
    assert rollout["next", "truncated"].any()
    assert set(reward.flatten().tolist()) <= {1.0, 2.0} and (reward == 2.0).any()


# -------------------------------------------------------------------------------- info reader
def test_info_reader_declared_keys():
    env = GymWrapper(_multibinary_env())
    env = env.set_info_dict_reader(default_info_dict_reader(["count", "half"]))
    assert env.observation_spec["count"].dtype == torch.int64
    assert env.observation_spec["half"].dtype == torch.float64
    check_env_specs(env, seed=0)
    rollout = env.rollout(10)
    assert rollout["next", "count"].tolist() == [1, 2, 3, 4, 5]
    assert rollout["count"].tolist() == [0, 1, 2, 3, 4]  # missing at reset: zeros
    assert rollout["next", "half"][-1].item() == 2.5


def test_info_reader_spec_and_default():
    env = GymWrapper(_multibinary_env()).set_info_dict_reader(
        default_info_dict_reader(["count"], spec=[Unbounded((1,), dtype=torch.float32)])
    )
    assert env.rollout(2)["next", "count"].tolist() == [[1.0], [2.0]]
    env = GymWrapper(_multibinary_env()).set_info_dict_reader()
    assert {"count", "half"} <= set(env.observation_spec.keys())
    with pytest.raises(ValueError, match="missing_key"):
        GymWrapper(_multibinary_env()).set_info_dict_reader(
            default_info_dict_reader(["missing_key"])
        )


def test_info_reader_vector():
    vec = gym.vector.SyncVectorEnv(
        [_multibinary_env, _multibinary_env],
        autoreset_mode=gym.vector.AutoresetMode.DISABLED,
    )
    env = GymWrapper(vec).set_info_dict_reader(default_info_dict_reader(["count"]))
    assert env.observation_spec["count"].shape == (2,)
    check_env_specs(env, seed=0)
    rollout = env.rollout(6, break_when_any_done=False)
    assert rollout["next", "count"][0].tolist() == [1, 2, 3, 4, 5, 1]


# ------------------------------------------------------------------------------------ seeding
def test_seeding_reproducible():
    def run(seed):
        env = GymEnv("Pendulum-v1")
        env.set_seed(seed)
        torch.manual_seed(seed)
        return env.rollout(20)

    a, b, c = run(0), run(0), run(1)
    assert (a["next", "observation"] == b["next", "observation"]).all()
    assert (a["action"] == b["action"]).all()
    assert not (a["observation"][0] == c["observation"][0]).all()


def test_seeding_vector():
    def run(seed):
        env = GymEnv("CartPole-v1", num_envs=2)
        env.set_seed(seed)
        torch.manual_seed(seed)
        return env.rollout(40, break_when_any_done=False)

    a, b = run(3), run(3)
    assert (a["next", "observation"] == b["next", "observation"]).all()
    # sub-envs get distinct seeds
    assert not (a["observation"][0, 0] == a["observation"][1, 0]).all()


# ------------------------------------------------------------------------------------- misc
def test_repr_and_available_envs():
    env = GymEnv("CartPole-v1", num_envs=2)
    assert repr(env) == "GymEnv(env=CartPole-v1, batch_size=torch.Size([2]), device=cpu)"
    assert "CartPole-v1" in GymEnv.available_envs
    assert "Pendulum-v1" in env.available_envs


def test_make_kwargs_and_errors():
    env = GymEnv("Pendulum-v1", g=9.0)
    assert env.env.unwrapped.g == 9.0
    with pytest.raises(TypeError, match="gymnasium.Env"):
        GymWrapper(object())
    with pytest.raises(ValueError, match="batch_size"):
        GymEnv("CartPole-v1", batch_size=[3])
    with pytest.raises(ValueError, match="vectorization_mode"):
        GymEnv("CartPole-v1", num_envs=2, vectorization_mode="vector_entry_point")


def test_close():
    env = GymEnv("CartPole-v1")
    env.close()
    assert env.is_closed


def test_missing_gymnasium(monkeypatch):
    # a None entry in sys.modules makes ``import gymnasium`` raise ImportError
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[gym\]"'):
        GymEnv("CartPole-v1")
    with pytest.raises(ImportError, match="gymnasium"):
        GymWrapper(None)


def test_async_vector_env():
    env = GymEnv("CartPole-v1", num_envs=2, vectorization_mode="async")
    check_env_specs(env, seed=0)
    rollout = env.rollout(50, break_when_any_done=False)
    assert rollout.batch_size == (2, 50)
    env.close()


def test_vector_copy_false_keeps_history():
    vec = gym.make_vec(
        "CartPole-v1",
        num_envs=2,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED, "copy": False},
    )
    env = GymWrapper(vec)
    rollout = env.rollout(5, break_when_any_done=False)
    # with a shared buffer viewed without copy, every step would show the last observation
    assert not (rollout["next", "observation"][:, 0] == rollout["next", "observation"][:, -1]).all()
    assert (rollout["observation"][:, 1:] == rollout["next", "observation"][:, :-1]).all()


def test_vector_from_pixels():
    env = GymEnv("CartPole-v1", num_envs=2, from_pixels=True, pixels_only=False)
    assert env.observation_spec["pixels"].shape == (2, 400, 600, 3)
    check_env_specs(env, seed=0)
    env.close()


def test_info_reader_with_specs_does_not_touch_env():
    gym_env = _multibinary_env()
    env = GymWrapper(gym_env).set_info_dict_reader(
        default_info_dict_reader(["count"], spec={"count": Unbounded((), dtype=torch.int64)})
    )
    assert gym_env.actions == []  # no sampling step was needed
    assert env.observation_spec["count"].dtype == torch.int64


def test_dict_observation_reserved_key():
    bad = _CountingEnv(
        spaces.Discrete(2),
        spaces.Dict({"reward": spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)}),
    )
    with pytest.raises(ValueError, match="reward"):
        GymWrapper(bad)


def test_reset_options_forwarded():
    env = GymEnv("CartPole-v1")
    td = env.reset(options={"low": -0.001, "high": 0.001})
    assert (td["observation"].abs() <= 0.001).all()


@pytest.mark.parametrize("categorical", [False, True])
def test_vector_discrete_start(categorical):
    def make():
        box = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        return _CountingEnv(
            spaces.Discrete(3, start=-1), spaces.Discrete(4, start=2) if categorical else box
        )

    vec = gym.vector.SyncVectorEnv([make, make], autoreset_mode=gym.vector.AutoresetMode.DISABLED)
    env = GymWrapper(vec, categorical_action_encoding=categorical)
    check_env_specs(env, seed=0)  # the sub-envs assert that every action is in their space
    td = env.reset()
    td["action"] = torch.tensor([0, 2]) if categorical else torch.tensor([[1, 0, 0], [0, 0, 1]])
    env.step(td)
    assert [int(a) for a in (vec.envs[0].actions[-1], vec.envs[1].actions[-1])] == [-1, 1]
    if categorical:
        assert ((td["next", "observation"] >= 0) & (td["next", "observation"] < 4)).all()
