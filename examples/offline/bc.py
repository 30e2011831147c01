"""Behavioural cloning on Pendulum-v1 from a dataset file (``--data d4rl:PATH | minari:ID``).

A deterministic actor (``examples/td3_pendulum.py``'s, squashed into the action bounds)
regresses on the dataset's actions with :class:`~torchrl.objectives.BCLoss`. With
``--best-fraction f < 1`` only the episodes whose return is in the top ``f`` of the dataset are
kept ("%BC", Chen et al., 2021), picked with
:func:`~torchrl.data.replay_buffers.query.filter_trajectories`. On a medium-replay dataset plain
BC copies the average behaviour; filtering copies its better part. The loop is that of
``examples/iql_pendulum_offline.py`` (no target networks here).

Usage: ``python examples/offline/bc.py [--data d4rl:PATH | --data minari:ID]
[--best-fraction F] [--offline-steps N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import torch
from _offline import (
    TRANSITION_KEYS,
    OfflineConfig,
    behaviour_return,
    describe,
    episode_returns,
    open_dataset,
    transitions,
)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import iql_pendulum_offline  # noqa: E402
import td3_pendulum  # noqa: E402
from _common import parse_config  # noqa: E402

from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer  # noqa: E402
from torchrl.data.replay_buffers.query import filter_trajectories, traj  # noqa: E402
from torchrl.envs import GymEnv  # noqa: E402
from torchrl.objectives import BCLoss  # noqa: E402


@dataclass
class Config(OfflineConfig):
    best_fraction: float = 1.0  # keep the episodes with the top returns (1.0: all of them)


def best_episodes(dataset: Any, fraction: float, batch_size: int) -> TensorDictReplayBuffer:
    """A buffer of the dataset's episodes whose return is in its top ``fraction``."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"best_fraction must be in (0, 1], got {fraction}")
    data = transitions(dataset)
    threshold = float(torch.quantile(episode_returns(data), 1.0 - fraction))
    kept = filter_trajectories(data, traj.reward.sum() >= threshold, trajectory_key="episode")
    selected = torch.cat([t.data.select(*TRANSITION_KEYS) for t in kept])
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(selected.shape[0]), batch_size=batch_size
    )
    buffer.extend(selected)
    return buffer


def train(cfg: Config, dataset: Any = None) -> dict:
    """Trains BC on ``dataset`` (default: the one ``cfg.data`` names); returns the history."""
    torch.manual_seed(cfg.seed)
    if dataset is None:
        dataset = open_dataset(cfg.data, cfg.batch_size, root=cfg.root)
    if cfg.progress:
        print(describe(cfg.data, dataset))
    behaviour = behaviour_return(dataset)
    if cfg.best_fraction < 1.0:
        dataset = best_episodes(dataset, cfg.best_fraction, cfg.batch_size)
        if cfg.progress:
            print(f"kept the best {cfg.best_fraction:.0%} episodes: {len(dataset)} transitions")
    actor, _ = td3_pendulum.make_agent(GymEnv(cfg.env_name), cfg.hidden)
    return iql_pendulum_offline.train_offline(
        cfg, BCLoss(actor), actor, dataset, behaviour, "BC", soft_update=False
    )


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    iql_pendulum_offline.report_offline(cfg, train(cfg), "BC", "offline_bc")


if __name__ == "__main__":
    main()
