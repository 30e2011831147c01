"""Asynchronous evaluation with agents: PPO trains on CartPole-v1 while an evaluation agent runs.

Training is the loop of ``ppo_agents.py``. The evaluation agent (one deterministic episode per
env, ``stop_variable="done"``) runs in another process through
``NRemoteAgent(evaluation_agent, num_processes=1)``: the actor's parameters live in shared
memory, so the worker always acts with the latest weights (an evaluation may straddle an
update). Each training iteration asks ``is_running()`` (it never blocks): once an evaluation is
over, its mean return is recorded at the frame count it started at, and a new one starts on the
same shared workspace. Training stops at the first evaluation that reaches the target.

Usage: ``python examples/agents/async_eval_agents.py [--frames N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from _agents_common import (
    episode_returns,
    evaluation_agent,
    final_return,
    mean_return,
)
from _common import parse_config, plot_curve, report
from ppo_cartpole import make_agent
from torch import nn
from tqdm import tqdm

from torchrl.agents import Agents, EnvAgent, ModuleAgent, NRemoteAgent, TemporalAgent, Workspace
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.envs.utils import ExplorationType
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE


@dataclass
class Config:
    env_name: str = "CartPole-v1"
    frames: int = 102_400  # upper bound; training stops once solved
    num_envs: int = 8
    steps_per_env: int = 32
    epochs: int = 10
    minibatch_size: int = 256
    lr: float = 2e-3
    gamma: float = 0.98
    gae_lambda: float = 0.8
    clip_epsilon: float = 0.2
    max_grad_norm: float = 0.5
    hidden: int = 64
    eval_episodes: int = 8
    eval_max_steps: int = 500
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

    policy = ModuleAgent(actor, exploration_type=ExplorationType.RANDOM)
    acquisition = TemporalAgent(Agents(EnvAgent(env), policy))
    # The worker gets a copy of the evaluation agent; the actor's parameters are shared.
    remote_eval = NRemoteAgent(evaluation_agent(eval_env, actor), num_processes=1)
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

    history: dict = {"train": [], "eval": [], "solved_at": None, "evaluations": 0}
    frames, steps = 0, cfg.steps_per_env
    workspace, eval_workspace = Workspace(), Workspace()
    eval_started_at = 0
    remote_eval(eval_workspace, t=0, n_steps=cfg.eval_max_steps + 1, blocking=False)
    start = time.perf_counter()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="PPO + async eval")
    try:
        while frames < cfg.frames:
            with torch.no_grad():
                if workspace.time_length == 0:
                    acquisition(workspace, t=0, n_steps=steps + 1)
                else:
                    workspace.copy_n_last_steps(1)
                    acquisition(workspace, t=1, n_steps=steps)
            batch = workspace.time_slice(0, steps)
            n = batch.numel()
            frames += n
            with torch.no_grad():
                advantage(batch)
            flat = batch.reshape(-1)
            for _ in range(cfg.epochs):
                for idx in torch.randperm(n).split(cfg.minibatch_size):
                    losses = loss_fn(flat[idx])
                    loss = losses["loss_objective"] + losses["loss_critic"]
                    optim.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(loss_fn.parameters(), cfg.max_grad_norm)
                    optim.step()
            history["train"] += episode_returns(batch, frames)
            bar.update(n)

            if not remote_eval.is_running():  # an evaluation is over: record it, start the next
                ret = mean_return(eval_workspace)
                history["eval"].append((eval_started_at, ret))
                history["evaluations"] += 1
                bar.set_postfix(eval_return=f"{ret:.0f}")
                if ret >= cfg.target_return:
                    history["solved_at"] = eval_started_at
                    break
                eval_started_at = frames
                remote_eval(eval_workspace, t=0, n_steps=cfg.eval_max_steps + 1, blocking=False)
    finally:
        history["wall"] = time.perf_counter() - start
        remote_eval.close()
    history["frames"] = frames
    bar.close()
    env.close()
    eval_env.close()
    history["final_return"] = final_return(
        GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes), actor, cfg.seed
    )
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # tiny networks: more threads only add overhead on small machines
    history = train(cfg)
    title = "PPO (agents) with asynchronous evaluation, CartPole-v1"
    plot_curve(history, f"{cfg.out}/async_eval_agents.png", title, cfg.target_return)
    print(f"{history['evaluations']} evaluations ran while training went on")
    report(
        "PPO + async eval agents CartPole-v1", history, cfg.target_return, history["final_return"]
    )


if __name__ == "__main__":
    main()
