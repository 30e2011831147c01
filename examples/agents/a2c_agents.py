"""A2C on CartPole-v1 written with agents: an env agent and a policy agent over a workspace.

The acquisition agent is ``TemporalAgent(Agents(EnvAgent(env), ModuleAgent(actor)))``: at each
step the env agent steps the 16 CartPoles with the action written at the previous step, and
the policy agent writes the next action. A run of ``T + 1`` steps holds ``T`` transitions per
env (the rollout layout ``[16, T]``); the last step is copied to the front
(``copy_n_last_steps(1)``) and the next run starts at ``t=1``. GAE and the A2C loss of
``torchrl.objectives`` train on ``workspace.time_slice(0, T)``, with the settings of
``examples/a2c_cartpole.py``. Evaluation is an agent too: one deterministic episode per env,
run until every env is done (``stop_variable="done"``); a passing evaluation is confirmed on
fresh episodes (as ``examples/ppo_cartpole.py`` does) before training stops.

Usage: ``python examples/agents/a2c_agents.py [--frames N] [--seed S] [--out DIR]``.
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
    frames, next_eval, steps = 0, cfg.eval_every, cfg.steps_per_env
    workspace = Workspace()
    start = time.perf_counter()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="A2C agents")
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
        losses = loss_fn(batch)
        loss = sum(v for k, v in losses.items() if k.startswith("loss_"))
        optim.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(loss_fn.parameters(), 0.5)
        optim.step()

        history["train"] += episode_returns(batch, frames)
        bar.update(n)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            ret = evaluate_agent(evaluation, max_steps=500)
            if cfg.confirm and ret >= cfg.target_return:
                ret = min(ret, evaluate_agent(evaluation, max_steps=500))
            history["eval"].append((frames, ret))
            bar.set_postfix(eval_return=f"{ret:.0f}")
            if ret >= cfg.target_return:
                history["solved_at"] = frames
                break
    history["wall"] = time.perf_counter() - start
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
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    plot_curve(history, f"{cfg.out}/a2c_agents.png", "A2C (agents), CartPole-v1", cfg.target_return)
    report("A2C agents CartPole-v1", history, cfg.target_return, history["final_return"])


if __name__ == "__main__":
    main()
