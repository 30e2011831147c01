"""IQL on Pendulum-v1 from an offline dataset: the replay data of a short SAC run.

Three stages. (1) SAC (``sac_pendulum.py``) trains online for ``behaviour_frames`` frames. (2)
The dataset (``dataset="replay"``, the default) is everything it collected meanwhile, from
random play to a policy that improves, as in the "medium-replay" datasets of the offline-RL
literature; its mean episode return is the behaviour score. With ``dataset="policy"`` it is
instead ``dataset_frames`` transitions of the final SAC policy acting stochastically (CQL's
example uses that one, with a shorter SAC run). (3) Implicit Q-learning on the dataset alone
(no env interaction): expectile regression of V on Q, TD learning of Q on V, and
advantage-weighted regression of the actor. The greedy IQL policy is evaluated every
``eval_every`` gradient steps; the goal is to beat the behaviour score (seeds 0-2: -180 vs
-517, -155 vs -489, -379 vs -524 over 50 final episodes).

Usage: ``python examples/iql_pendulum_offline.py [--offline-steps N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sac_pendulum
import torch
from _common import episode_returns, evaluate, parse_config, plot_curve
from tensordict import TensorDictBase
from torch import Tensor, nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.modules import MLP, ProbabilisticActor, ValueOperator
from torchrl.objectives import IQLLoss, LossModule, SoftUpdate


@dataclass
class Config:
    env_name: str = "Pendulum-v1"
    dataset: str = "replay"  # "replay": SAC's training data; "policy": its half-trained policy
    behaviour_frames: int = 10_000
    dataset_frames: int = 10_000  # with dataset="policy"
    offline_steps: int = 5000
    batch_size: int = 256
    lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    expectile: float = 0.7  # the published locomotion settings (Kostrikov et al., 2022)
    temperature: float = 3.0
    hidden: int = 256
    eval_every: int = 500  # gradient steps
    eval_episodes: int = 5
    final_eval_episodes: int = 50  # Pendulum returns vary a lot with the start state
    cosine_lr: bool = True  # decay the learning rate to 0 over the offline steps
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_dataset(cfg: Config) -> tuple[TensorDictReplayBuffer, float]:
    """Trains the behaviour policy briefly; returns the dataset and its mean episode return.

    With ``cfg.dataset == "replay"`` the dataset is everything SAC collected while training
    (random play first, then a policy that improves); with ``"policy"``, ``dataset_frames``
    transitions of the half-trained policy acting stochastically.
    """
    history = sac_pendulum.train(
        sac_pendulum.Config(
            frames=cfg.behaviour_frames,
            init_random_frames=min(1000, cfg.behaviour_frames // 2),
            frames_per_batch=min(200, cfg.behaviour_frames // 2),
            buffer_size=max(cfg.behaviour_frames, 1),
            batch_size=cfg.batch_size,  # also the offline batch size of a "replay" dataset
            eval_every=10**9,  # no evaluation: this policy is meant to be mediocre
            final_eval_episodes=2,
            hidden=cfg.hidden,
            seed=cfg.seed,
            progress=False,
        )
    )
    if cfg.dataset == "replay":
        train_returns = [r for _, r in history["train"]]
        return history["buffer"], sum(train_returns) / max(len(train_returns), 1)
    if cfg.dataset != "policy":
        raise ValueError(f"dataset must be 'replay' or 'policy', got {cfg.dataset!r}")
    behaviour = history["actor"]
    env = TransformedEnv(GymEnv(cfg.env_name), RewardSum())
    env.set_seed(cfg.seed + 1)
    collector = SyncDataCollector(
        env, behaviour, frames_per_batch=200, total_frames=cfg.dataset_frames
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.dataset_frames), batch_size=cfg.batch_size
    )
    returns: list[float] = []
    for batch in collector:
        buffer.extend(batch.reshape(-1))
        returns += [r for _, r in episode_returns(batch, 0)]
    collector.shutdown()
    behaviour_return = sum(returns) / max(len(returns), 1)
    return buffer, behaviour_return


def make_loss(env: GymEnv, cfg: Any) -> tuple[IQLLoss, ProbabilisticActor]:
    """IQL's loss (twin Q critics, a state-value net, SAC's tanh-Gaussian actor) and its actor.

    Reads ``cfg.hidden``, ``cfg.expectile``, ``cfg.temperature`` and ``cfg.gamma``; shared with
    ``examples/offline/iql.py`` and ``examples/offline/offline_to_online.py``.
    """
    actor, qvalue = sac_pendulum.make_agent(env, cfg.hidden)
    n_obs = env.observation_spec["observation"].shape[-1]
    value = ValueOperator(
        MLP(n_obs, 1, num_cells=[cfg.hidden, cfg.hidden], activation_class=nn.ReLU),
        in_keys=["observation"],
    )
    loss_fn = IQLLoss(
        actor,
        qvalue,
        value,
        num_qvalue_nets=2,
        loss_function="l2",
        expectile=cfg.expectile,
        temperature=cfg.temperature,
    )
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    return loss_fn, actor


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    buffer, behaviour_return = make_dataset(cfg)
    loss_fn, actor = make_loss(GymEnv(cfg.env_name), cfg)
    return train_offline(cfg, loss_fn, actor, buffer, behaviour_return, "IQL")


def train_offline(
    cfg: Any,
    loss_fn: LossModule,
    actor: nn.Module,
    buffer: Any,
    behaviour_return: float,
    name: str,
    *,
    loss_terms: Callable[[int, TensorDictBase], Tensor] | None = None,
    soft_update: bool = True,
) -> dict:
    """The offline loop shared with ``cql_pendulum_offline.py`` and ``examples/offline/``.

    Gradient steps on batches of ``buffer`` (anything with ``sample()``): Adam on every loss term
    (or on what ``loss_terms(step, losses)`` returns, e.g. TD3+BC's delayed actor term), an
    optional cosine decay of the rate, soft target updates (unless ``soft_update=False``: a loss
    without target networks), a deterministic evaluation every ``cfg.eval_every`` steps and a
    final one on ``cfg.final_eval_episodes`` fresh episodes.
    """
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    target_updater = SoftUpdate(loss_fn, tau=cfg.tau) if soft_update else None
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr)
    # With a fixed budget of gradient steps, a decaying rate lets the policy settle instead of
    # being read off mid-oscillation (IQL's published recipe decays the actor's rate this way).
    schedule = (
        torch.optim.lr_scheduler.CosineAnnealingLR(optim, cfg.offline_steps)
        if cfg.cosine_lr
        else None
    )

    history: dict = {"train": [], "eval": [], "behaviour_return": behaviour_return}
    start = time.perf_counter()
    bar = tqdm(range(1, cfg.offline_steps + 1), disable=not cfg.progress, desc=f"{name} offline")
    for step in bar:
        losses = loss_fn(buffer.sample())
        if loss_terms is None:
            loss = sum(v for k, v in losses.items() if k.startswith("loss_"))
        else:
            loss = loss_terms(step, losses)
        optim.zero_grad()
        loss.backward()
        optim.step()
        if schedule is not None:
            schedule.step()
        if target_updater is not None:
            target_updater.step()
        if step % cfg.eval_every == 0 or step == cfg.offline_steps:
            ret = evaluate(eval_env, actor, max_steps=200)
            # The x axis of the plot counts gradient steps here (no env frames are used).
            history["eval"].append((step, ret))
            bar.set_postfix(eval_return=f"{ret:.0f}", behaviour=f"{behaviour_return:.0f}")
    history["wall"] = time.perf_counter() - start
    final_env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    final_env.set_seed(cfg.seed + 20_000)
    history["final_return"] = evaluate(final_env, actor, max_steps=200)
    final_env.close()
    eval_env.close()
    return history


def report_offline(cfg: Any, history: dict, name: str, file_name: str | None = None) -> None:
    """Writes the learning curve and prints the final line (shared with the CQL example).

    The plot goes to ``<cfg.out>/<file_name>.png`` (default ``<name>_pendulum_offline``).
    """
    file_name = file_name or f"{name.lower()}_pendulum_offline"
    plot_curve(
        history,
        f"{cfg.out}/{file_name}.png",
        f"{name} offline, Pendulum-v1",
        target=history["behaviour_return"],
        xlabel="gradient steps",
        target_label="behaviour policy",
    )
    print(
        f"{name} Pendulum-v1 (offline): final deterministic evaluation return "
        f"{history['final_return']:.1f}; behaviour policy {history['behaviour_return']:.1f}; "
        f"{cfg.offline_steps} gradient steps in {history['wall']:.1f} s"
    )


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    report_offline(cfg, train(cfg), "IQL")


if __name__ == "__main__":
    main()
