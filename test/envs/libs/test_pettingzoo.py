"""Tests of the PettingZoo wrapper (skipped when pettingzoo is not installed, but for one)."""

import sys

import pytest
import torch

from torchrl.envs import MarlGroupMapType, check_env_specs
from torchrl.envs.libs.pettingzoo import PettingZooEnv, PettingZooWrapper


def test_missing_pettingzoo_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pettingzoo", None)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[pettingzoo\]"'):
        PettingZooEnv("tictactoe_v3")


pytest.importorskip("pettingzoo")
gym = pytest.importorskip("gymnasium")
from pettingzoo.utils.env import ParallelEnv  # noqa: E402


class Hunt(ParallelEnv):
    """Two hunters (masked discrete actions, Dict observations) and a prey (continuous).

    Only action ``t % 3`` is legal for the hunters at step ``t``; ``hunter_1`` is caught at
    step 2 and the episode is truncated at step 4.
    """

    metadata = {"name": "hunt"}

    def __init__(self):
        self.possible_agents = ["hunter_0", "hunter_1", "prey_0"]
        self.agents = []
        self.t = 0

    def observation_space(self, agent):
        if agent.startswith("hunter"):
            return gym.spaces.Dict(
                observation=gym.spaces.Box(-10, 10, (2,)),
                action_mask=gym.spaces.Box(0, 1, (3,), dtype="int8"),
            )
        return gym.spaces.Box(-10, 10, (4,))

    def action_space(self, agent):
        if agent.startswith("hunter"):
            return gym.spaces.Discrete(3)
        return gym.spaces.Box(-1, 1, (1,))

    def _obs(self, agent):
        if agent.startswith("hunter"):
            mask = [int(i == self.t % 3) for i in range(3)]
            return {"observation": [self.t, float(agent[-1])], "action_mask": mask}
        return [self.t] * 4

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.t = 0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)
        for agent, action in actions.items():
            if agent.startswith("hunter"):
                assert action == self.t % 3, f"illegal action {action} at step {self.t}"
        self.t += 1
        obs = {a: self._obs(a) for a in self.agents}
        rewards = {a: float(self.t) for a in self.agents}
        terms = {a: a == "hunter_1" and self.t == 2 for a in self.agents}
        truncs = {a: self.t == 4 for a in self.agents}
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, {a: {} for a in obs}


def test_parallel_custom_env_groups_masks_and_dead_agents():
    env = PettingZooWrapper(Hunt(), use_mask=True, done_on_any=False)
    assert env.group_map == {"hunter": ["hunter_0", "hunter_1"], "prey": ["prey_0"]}
    check_env_specs(env)
    # an agent finishing stops a rollout that breaks on any done flag...
    assert env.rollout(10).batch_size == (2,)
    # ...but the episode goes on without it: a group "_reset" does not reset the env
    td = env.rollout(6, break_when_any_done=False)
    assert td["hunter", "observation"][:, 0, 0].tolist() == [0, 1, 2, 3, 0, 1]
    td = td[:4]
    assert td["hunter", "observation"].shape == (4, 2, 2)
    assert td["hunter", "action_mask"].shape == (4, 2, 3)
    assert td["prey", "action"].shape == (4, 1, 1)
    # hunter_1 is caught at step 2: absent afterwards, done, masked out, zero reward
    assert td["next", "hunter", "terminated"][:, 1, 0].tolist() == [False, True, True, True]
    assert td["next", "hunter", "done"][:, 0, 0].tolist() == [False, False, False, True]
    assert td["next", "hunter", "mask"][:, 1].tolist() == [True, False, False, False]
    assert td["next", "hunter", "reward"][:, 1, 0].tolist() == [1.0, 2.0, 0.0, 0.0]
    assert (td["next", "hunter", "observation"][2:, 1] == 0).all()
    # the dead hunter may act in any way: its action mask allows everything
    assert td["hunter", "action_mask"][2:, 1].all()
    assert td["next", "done"].squeeze(-1).tolist() == [False, False, False, True]
    assert td["next", "truncated"][-1].all() and not td["next", "terminated"][-1].any()


def test_parallel_done_on_any_is_the_default():
    env = PettingZooWrapper(Hunt())
    assert env.done_on_any and "mask" not in env.observation_spec["hunter"].keys()
    td = env.rollout(10)
    assert td.batch_size == (2,) and td["next", "terminated"][-1].all()


def test_parallel_one_hot_actions_follow_the_mask():
    env = PettingZooWrapper(Hunt(), categorical_actions=False, done_on_any=False)
    assert type(env.full_action_spec["hunter", "action"]).__name__ == "OneHot"
    check_env_specs(env)


