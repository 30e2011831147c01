"""PPO on CartPole-v1 written with agents: an env agent and a policy agent over a workspace.

The acquisition agent ``TemporalAgent(Agents(EnvAgent(env), ModuleAgent(actor)))`` fills a
workspace with ``[8, 32]`` transitions (a run of ``T + 1`` steps; the last step is copied to the
front with ``copy_n_last_steps(1)`` and the next run starts at ``t=1``). GAE and the clipped
PPO loss of ``torchrl.objectives`` then train on ``workspace.time_slice(0, T)`` for several
epochs of minibatches, with the settings of ``examples/ppo_cartpole.py``. The deterministic
evaluation is an agent too: one episode per env, run until every env is done
(``stop_variable="done"``); a passing evaluation is confirmed on fresh episodes.

Usage: ``python examples/agents/ppo_agents.py [--frames N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from _agents_common import episode_returns, evaluate_agent, evaluation_agent, final_return
from _common import parse_config, plot_curve, report
from ppo_cartpole import make_agent
from torch import nn
from tqdm import tqdm

from torchrl.agents import Agents, EnvAgent, ModuleAgent, TemporalAgent, Workspace
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.envs.utils import ExplorationType
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE


@dataclass
class Config:
    env_name: str = "CartPole-v1"
    frames: int = 102_400  # upper bound; training stops once solved
    num_envs: int = 8
    steps_per_env: int = 32  # frames per batch = num_envs * steps_per_env
    epochs: int = 10
    minibatch_size: int = 256
    lr: float = 2e-3
    gamma: float = 0.98
    gae_lambda: float = 0.8
    clip_epsilon: float = 0.2
    entropy_coef: float = 0.0
    max_grad_norm: float = 0.5
    hidden: int = 64
    eval_every: int = 2048  # frames between deterministic evaluations
    eval_episodes: int = 4
    confirm: bool = True  # re-check a passing evaluation on fresh episodes before stopping
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

    policy = ModuleAgent(actor, exploration_type=ExplorationType.RANDOM)  # sample actions
    acquisition = TemporalAgent(Agents(EnvAgent(env), policy))
    evaluation = evaluation_agent(eval_env, actor)
    advantage = GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic)
    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip_epsilon,
        entropy_coef=cfg.entropy_coef,
        entropy_bonus=cfg.entropy_coef > 0,
        normalize_advantage=True,
        loss_critic_type="l2",
        critic_coef=0.5,
    )
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr, fused=True)

    history: dict = {"train": [], "eval": [], "solved_at": None, "eval_wall": 0.0}
    frames, next_eval, steps = 0, cfg.eval_every, cfg.steps_per_env
    workspace = Workspace()
    start, cpu_start = time.perf_counter(), time.process_time()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="PPO agents")
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
                if "loss_entropy" in losses.keys():
                    loss = loss + losses["loss_entropy"]
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(loss_fn.parameters(), cfg.max_grad_norm, foreach=True)
                optim.step()

        history["train"] += episode_returns(batch, frames)
        bar.update(n)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            eval_start = time.perf_counter()
            ret = evaluate_agent(evaluation, max_steps=500)
            if cfg.confirm and ret >= cfg.target_return:
                ret = min(ret, evaluate_agent(evaluation, max_steps=500))
            history["eval_wall"] += time.perf_counter() - eval_start
            history["eval"].append((frames, ret))
            bar.set_postfix(eval_return=f"{ret:.0f}")
            if ret >= cfg.target_return:
                history["solved_at"] = frames
                break
    history["wall"] = time.perf_counter() - start
    history["cpu"] = time.process_time() - cpu_start
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
    plot_curve(history, f"{cfg.out}/ppo_agents.png", "PPO (agents), CartPole-v1", cfg.target_return)
    report("PPO agents CartPole-v1", history, cfg.target_return, history["final_return"])


if __name__ == "__main__":
    main()
