"""CQL on Pendulum-v1 from an offline dataset made by ``iql_pendulum_offline.make_dataset``.

Its ``dataset="policy"`` kind (a half-trained SAC policy acting stochastically, see that
script), then
conservative Q-learning: SAC's actor, critic and temperature losses, plus a penalty that pushes
Q down on actions the dataset does not contain (random and policy actions) and up on the
dataset's own actions, weighted by ``min_q_weight``. No env interaction during training; the
greedy policy is evaluated every ``eval_every`` gradient steps against the behaviour score.

Usage: ``python examples/cql_pendulum_offline.py [--offline-steps N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sac_pendulum
import torch
from _common import parse_config
from iql_pendulum_offline import make_dataset, report_offline, train_offline

from torchrl.envs import GymEnv
from torchrl.modules import ProbabilisticActor
from torchrl.objectives import CQLLoss


@dataclass
class Config:
    env_name: str = "Pendulum-v1"
    dataset: str = "policy"  # see iql_pendulum_offline.make_dataset
    behaviour_frames: int = 3000
    dataset_frames: int = 10_000
    offline_steps: int = 5000
    batch_size: int = 256
    lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    min_q_weight: float = 5.0  # the published CQL(H) weight for continuous control (Kumar et al.)
    hidden: int = 64
    eval_every: int = 500  # gradient steps
    eval_episodes: int = 5
    final_eval_episodes: int = 50  # Pendulum returns vary a lot with the start state
    cosine_lr: bool = True  # decay the learning rate to 0 over the offline steps
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_loss(env: GymEnv, cfg: Any) -> tuple[CQLLoss, ProbabilisticActor]:
    """CQL's loss (SAC's actor and twin critics plus the conservative penalty) and its actor.

    Reads ``cfg.hidden``, ``cfg.min_q_weight`` and ``cfg.gamma``; shared with
    ``examples/offline/cql.py``.
    """
    actor, qvalue = sac_pendulum.make_agent(env, cfg.hidden)
    loss_fn = CQLLoss(
        actor,
        qvalue,
        action_spec=env.action_spec,
        loss_function="l2",
        min_q_weight=cfg.min_q_weight,
    )
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    return loss_fn, actor


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    buffer, behaviour_return = make_dataset(cfg)  # type: ignore[arg-type]
    env = GymEnv(cfg.env_name)
    loss_fn, actor = make_loss(env, cfg)
    return train_offline(cfg, loss_fn, actor, buffer, behaviour_return, "CQL")


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    report_offline(cfg, train(cfg), "CQL")


if __name__ == "__main__":
    main()