def test_heterogeneous_group_is_refused():
    with pytest.raises(ValueError, match="different shapes or dtypes"):
        PettingZooWrapper(Hunt(), group_map=MarlGroupMapType.ALL_IN_ONE_GROUP)
    env = PettingZooWrapper(Hunt(), group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT)
    assert env.group_names == ["hunter_0", "hunter_1", "prey_0"]
    check_env_specs(env)


def test_tictactoe_aec():
    env = PettingZooEnv("tictactoe_v3", parallel=False, seed=0)
    check_env_specs(env)
    assert env.group_map == {"player": ["player_1", "player_2"]}
    assert env.use_mask and not env.done_on_any
    td = env.rollout(40, break_when_any_done=False)
    mask = td["player", "mask"]
    # one move per step, the players alternate within a game
    assert (mask.sum(-1) == 1).all()
    # the acting player's action was legal: no game ends in an illegal-move penalty
    legal = td["player", "action_mask"].gather(-1, td["player", "action"].unsqueeze(-1))
    assert legal.all()
    rewards = td["next", "player", "reward"].squeeze(-1)
    ends = td["next", "done"].squeeze(-1)
    assert ends.any()
    assert (rewards.sum(-1) == 0).all()  # zero-sum
    assert (rewards[~ends] == 0).all()
    # the waiting player's action mask allows everything
    waiting = td["player", "action_mask"][~mask]
    assert waiting.all()


def test_tictactoe_options():
    env = PettingZooEnv(
        "tictactoe_v3",
        parallel=False,
        categorical_actions=False,
        group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT,
    )
    check_env_specs(env)
    assert env.full_action_spec["player_2", "action"].shape == (1, 9)
    with pytest.raises(ValueError, match="has no state_space"):
        PettingZooEnv("tictactoe_v3", parallel=False, return_state=True)
    with pytest.raises(ValueError, match="no parallel API"):
        PettingZooEnv("tictactoe_v3", parallel=True)
    # registry ids work too
    assert PettingZooEnv("classic/tictactoe-v3", parallel=False).group_names == ["player"]


def test_seeding_is_reproducible():
    def run(seed):
        env = PettingZooEnv("tictactoe_v3", parallel=False)
        env.set_seed(seed)
        torch.manual_seed(0)
        return env.rollout(9)["player", "action"]

    assert torch.equal(run(0), run(0))


def test_pistonball_parallel():
    pytest.importorskip("pymunk")
    env = PettingZooEnv(
        "pistonball_v6", parallel=True, seed=0, n_pistons=4, max_cycles=3, return_state=True
    )
    check_env_specs(env)
    td = env.rollout(5, break_when_any_done=False)
    assert td["next", "piston", "observation"].shape == (5, 4, 457, 120, 3)
    assert td["next", "piston", "observation"].dtype == torch.uint8
    assert td["next", "state"].dtype == torch.uint8
    assert td["next", "truncated"].squeeze(-1).tolist() == [False, False, True, False, False]
    assert "pistonball, parallel" in repr(env)


def test_errors():
    with pytest.raises(TypeError, match="needs a pettingzoo ParallelEnv or AECEnv"):
        PettingZooWrapper(object())
    with pytest.raises(ValueError, match="has no task named 'nope_v0'"):
        PettingZooEnv("nope_v0")
    with pytest.raises(ValueError, match="moved to the mpe2 package"):
        PettingZooEnv("simple_spread_v3")


def test_transforms_on_group_keys():
    from torchrl.envs import ActionMask, Compose, RewardSum, TransformedEnv

    base = PettingZooEnv("tictactoe_v3", parallel=False, seed=0)
    env = TransformedEnv(
        base, Compose(ActionMask(("player", "action"), ("player", "action_mask")), RewardSum())
    )
    td = env.rollout(30, break_when_any_done=False)
    legal = td["player", "action_mask"].gather(-1, td["player", "action"].unsqueeze(-1))
    assert legal.all()
    ends = td["next", "done"].squeeze(-1)
    returns = td["next", "player", "episode_reward"][ends].squeeze(-1)
    assert len(returns) >= 2 and (returns.sum(-1) == 0).all()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_releases_without_a_registry_use_the_task_modules(monkeypatch):
    import pettingzoo

    monkeypatch.delattr(pettingzoo, "make")
    env = PettingZooEnv("tictactoe_v3", parallel=False, seed=0)
    check_env_specs(env)
    with pytest.raises(ValueError, match="no parallel API"):
        PettingZooEnv("tictactoe_v3", parallel=True)
    with pytest.raises(ValueError, match="has no task named 'nope_v0'"):
        PettingZooEnv("nope_v0")
