"""CQL on Pendulum-v1 from a dataset file (``--data d4rl:PATH`` or ``--data minari:ID``).

Conservative Q-learning: SAC's actor, critic and temperature losses, plus a penalty that pushes
Q down on actions the dataset does not hold (random and policy actions) and up on the dataset's
own, weighted by ``min_q_weight`` (the networks of ``examples/cql_pendulum_offline.py``, the loop
of ``examples/iql_pendulum_offline.py``). No env interaction during training; the greedy policy
is evaluated against the dataset's mean episode return.

Usage: ``python examples/offline/cql.py [--data d4rl:PATH | --data minari:ID]
[--offline-steps N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import torch
from _offline import OfflineConfig, behaviour_return, describe, open_dataset

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cql_pendulum_offline  # noqa: E402
import iql_pendulum_offline  # noqa: E402
from _common import parse_config  # noqa: E402

from torchrl.envs import GymEnv  # noqa: E402


@dataclass
class Config(OfflineConfig):
    min_q_weight: float = 5.0  # the published CQL(H) weight for continuous control (Kumar et al.)
    # 256 units: at 64 (cql_pendulum_offline.py's size) the greedy policy stayed down from a third
    # of the start states on this medium-replay data (-551/-856/-596 vs -499 behaviour, seeds 0-2)
    hidden: int = 256


def train(cfg: Config, dataset: Any = None) -> dict:
    """Trains CQL on ``dataset`` (default: the one ``cfg.data`` names); returns the history."""
    torch.manual_seed(cfg.seed)
    if dataset is None:
        dataset = open_dataset(cfg.data, cfg.batch_size, root=cfg.root)
    if cfg.progress:
        print(describe(cfg.data, dataset))
    loss_fn, actor = cql_pendulum_offline.make_loss(GymEnv(cfg.env_name), cfg)
    return iql_pendulum_offline.train_offline(
        cfg, loss_fn, actor, dataset, behaviour_return(dataset), "CQL"
    )


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    iql_pendulum_offline.report_offline(cfg, train(cfg), "CQL", "offline_cql")


if __name__ == "__main__":
    main()
