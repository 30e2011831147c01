"""StatelessCartPole: gymnasium's CartPole-v1 dynamics, velocities hidden; and the gym variant."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from tensordict import TensorDict

from torchrl.envs import check_env_specs
from torchrl.envs.custom.stateless_cartpole import (
    DropCartPoleVelocities,
    StatelessCartPole,
    drop_cartpole_velocities,
    make_gym_stateless_cartpole,
)

_has_gym = importlib.util.find_spec("gymnasium") is not None


@pytest.mark.parametrize("batch_size", [[], [4], [2, 3]])
@pytest.mark.parametrize("categorical", [False, True])
def test_specs(batch_size, categorical) -> None:
    env = StatelessCartPole(batch_size=batch_size, seed=0, categorical_action_encoding=categorical)
    check_env_specs(env)
    assert env.observation_spec["observation"].shape == (*batch_size, 2)
    td = env.rollout(30, break_when_any_done=False)
    assert td["next", "observation"].dtype == torch.float32
    assert (td["next", "reward"] == 1).all()


def test_observation_is_position_and_angle() -> None:
    env = StatelessCartPole(batch_size=[5], seed=1)
    td = env.reset()
    state = env.state
    torch.testing.assert_close(td["observation"], state[:, [0, 2]].float())
    assert (state.abs() <= 0.05).all()  # gymnasium's initial-state range


@pytest.mark.skipif(not _has_gym, reason="gymnasium not installed")
def test_dynamics_match_gymnasium() -> None:
    import gymnasium as gym

    env = StatelessCartPole(batch_size=[3], seed=0, max_episode_steps=500)
    refs = [gym.make("CartPole-v1").unwrapped for _ in range(3)]
    for i, ref in enumerate(refs):
        ref.reset(seed=i)
    td = env.reset()
    import numpy as np

    env.set_state(torch.as_tensor(np.stack([r.state for r in refs]), dtype=torch.float64))
    gen = torch.Generator().manual_seed(0)
    alive = [True] * 3
    for _ in range(60):
        idx = torch.randint(0, 2, (3,), generator=gen)
        td["action"] = torch.nn.functional.one_hot(idx, 2).bool()
        td = env.step(td)
        for i, ref in enumerate(refs):
            if not alive[i]:
                continue
            obs, reward, terminated, _, _ = ref.step(int(idx[i]))
            torch.testing.assert_close(
                td["next", "observation"][i], torch.as_tensor(obs[[0, 2]], dtype=torch.float32)
            )
            assert float(td["next", "reward"][i]) == reward
            assert bool(td["next", "terminated"][i]) == terminated
            alive[i] = not terminated
        td = td["next"].clone()
    assert not all(alive), "random actions should end some episodes within 60 steps"


def test_termination_and_truncation() -> None:
    env = StatelessCartPole(batch_size=[2], seed=0, max_episode_steps=5)
    td = env.rollout(5, break_when_any_done=False)
    truncated = td["next", "truncated"].squeeze(-1)
    assert truncated[:, :4].logical_not().all() and truncated[:, 4].all()
    assert (td["next", "done"] == (td["next", "terminated"] | td["next", "truncated"])).all()
    # always pushing right makes the pole fall within about 10 steps
    env = StatelessCartPole(batch_size=[2], seed=0, categorical_action_encoding=True)
    td = env.reset()
    steps = 0
    while steps < 50:
        steps += 1
        td["action"] = torch.ones(2, dtype=torch.int64)
        td = env.step(td)
        if td["next", "terminated"].all():
            break
        td = td["next"].clone()
    assert td["next", "terminated"].all() and steps < 20
    assert not td["next", "truncated"].any()
    assert (env.state[:, 2].abs() > 12 * 2 * torch.pi / 360).all()


def test_partial_reset() -> None:
    env = StatelessCartPole(batch_size=[3], seed=0, max_episode_steps=10)
    td = env.rollout(4, break_when_any_done=False)[:, -1]["next"].clone()
    before = env.state
    td["_reset"] = torch.tensor([[True], [False], [False]])
    td = env.reset(td)
    after = env.state
    assert "_reset" not in td.keys()
    torch.testing.assert_close(after[1:], before[1:])
    assert not torch.equal(after[0], before[0])
    torch.testing.assert_close(td["observation"], after[:, [0, 2]].float())
    # sub-env 0 restarted its step budget, the others did not
    for _ in range(6):
        td["action"] = env.action_spec.zero()
        td["action"][..., 0] = True
        td = env.step(td)
        trunc = td["next", "truncated"].squeeze(-1).clone()
        td = td["next"].clone()
    assert trunc[1:].all() and not trunc[0]


def test_step_and_maybe_reset_restarts_done_envs() -> None:
    env = StatelessCartPole(batch_size=[4], seed=0, max_episode_steps=3)
    td = env.reset()
    for _ in range(3):
        td = env.rand_action(td)
        transition, td = env.step_and_maybe_reset(td)
    assert transition["next", "done"].all()
    assert (env.state.abs() <= 0.05).all()


def test_seeding() -> None:
    a = StatelessCartPole(batch_size=[4], seed=3).reset()["observation"]
    b = StatelessCartPole(batch_size=[4], seed=3).reset()["observation"]
    c = StatelessCartPole(batch_size=[4], seed=4).reset()["observation"]
    torch.testing.assert_close(a, b)
    assert not torch.equal(a, c)
    env = StatelessCartPole(batch_size=[4], seed=0)
    env.set_seed(3)
    torch.testing.assert_close(env.reset()["observation"], a)


def test_masked_step_moves_only_marked_carts() -> None:
    env = StatelessCartPole(batch_size=[2], seed=0)
    td = env.rollout(3, break_when_any_done=False)[:, -1]["next"].clone()
    before = env.state
    td = env.rand_action(td)
    td["_step"] = torch.tensor([True, False])
    td = env.step(td)
    after = env.state
    assert not torch.equal(after[0], before[0])
    torch.testing.assert_close(after[1], before[1])


def test_errors() -> None:
    with pytest.raises(ValueError, match="max_episode_steps"):
        StatelessCartPole(max_episode_steps=0)
    env = StatelessCartPole(batch_size=[2], seed=0)
    with pytest.raises(ValueError, match=r"state must have shape \(2, 4\)"):
        env.set_state(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="expected CartPole observations"):
        drop_cartpole_velocities(torch.zeros(2, 3))
    td = env.reset()
    td["action"] = torch.zeros(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="action"):
        env.step(td)


def test_drop_velocities_transform() -> None:
    t = DropCartPoleVelocities(in_keys=["obs"])
    out = t(TensorDict(obs=torch.arange(8.0).reshape(2, 4), batch_size=[2]))
    torch.testing.assert_close(out["obs"], torch.tensor([[0.0, 2.0], [4.0, 6.0]]))


@pytest.mark.skipif(not _has_gym, reason="gymnasium not installed")
def test_gym_stateless_cartpole() -> None:
    env = make_gym_stateless_cartpole(num_envs=2)
    try:
        check_env_specs(env)
        td = env.rollout(10, break_when_any_done=False)
        assert td["next", "observation"].shape == (2, 10, 2)
    finally:
        env.close()
