"""DDPG on Pendulum, written as the TorchRL paper's Figure 1 training loop.

The loop reads top to bottom: a collector yields batches of transitions, the replay buffer is
extended with each batch, samples from the buffer go through the DDPG loss, the optimizer steps,
the target networks follow (Polyak averaging), and the collector picks up the new weights.

Usage: ``python examples/ddpg_figure1.py [--frames 20000] [--seed 0] [--out DIR] [--no-progress]``.
With the defaults the average reward per step climbs from about -6 (random) towards -1 on
Pendulum-v1; a few hundred frames (``--frames 400``) make a smoke run. Run as a script, it then
evaluates the actor deterministically on 10 fresh episodes, writes the curve of the training
episodes' returns to ``<out>/ddpg_figure1.png`` and prints the summary line of every example.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from torch import nn

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.modules import MLP, Actor, AdditiveGaussianWrapper, ValueOperator
from torchrl.objectives import DDPGLoss, SoftUpdate


def main(
    frames: int = 20_000, seed: int = 0, log_every: int = 2000, record: dict | None = None
) -> float:
    """Trains DDPG for ``frames`` frames; returns the mean reward of the last batch.

    ``record`` (a dict), when given, receives the actor (``"actor"``) and the ``(frames,
    return)`` of every finished training episode (``"train"``).
    """
    torch.manual_seed(seed)
    env = TransformedEnv(GymEnv("Pendulum-v1"), RewardSum())  # RewardSum: episode returns
    env.set_seed(seed)
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]

    # Deterministic actor (bounded by the action spec) and a Q(s, a) critic.
    actor = Actor(
        nn.Sequential(MLP(in_features=n_obs, out_features=n_act, num_cells=[64, 64]), nn.Tanh()),
        spec=env.action_spec,
    )
    with torch.no_grad():
        scale = float(env.action_spec.space.high.max())
    actor.module.append(_Scale(scale))
    critic = ValueOperator(
        MLP(in_features=n_obs + n_act, out_features=1, num_cells=[64, 64]),
        in_keys=["observation", "action"],
    )
    exploration_policy = AdditiveGaussianWrapper(
        actor, sigma_init=1.0, sigma_end=0.1, annealing_num_steps=frames // 2
    )

    loss = DDPGLoss(actor, critic, delay_actor=True, delay_value=True)
    loss.make_value_estimator(gamma=0.99)
    target_updater = SoftUpdate(loss, tau=0.005)
    optimizer = torch.optim.Adam(loss.parameters(), lr=1e-3)

    collector = SyncDataCollector(
        env,
        exploration_policy,
        frames_per_batch=50,
        total_frames=frames,
        init_random_frames=min(1000, frames // 4),
    )
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(100_000), batch_size=128)

    last_reward = float("nan")
    for i, data in enumerate(collector):
        buffer.extend(data)
        exploration_policy.step(data.numel())
        last_reward = data["next", "reward"].mean().item()
        if record is not None:
            record.setdefault("train", []).extend(_finished_returns(data, collector.frames))
        if len(buffer) >= 256:
            for _ in range(data.numel() // 2):
                sample = buffer.sample()
                loss_vals = loss(sample)
                total = loss_vals["loss_actor"] + loss_vals["loss_value"]
                optimizer.zero_grad()
                total.backward()
                optimizer.step()
                target_updater.step()
            collector.update_policy_weights_()
        if log_every and (i + 1) * collector.frames_per_batch % log_every == 0:
            print(f"frames {collector.frames:6d}  reward/step {last_reward:7.3f}")
    collector.shutdown()
    if record is not None:
        record["actor"] = actor
    return last_reward


def _finished_returns(data: Any, frames: int) -> list[tuple[int, float]]:
    done = data["next", "done"].squeeze(-1)
    return [(frames, float(r)) for r in data["next", "episode_reward"].squeeze(-1)[done]]


class _Scale(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="outputs")
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from _common import evaluate, plot_curve, report

    record: dict = {"train": []}
    start = time.perf_counter()
    main(args.frames, args.seed, log_every=2000 if args.progress else 0, record=record)
    wall = time.perf_counter() - start
    eval_env = GymEnv("Pendulum-v1", num_envs=10)
    eval_env.set_seed(args.seed + 20_000)
    final = evaluate(eval_env, record["actor"], max_steps=200)
    eval_env.close()
    history = {"train": record["train"], "eval": [(args.frames, final)]}
    history.update(frames=args.frames, wall=wall)
    title = "DDPG Pendulum-v1 (Figure 1 loop)"
    plot_curve(history, f"{args.out}/ddpg_figure1.png", title)
    report(title, history, None, final, episodes=10)
