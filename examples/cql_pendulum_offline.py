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

import time
from dataclasses import dataclass

import sac_pendulum
import torch
from _common import evaluate, parse_config, plot_curve
from iql_pendulum_offline import make_dataset
from tqdm import tqdm

from torchrl.envs import GymEnv
from torchrl.objectives import CQLLoss, SoftUpdate


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


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    buffer, behaviour_return = make_dataset(cfg)  # type: ignore[arg-type]
    env = GymEnv(cfg.env_name)
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    actor, qvalue = sac_pendulum.make_agent(env, cfg.hidden)
    loss_fn = CQLLoss(
        actor,
        qvalue,
        action_spec=env.action_spec,
        loss_function="l2",
        min_q_weight=cfg.min_q_weight,
    )
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    target_updater = SoftUpdate(loss_fn, tau=cfg.tau)
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
    bar = tqdm(range(1, cfg.offline_steps + 1), disable=not cfg.progress, desc="CQL offline")
    for step in bar:
        losses = loss_fn(buffer.sample())
        loss = sum(v for k, v in losses.items() if k.startswith("loss_"))
        optim.zero_grad()
        loss.backward()
        optim.step()
        if schedule is not None:
            schedule.step()
        target_updater.step()
        if step % cfg.eval_every == 0 or step == cfg.offline_steps:
            ret = evaluate(eval_env, actor, max_steps=200)
            history["eval"].append((step, ret))
            bar.set_postfix(eval_return=f"{ret:.0f}", behaviour=f"{behaviour_return:.0f}")
    history["wall"] = time.perf_counter() - start
    final_env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    final_env.set_seed(cfg.seed + 20_000)
    history["final_return"] = evaluate(final_env, actor, max_steps=200)
    final_env.close()
    eval_env.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    path = plot_curve(
        history,
        f"{cfg.out}/cql_pendulum_offline.png",
        "CQL offline, Pendulum-v1",
        target=history["behaviour_return"],
        xlabel="gradient steps",
        target_label="behaviour policy",
    )
    if path:
        print(f"learning curve written to {path}")
    print(
        f"CQL Pendulum-v1 (offline): final deterministic evaluation return "
        f"{history['final_return']:.1f}; behaviour policy {history['behaviour_return']:.1f}; "
        f"{cfg.offline_steps} gradient steps in {history['wall']:.1f} s"
    )


if __name__ == "__main__":
    main()
