"""IQL on Pendulum-v1 from a dataset file: one line opens it, the rest is the offline loop.

``--data d4rl:PATH`` (a D4RL HDF5 file) or ``--data minari:ID`` (a Minari dataset) is opened as
a replay buffer (see ``_offline.open_dataset``) and implicit Q-learning trains on it alone:
expectile regression of V on Q, TD learning of Q on V, advantage-weighted regression of the
actor (the networks and the loop of ``examples/iql_pendulum_offline.py``). The greedy policy is
evaluated every ``eval_every`` gradient steps and at the end on ``final_eval_episodes`` fresh
episodes, against the dataset's mean episode return (the behaviour policy's score).

Usage: ``python examples/offline/make_dataset.py`` first, then
``python examples/offline/iql.py [--data d4rl:PATH | --data minari:ID] [--offline-steps N]
[--seed S] [--out DIR]``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import torch
from _offline import OfflineConfig, behaviour_return, describe, open_dataset

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import iql_pendulum_offline  # noqa: E402
from _common import parse_config  # noqa: E402

from torchrl.envs import GymEnv  # noqa: E402


@dataclass
class Config(OfflineConfig):
    expectile: float = 0.7  # the published locomotion settings (Kostrikov et al., 2022)
    temperature: float = 3.0


def train(cfg: Config, dataset: Any = None) -> dict:
    """Trains IQL on ``dataset`` (default: the one ``cfg.data`` names); returns the history."""
    torch.manual_seed(cfg.seed)
    if dataset is None:
        dataset = open_dataset(cfg.data, cfg.batch_size, root=cfg.root)
    if cfg.progress:
        print(describe(cfg.data, dataset))
    loss_fn, actor = iql_pendulum_offline.make_loss(GymEnv(cfg.env_name), cfg)
    history = iql_pendulum_offline.train_offline(
        cfg, loss_fn, actor, dataset, behaviour_return(dataset), "IQL"
    )
    history["actor"], history["loss_fn"] = actor, loss_fn
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    iql_pendulum_offline.report_offline(cfg, train(cfg), "IQL", "offline_iql")


if __name__ == "__main__":
    main()
