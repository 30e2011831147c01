"""A2C on CartPole-v1: synchronous advantage actor-critic over 16 CartPoles.

Each batch is ``[num_envs, steps_per_env]`` transitions from the current policy; GAE gives the
advantages (standardised over the batch) and the value targets; one gradient step on the A2C
loss (policy gradient + critic regression + entropy bonus) follows. Same networks as
``ppo_cartpole.py``. Every ``eval_every`` frames the greedy policy is evaluated; training stops
at the first evaluation that reaches ``target_return``.

Usage: ``python examples/a2c_cartpole.py [--frames N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from _common import episode_returns, evaluate, parse_config, plot_curve, report
from ppo_cartpole import make_agent
from torch import nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.objectives import A2CLoss
from torchrl.objectives.value import GAE


@dataclass
class Config:
    env_name: str = "CartPole-v1"
    frames: int = 300_032  # upper bound; training stops once solved
    num_envs: int = 16
    steps_per_env: int = 8
    lr: float = 3e-3
    gamma: float = 0.99
    gae_lambda: float = 0.95
    entropy_coef: float = 0.0
    hidden: int = 64
    eval_every: int = 4096
    eval_episodes: int = 4
    final_eval_episodes: int = 10
    target_return: float = 475.0
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = TransformedEnv(GymEnv(cfg.env_name, num_envs=cfg.num_envs), RewardSum())
    env.set_seed(cfg.seed)
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    actor, critic = make_agent(env, cfg.hidden)

    collector = SyncDataCollector(
        env, actor, frames_per_batch=cfg.num_envs * cfg.steps_per_env, total_frames=cfg.frames
    )
    advantage = GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic, average_gae=True)
    loss_fn = A2CLoss(
        actor,
        critic,
        entropy_coef=cfg.entropy_coef,
        entropy_bonus=cfg.entropy_coef > 0,
        critic_coef=0.5,
        loss_critic_type="l2",
    )
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr)

    history: dict = {"train": [], "eval": [], "solved_at": None}
    frames, next_eval = 0, cfg.eval_every
    start = time.perf_counter()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="A2C CartPole")
    for batch in collector:
        n = batch.numel()
        frames += n
        with torch.no_grad():
            advantage(batch)
        losses = loss_fn(batch)
        loss = sum(v for k, v in losses.items() if k.startswith("loss_"))
        optim.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(loss_fn.parameters(), 0.5)
        optim.step()
        collector.update_policy_weights_()

        history["train"] += episode_returns(batch, frames)
        bar.update(n)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            ret = evaluate(eval_env, actor, max_steps=500)
            history["eval"].append((frames, ret))
            bar.set_postfix(eval_return=f"{ret:.0f}")
            if ret >= cfg.target_return:
                history["solved_at"] = frames
                break
    history["wall"] = time.perf_counter() - start
    history["frames"] = frames
    bar.close()
    collector.shutdown()
    eval_env.close()
    final_env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    final_env.set_seed(cfg.seed + 20_000)
    history["final_return"] = evaluate(final_env, actor, max_steps=500)
    final_env.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    plot_curve(history, f"{cfg.out}/a2c_cartpole.png", "A2C, CartPole-v1", target=cfg.target_return)
    report("A2C CartPole-v1", history, cfg.target_return, history["final_return"])


if __name__ == "__main__":
    main()
