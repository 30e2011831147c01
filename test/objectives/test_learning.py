"""Learning smoke tests: DQN and PPO on CartPole, SAC on Pendulum, with hand-written loops.

No collector or trainer: each loop acts with the policy, stores transitions and calls the loss,
so that a failure points at the loss. The thresholds are far above a random policy (CartPole:
about 22 per episode; Pendulum: about -1200 per 200-step episode) and well below what the runs
reach, so that they hold across seeds.
"""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule, set_interaction_type
from torch import nn

from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.envs import GymEnv, PendulumEnv
from torchrl.modules import (
    MLP,
    OneHotCategorical,
    ProbabilisticActor,
    QValueActor,
    TanhNormal,
    ValueOperator,
)
from torchrl.objectives import ClipPPOLoss, DQNLoss, SACLoss, SoftUpdate, ValueEstimators

pytest.importorskip("gymnasium")

_KEYS = (
    "observation",
    "action",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
)


class _Returns:
    """Sums rewards per sub-env and records the return of every finished episode."""

    def __init__(self, n: int) -> None:
        self.running = torch.zeros(n)
        self.finished: list[float] = []

    def add(self, transition) -> None:
        self.running += transition["next", "reward"].reshape(self.running.shape)
        done = transition["next", "done"].reshape(self.running.shape)
        for i in done.nonzero().flatten().tolist():
            self.finished.append(float(self.running[i]))
            self.running[i] = 0

    def mean(self, part: slice) -> float:
        values = self.finished[part]
        return sum(values) / len(values)


def _dqn_cartpole(frames: int, warmup: int = 1000, seed: int = 0) -> _Returns:
    torch.manual_seed(seed)
    n = 4
    env = GymEnv("CartPole-v1", num_envs=n)
    env.set_seed(seed)
    net = MLP(in_features=4, out_features=2, depth=2, num_cells=64, activation_class=nn.ReLU)
    actor = QValueActor(net, spec=env.action_spec)
    loss = DQNLoss(actor, double_dqn=True, loss_function="smooth_l1")
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.99)
    updater = SoftUpdate(loss, tau=0.01)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)
    buffer = ReplayBuffer(storage=LazyTensorStorage(20_000), batch_size=128)
    returns = _Returns(n)
    td = env.reset()
    for step in range(frames // n):
        eps = max(0.05, 1 - step * n / (0.4 * frames))
        with torch.no_grad():
            td = actor(td)
        explore = torch.rand(n) < eps
        random_action = nn.functional.one_hot(torch.randint(2, (n,)), 2).bool()
        td["action"] = torch.where(explore[:, None], random_action, td["action"])
        transition, td = env.step_and_maybe_reset(td)
        buffer.extend(transition.select(*_KEYS))
        returns.add(transition)
        if len(buffer) >= warmup:
            value = loss(buffer.sample())["loss"]
            optim.zero_grad()
            value.backward()
            optim.step()
            updater.step()
    env.close()
    return returns


def _ppo_cartpole(iterations: int, steps: int = 128, seed: int = 0) -> _Returns:
    torch.manual_seed(seed)
    n = 8
    env = GymEnv("CartPole-v1", num_envs=n)
    env.set_seed(seed)
    logits = TensorDictModule(
        MLP(in_features=4, out_features=2, depth=2, num_cells=64), ["observation"], ["logits"]
    )
    actor = ProbabilisticActor(
        logits,
        in_keys=["logits"],
        distribution_class=OneHotCategorical,
        return_log_prob=True,
        spec=env.action_spec,
    )
    critic = ValueOperator(MLP(in_features=4, out_features=1, depth=2, num_cells=64))
    loss = ClipPPOLoss(
        actor, critic, critic_coef=0.5, loss_critic_type="l2", normalize_advantage=True
    )
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.99, lmbda=0.95)
    optim = torch.optim.Adam(loss.parameters(), lr=2.5e-3)
    returns = _Returns(n)
    td = env.reset()
    for _ in range(iterations):
        rollout = []
        with torch.no_grad(), set_interaction_type("random"):
            for _ in range(steps):
                transition, td = env.step_and_maybe_reset(actor(td))
                rollout.append(transition)
                returns.add(transition)
        batch = torch.stack(rollout, 1)  # [n, steps]: time is the last batch dim
        loss.value_estimator(batch)
        flat = batch.reshape(-1)
        for _ in range(4):
            for index in torch.randperm(flat.shape[0]).split(256):
                out = loss(flat[index])
                total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
                optim.zero_grad()
                total.backward()
                nn.utils.clip_grad_norm_(loss.parameters(), 0.5)
                optim.step()
    env.close()
    return returns


def _sac_pendulum(
    episodes: int, horizon: int = 200, warmup: int = 1000, seed: int = 0
) -> list[float]:
    torch.manual_seed(seed)
    n = 8
    env = PendulumEnv(batch_size=[n], seed=seed)
    params = TensorDictModule(
        nn.Sequential(
            MLP(in_features=3, out_features=2, depth=2, num_cells=64, activation_class=nn.ReLU),
            NormalParamExtractor(),
        ),
        ["observation"],
        ["loc", "scale"],
    )
    actor = ProbabilisticActor(
        params,
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -2.0, "high": 2.0},
        spec=env.action_spec,
    )
    qvalue = ValueOperator(
        MLP(in_features=4, out_features=1, depth=2, num_cells=64, activation_class=nn.ReLU),
        in_keys=["observation", "action"],
    )
    loss = SACLoss(actor, qvalue, action_spec=env.action_spec, loss_function="l2")
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.99)
    updater = SoftUpdate(loss, tau=0.005)
    optim = torch.optim.Adam(loss.parameters(), lr=3e-3)
    buffer = ReplayBuffer(storage=LazyTensorStorage(100_000), batch_size=256)
    episode_returns = []
    for _ in range(episodes):
        # The pendulum never terminates: each 200-step episode is a fresh reset.
        td = env.reset()
        total = torch.zeros(n)
        for _ in range(horizon):
            with torch.no_grad(), set_interaction_type("random"):
                td = actor(td)
            transition, td = env.step_and_maybe_reset(td)
            buffer.extend(transition.select(*_KEYS))
            total += transition["next", "reward"].squeeze(-1)
            if len(buffer) >= warmup:
                out = loss(buffer.sample())
                value = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
                optim.zero_grad()
                value.backward()
                optim.step()
                updater.step()
        episode_returns.append(float(total.mean()))
    return episode_returns


def test_training_loops_run():
    """A few iterations of each loop (the learning checks below are slow)."""
    assert _dqn_cartpole(frames=160, warmup=64).finished
    assert _ppo_cartpole(iterations=1, steps=32).finished
    assert len(_sac_pendulum(episodes=1, horizon=12, warmup=64)) == 1


@pytest.mark.slow
def test_dqn_learns_cartpole():
    returns = _dqn_cartpole(frames=20_000)
    first, best = (
        returns.mean(slice(0, 20)),
        max(returns.mean(slice(i, i + 20)) for i in range(len(returns.finished) - 20)),
    )
    assert first < 40
    assert best > 100, (first, best)


@pytest.mark.slow
def test_ppo_learns_cartpole():
    returns = _ppo_cartpole(iterations=20)
    assert returns.mean(slice(0, 20)) < 40
    assert returns.mean(slice(-20, None)) > 150


@pytest.mark.slow
def test_sac_learns_pendulum():
    returns = _sac_pendulum(episodes=15)
    assert returns[0] < -900  # a random policy
    assert max(returns[-4:]) > -500, returns
