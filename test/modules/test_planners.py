"""CEM and MPPI planners: they find good actions by planning through a batch-unlocked env."""

import pytest
import torch
from tensordict import TensorDict

from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs import EnvBase, PendulumEnv
from torchrl.modules import CEMPlanner, MPPIPlanner


class TargetEnv(EnvBase):
    """Reward ``-|a - target|^2``; the target (in ``[-1, 1]^2``) is the observation."""

    def __init__(self):
        super().__init__(batch_size=[])
        self.batch_locked = False
        self.observation_spec = Composite(observation=Unbounded(shape=(2,)))
        self.action_spec = Bounded(-2.0, 2.0, shape=(2,))
        self.reward_spec = Unbounded(shape=(1,))

    def _reset(self, tensordict, **kwargs):
        batch = tensordict.batch_size if tensordict is not None else self.batch_size
        return TensorDict(observation=torch.rand(*batch, 2) * 2 - 1, batch_size=batch)

    def _step(self, tensordict):
        target = tensordict["observation"]
        reward = -(tensordict["action"] - target).pow(2).sum(-1, keepdim=True)
        return TensorDict(
            observation=target,
            reward=reward,
            terminated=torch.zeros_like(reward, dtype=torch.bool),
            batch_size=tensordict.batch_size,
        )

    def _set_seed(self, seed):
        torch.manual_seed(seed)


class TrapEnv(EnvBase):
    """Action > 0 pays 1 and ends the episode; action <= 0 pays 0.5 and goes on."""

    def __init__(self):
        super().__init__(batch_size=[])
        self.batch_locked = False
        self.observation_spec = Composite(observation=Unbounded(shape=(1,)))
        self.action_spec = Bounded(-1.0, 1.0, shape=(1,))
        self.reward_spec = Unbounded(shape=(1,))

    def _reset(self, tensordict, **kwargs):
        batch = tensordict.batch_size if tensordict is not None else self.batch_size
        return TensorDict(observation=torch.zeros(*batch, 1), batch_size=batch)

    def _step(self, tensordict):
        positive = tensordict["action"] > 0
        return TensorDict(
            observation=tensordict["observation"],
            reward=torch.where(positive, 1.0, 0.5),
            terminated=positive,
            batch_size=tensordict.batch_size,
        )

    def _set_seed(self, seed):
        torch.manual_seed(seed)


def _reward_to_go(rollout):
    reward = rollout["next", "reward"]
    rollout["advantage"] = reward.flip(-2).cumsum(-2).flip(-2)
    return rollout


def test_cem_finds_the_target():
    env = TargetEnv()
    planner = CEMPlanner(env, planning_horizon=2, optim_steps=6, num_candidates=200, top_k=20)
    td = env.reset(TensorDict(batch_size=[5]))
    action = planner(td.clone())["action"]
    assert action.shape == (5, 2)
    assert (action - td["observation"]).abs().max() < 0.1


def test_mppi_finds_the_target():
    env = TargetEnv()
    planner = MPPIPlanner(
        env,
        _reward_to_go,
        temperature=0.05,
        planning_horizon=2,
        optim_steps=6,
        num_candidates=200,
        top_k=50,
    )
    td = env.reset(TensorDict(batch_size=[3]))
    action = planner(td.clone())["action"]
    assert (action - td["observation"]).abs().max() < 0.15


def test_rewards_after_done_do_not_count():
    # Counting rewards of the auto-reset episode would make "always positive" worth 3 > 1.5.
    env = TrapEnv()
    planner = CEMPlanner(env, planning_horizon=3, optim_steps=4, num_candidates=64, top_k=8)
    action = planner(env.reset())["action"]
    assert action.item() <= 0


def test_planner_is_a_policy():
    env = PendulumEnv(seed=0)
    planner = CEMPlanner(env, planning_horizon=3, optim_steps=2, num_candidates=8, top_k=2)
    rollout = env.rollout(4, planner)
    assert rollout.batch_size == (4,) and env.action_spec.is_in(rollout["action"])
    assert planner.in_keys and planner.out_keys == ["action"]


def test_errors():
    from torchrl.envs.libs import GymEnv

    pytest.importorskip("gymnasium")
    with pytest.raises(ValueError, match="batch_locked"):
        CEMPlanner(GymEnv("Pendulum-v1"), 2, 1, 4, 2)
    with pytest.raises(ValueError, match="top_k"):
        CEMPlanner(TargetEnv(), 2, 1, 4, 5)
    with pytest.raises(ValueError, match="temperature"):
        MPPIPlanner(TargetEnv(), _reward_to_go, 0.0, 2, 1, 4, 2)
    planner = MPPIPlanner(TargetEnv(), lambda td: td, 1.0, 2, 1, 4, 2)
    with pytest.raises(KeyError, match="advantage"):
        planner(TargetEnv().reset())
