"""TD3+BC on Pendulum-v1 from a dataset file (``--data d4rl:PATH`` or ``--data minari:ID``).

TD3's twin critics with target-policy smoothing, and an actor that climbs
``lmbda * Q(s, pi(s))`` while staying close to the dataset's action
(``(pi(s) - a)^2``), with ``lmbda = alpha / mean |Q|`` (:class:`~torchrl.objectives.TD3BCLoss`,
Fujimoto and Gu, 2021). As in the paper, the actor moves every ``policy_delay``-th step, the
smoothing noise is 0.2 and its clip 0.5 of the action range's half-width, ``alpha = 2.5`` for
actions in [-1, 1] (``alpha * h^2`` on a range of half-width ``h``: Pendulum's torque lies in
[-2, 2], where the squared BC error is 4 times larger), the rate 3e-4 and the observations
standardised with the dataset's statistics (inside the networks). The networks are those of
``examples/td3_pendulum.py``, the loop that of ``examples/iql_pendulum_offline.py``.

Usage: ``python examples/offline/td3_bc.py [--data d4rl:PATH | --data minari:ID]
[--offline-steps N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import torch
from _offline import OfflineConfig, behaviour_return, describe, open_dataset, transitions
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import iql_pendulum_offline  # noqa: E402
from _common import parse_config  # noqa: E402

from torchrl.envs import GymEnv  # noqa: E402
from torchrl.modules import MLP, TanhModule, ValueOperator  # noqa: E402
from torchrl.objectives import TD3BCLoss  # noqa: E402


@dataclass
class Config(OfflineConfig):
    lr: float = 3e-4  # the paper's rate for both networks
    alpha: float = 2.5  # the paper's, for actions in [-1, 1] (scaled below for other ranges)
    policy_noise: float = 0.2  # of the action half-width
    noise_clip: float = 0.5  # of the action half-width
    policy_delay: int = 2
    normalize: bool = True  # standardise observations with the dataset's statistics


class Standardized(nn.Module):
    """Runs ``net`` on ``(x - mean) / std`` (inputs concatenated), with the dataset's statistics."""

    def __init__(self, net: nn.Module, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.net = net
        self.register_buffer("mean", mean.clone())
        self.register_buffer("std", std.clamp_min(1e-3))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.net((torch.cat(inputs, -1) - self.mean) / self.std)


def make_agent(
    env: GymEnv, cfg: Config, data: TensorDictBase
) -> tuple[TensorDictSequential, ValueOperator]:
    """``td3_pendulum.make_agent``'s actor and critic, reading standardised observations.

    TD3+BC standardises the states with the dataset's mean and deviation (the paper's
    recipe); the statistics live inside the networks, so the env needs no transform.
    """
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    obs = data["observation"]
    mean, std = obs.mean(0), obs.std(0)
    if not cfg.normalize:
        mean, std = torch.zeros_like(mean), torch.ones_like(std)
    cells = [cfg.hidden, cfg.hidden]
    actor = TensorDictSequential(
        TensorDictModule(
            Standardized(MLP(n_obs, n_act, num_cells=cells, activation_class=nn.ReLU), mean, std),
            in_keys=["observation"],
            out_keys=["action"],
        ),
        TanhModule(["action"], spec=env.action_spec),
    )
    # the critic reads [observation, action]: the action part is left as it is
    critic = ValueOperator(
        Standardized(
            MLP(n_obs + n_act, 1, num_cells=cells, activation_class=nn.ReLU),
            torch.cat([mean, torch.zeros(n_act)]),
            torch.cat([std, torch.ones(n_act)]),
        ),
        in_keys=["observation", "action"],
    )
    return actor, critic


def train(cfg: Config, dataset: Any = None) -> dict:
    """Trains TD3+BC on ``dataset`` (default: the one ``cfg.data`` names); returns the history."""
    torch.manual_seed(cfg.seed)
    if dataset is None:
        dataset = open_dataset(cfg.data, cfg.batch_size, root=cfg.root)
    if cfg.progress:
        print(describe(cfg.data, dataset))
    env = GymEnv(cfg.env_name)
    actor, critic = make_agent(env, cfg, transitions(dataset))
    scale = float(env.action_spec.space.high.max())
    loss_fn = TD3BCLoss(
        actor,
        critic,
        action_spec=env.action_spec,
        num_qvalue_nets=2,
        policy_noise=cfg.policy_noise * scale,
        noise_clip=cfg.noise_clip * scale,
        # The paper's actions lie in [-1, 1]; on a range of half-width h the squared BC error
        # is h^2 times larger, and alpha * h^2 keeps the paper's balance of the two terms.
        alpha=cfg.alpha * scale**2,
        loss_function="l2",
    )
    loss_fn.make_value_estimator(gamma=cfg.gamma)

    def loss_terms(step: int, losses: TensorDictBase) -> torch.Tensor:
        # Without the actor term its parameters get no gradient and Adam leaves them alone.
        if step % cfg.policy_delay == 0:
            return losses["loss_qvalue"] + losses["loss_actor"]
        return losses["loss_qvalue"]

    return iql_pendulum_offline.train_offline(
        cfg, loss_fn, actor, dataset, behaviour_return(dataset), "TD3+BC", loss_terms=loss_terms
    )


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    iql_pendulum_offline.report_offline(cfg, train(cfg), "TD3+BC", "offline_td3_bc")


if __name__ == "__main__":
    main()
