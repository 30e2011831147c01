"""PPO on CartPole-v1 with the collection spread over Ray actors (``RayCollector``).

The same training loop as ``examples/ppo_cartpole.py``; only the collector line changes: two
Ray actors each run a ``SyncDataCollector`` on 4 CartPoles, and every iteration (``sync=True``)
gathers their ``[4, 32]`` batches into one ``[8, 32]`` batch. After each round of gradient steps
``update_policy_weights_()`` puts the new weights in Ray's object store once and both actors
load them before their next batch.

Usage: ``RAY_AUTH_MODE=disabled python examples/distributed/ppo_ray.py [--frames N] [--seed S]
[--address ADDR] [--out DIR] [--no-progress]`` (``--address auto`` joins a running cluster; by
default a local Ray instance with 2 CPUs is started and stopped). The learning curve goes to
``<out>/ppo_ray.png``.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import episode_returns, evaluate, parse_config, plot_curve, report  # noqa: E402
from ppo_cartpole import make_agent  # noqa: E402

from torchrl.collectors import SyncDataCollector  # noqa: E402
from torchrl.collectors.distributed import RayCollector  # noqa: E402
from torchrl.envs import GymEnv, RewardSum, TransformedEnv  # noqa: E402
from torchrl.objectives import ClipPPOLoss  # noqa: E402
from torchrl.objectives.value import GAE  # noqa: E402


@dataclass
class Config:
    env_name: str = "CartPole-v1"
    frames: int = 102_400  # upper bound; training stops once solved
    num_collectors: int = 2
    envs_per_collector: int = 4
    steps_per_env: int = 32
    epochs: int = 10
    minibatch_size: int = 256
    lr: float = 2e-3
    gamma: float = 0.98
    gae_lambda: float = 0.8
    clip_epsilon: float = 0.2
    max_grad_norm: float = 0.5
    hidden: int = 64
    eval_every: int = 2048
    eval_episodes: int = 4
    final_eval_episodes: int = 10
    target_return: float = 475.0
    seed: int = 0
    address: str = ""
    out: str = "outputs"
    progress: bool = True


def make_env(env_name: str, num_envs: int, seed: int) -> TransformedEnv:
    """The env of one collector actor (built inside the actor)."""
    env = TransformedEnv(GymEnv(env_name, num_envs=num_envs), RewardSum())
    env.set_seed(seed)
    return env


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    probe = GymEnv(cfg.env_name, num_envs=cfg.envs_per_collector)
    actor, critic = make_agent(probe, cfg.hidden)
    probe.close()
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)

    n = cfg.num_collectors
    frames_per_batch = n * cfg.envs_per_collector * cfg.steps_per_env
    ray_init_config = {"address": cfg.address} if cfg.address else {"num_cpus": n}
    collector = RayCollector(
        [
            (lambda i=i: make_env(cfg.env_name, cfg.envs_per_collector, cfg.seed + 1000 * i))
            for i in range(n)
        ],
        actor,
        collector_class=SyncDataCollector,
        num_collectors=n,
        sync=True,
        frames_per_batch=frames_per_batch,
        total_frames=cfg.frames,
        ray_init_config=ray_init_config,
    )
    advantage = GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic)
    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip_epsilon,
        entropy_bonus=False,
        normalize_advantage=True,
        loss_critic_type="l2",
        critic_coef=0.5,
    )
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr, fused=True)

    history: dict = {"train": [], "eval": [], "solved_at": None, "eval_wall": 0.0}
    frames, next_eval = 0, cfg.eval_every
    start = time.perf_counter()
    for batch in collector:
        count = batch.numel()
        frames += count
        with torch.no_grad():
            advantage(batch)
        flat = batch.reshape(-1)
        for _ in range(cfg.epochs):
            for idx in torch.randperm(count).split(cfg.minibatch_size):
                losses = loss_fn(flat[idx])
                loss = losses["loss_objective"] + losses["loss_critic"]
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(loss_fn.parameters(), cfg.max_grad_norm, foreach=True)
                optim.step()
        collector.update_policy_weights_()
        history["train"] += episode_returns(batch, frames)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            ret = evaluate(eval_env, actor, max_steps=500)
            if ret >= cfg.target_return:
                ret = min(ret, evaluate(eval_env, actor, max_steps=500))
            history["eval"].append((frames, ret))
            if cfg.progress:
                print(f"frames {frames}: eval return {ret:.0f}", flush=True)
            if ret >= cfg.target_return:
                history["solved_at"] = frames
                break
    history["wall"] = time.perf_counter() - start
    history["frames"] = frames
    collector.shutdown()
    eval_env.close()
    final_env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    final_env.set_seed(cfg.seed + 20_000)
    history["final_return"] = evaluate(final_env, actor, max_steps=500)
    final_env.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    history = train(cfg)
    title = "PPO CartPole-v1 (RayCollector)"
    plot_curve(history, f"{cfg.out}/ppo_ray.png", title, target=cfg.target_return)
    report("PPO CartPole-v1 (RayCollector)", history, cfg.target_return, history["final_return"])


if __name__ == "__main__":
    main()
