"""Minigrid through GymEnv/GymWrapper (skipped when minigrid is not installed).

Minigrid needs no wrapper of its own: its dict observations convert with the gym space
conversions, the ``mission`` string (a ``MissionSpace``) included, as a ``NonTensor`` entry.
Most tests filter the mission out (the tensor-only path); the ``mission`` tests keep it.
"""

import warnings

import pytest
import torch

from torchrl.data import NonTensor
from torchrl.envs import ExcludeTransform, ParallelEnv, SerialEnv, TransformedEnv, check_env_specs
from torchrl.envs.libs.gym import GymEnv, GymWrapper

minigrid = pytest.importorskip("minigrid")
gym = pytest.importorskip("gymnasium")

EMPTY = "MiniGrid-Empty-5x5-v0"
KEEP = ["image", "direction"]
# Minigrid's action ids
LEFT, RIGHT, FORWARD = 0, 1, 2


def _filtered(env):
    return gym.wrappers.FilterObservation(env, KEEP)


def make_empty(**kwargs):
    """A single Empty-5x5 env with categorical actions (module level: ParallelEnv pickles it)."""
    return GymWrapper(_filtered(gym.make(EMPTY, **kwargs)), categorical_action_encoding=True)


MISSION = "get to the green goal square"


def make_with_mission():
    """Empty-5x5 with its mission kept (module level: SerialEnv/ParallelEnv may pickle it)."""
    return GymEnv(EMPTY, categorical_action_encoding=True)


def test_mission_is_kept():
    env = make_with_mission()
    spec = env.observation_spec
    assert set(spec.keys()) == {"image", "direction", "mission"}
    assert isinstance(spec["mission"], NonTensor)
    check_env_specs(env)
    check_env_specs(env, return_contiguous=False)
    assert env.reset()["mission"] == MISSION
    rollout = env.rollout(3, break_when_any_done=False)
    assert rollout["next", "mission"] == [MISSION] * 3


def test_mission_vector_env():
    env = GymEnv(EMPTY, num_envs=3, categorical_action_encoding=True)
    assert env.observation_spec["mission"].shape == (3,)
    check_env_specs(env)
    env.set_seed(0)
    td = env.reset()
    assert td["mission"] == [MISSION] * 3
    td["action"] = torch.tensor([LEFT, RIGHT, RIGHT])
    td = env.step(td)["next"]
    td["_reset"] = torch.tensor([[False], [True], [False]])
    td = env.reset(td)
    assert td["mission"] == [MISSION] * 3 and td["direction"].tolist() == [3, 0, 1]


def test_mission_seeding_is_reproducible():
    # DoorKey's mission is fixed, but the grid is random: the seed decides it, mission or not
    def rollout(seed):
        env = GymEnv("MiniGrid-DoorKey-5x5-v0", categorical_action_encoding=True)
        env.set_seed(seed)
        torch.manual_seed(seed)
        return env.rollout(10, break_when_any_done=False)

    a, b = rollout(3), rollout(3)
    assert (a["image"] == b["image"]).all() and a["mission"] == b["mission"]


def test_mission_serial_env_and_buffers():
    from torchrl.collectors import SyncDataCollector
    from torchrl.data import LazyTensorStorage, ListStorage, TensorDictReplayBuffer

    env = SerialEnv(2, make_with_mission)
    check_env_specs(env)
    env.set_seed(0)
    collector = SyncDataCollector(env, None, frames_per_batch=8, total_frames=8, use_buffers=False)
    (batch,) = list(collector)
    collector.shutdown()
    assert batch.batch_size == (2, 4)
    assert batch["next", "mission"] == [[MISSION] * 4] * 2
    buffer = TensorDictReplayBuffer(storage=ListStorage(16), batch_size=4)
    buffer.extend(batch.reshape(-1))
    assert buffer.sample()["mission"] == [MISSION] * 4
    # tensor storages refuse the strings with an error naming the entry (not a silent drop)
    tensor_buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(16), batch_size=4)
    with pytest.raises(TypeError, match="'mission'.*ListStorage"):
        tensor_buffer.extend(batch.reshape(-1))


def test_mission_collector_with_buffers_warns_and_drops_it():
    from torchrl.collectors import SyncDataCollector

    collector = SyncDataCollector(make_with_mission(), None, frames_per_batch=4, total_frames=4)
    with pytest.warns(UserWarning, match="mission.*use_buffers=False"):
        (batch,) = list(collector)
    collector.shutdown()
    assert "mission" not in batch.keys() and batch["image"].shape == (4, 7, 7, 3)


def test_mission_parallel_env_names_the_way_out():
    with pytest.raises(NotImplementedError, match="'mission'.*ExcludeTransform"):
        ParallelEnv(2, make_with_mission)


def _without_mission():
    return TransformedEnv(make_with_mission(), ExcludeTransform("mission"))


def test_mission_excluded_in_parallel_env():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = ParallelEnv(2, _without_mission)
    try:
        check_env_specs(env)
        assert "mission" not in env.observation_spec.keys()
    finally:
        env.close()


def test_dict_observation_specs():
    env = make_empty()
    check_env_specs(env)
    spec = env.observation_spec
    assert set(spec.keys()) == {"image", "direction"}
    assert spec["image"].shape == (7, 7, 3) and spec["image"].dtype == torch.uint8
    assert spec["direction"].n == 4 and spec["direction"].dtype == torch.int64
    assert env.action_spec.n == 7
    # the one-hot default is kept for actions too
    one_hot = GymWrapper(_filtered(gym.make(EMPTY)))
    assert one_hot.action_spec.shape == (7,)
    check_env_specs(one_hot)


def test_reaching_the_goal_rewards_and_terminates():
    env = make_empty()
    env.set_seed(0)
    td = env.reset()
    # Empty-5x5: start at (1, 1) facing east, goal at (3, 3)
    assert td["direction"].item() == 0
    rewards, dones = [], []
    for action in (FORWARD, FORWARD, RIGHT, FORWARD, FORWARD):
        td["action"] = torch.tensor(action)
        out = env.step(td)
        rewards.append(out["next", "reward"].item())
        dones.append(out["next", "terminated"].item())
        td = out["next"]
    assert dones == [False, False, False, False, True]
    assert rewards[:4] == [0.0] * 4
    # minigrid's reward is 1 - 0.9 * steps / max_steps with max_steps = 4 * 5 * 5
    assert rewards[4] == pytest.approx(1 - 0.9 * 5 / 100)
    assert td["direction"].item() == 1  # facing south after the right turn


def test_seeding_is_reproducible():
    def rollout(seed):
        env = GymWrapper(
            _filtered(gym.make("MiniGrid-DoorKey-5x5-v0")), categorical_action_encoding=True
        )
        env.set_seed(seed)
        torch.manual_seed(seed)
        return env.rollout(20, break_when_any_done=False)

    a, b, c = rollout(3), rollout(3), rollout(4)
    assert (a["image"] == b["image"]).all() and (a["action"] == b["action"]).all()
    assert not ((a["image"] == c["image"]).all() and (a["action"] == c["action"]).all())


def test_vector_env_partial_reset():
    env = GymEnv(EMPTY, num_envs=3, categorical_action_encoding=True, wrappers=[_filtered])
    check_env_specs(env)
    env.set_seed(0)
    td = env.reset()
    assert td["image"].shape == (3, 7, 7, 3)
    # sub-env 0 turns left (faces north), the others turn right (face south)
    td["action"] = torch.tensor([LEFT, RIGHT, RIGHT])
    td = env.step(td)["next"]
    assert td["direction"].tolist() == [3, 1, 1]
    td["_reset"] = torch.tensor([[False], [True], [False]])
    td = env.reset(td)
    # only sub-env 1 is back at the start, facing east
    assert td["direction"].tolist() == [3, 0, 1]


def test_serial_env_step_and_maybe_reset():
    env = SerialEnv(2, make_empty)
    check_env_specs(env)
    env.set_seed(0)
    td = env.reset()
    plan = [(FORWARD, LEFT), (FORWARD, LEFT), (RIGHT, LEFT), (FORWARD, LEFT), (FORWARD, LEFT)]
    for actions in plan:
        td["action"] = torch.tensor(actions)
        out, td = env.step_and_maybe_reset(td)
    # sub-env 0 reached the goal and was reset; sub-env 1 only turned (5 lefts: facing north)
    assert out["next", "done"].squeeze(-1).tolist() == [True, False]
    assert td["direction"].tolist() == [0, 3]


def test_parallel_env_and_collector():
    from torchrl.collectors import SyncDataCollector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = ParallelEnv(2, make_empty)
    try:
        env.set_seed(0)
        collector = SyncDataCollector(env, None, frames_per_batch=40, total_frames=40)
        (batch,) = list(collector)
        collector.shutdown()
    finally:
        if not env.is_closed:
            env.close()
    assert batch["image"].shape == (2, 20, 7, 7, 3)
    assert batch["next", "reward"].shape == (2, 20, 1)
    assert ((batch["next", "reward"] >= 0) & (batch["next", "reward"] <= 1)).all()
