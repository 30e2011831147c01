"""DQN on CartPole-v1 written with agents: acquisition into a workspace, a data-loader agent.

The acquisition agent ``TemporalAgent(Agents(EnvAgent(env), ModuleAgent(egreedy_policy)))``
fills a workspace with ``[4, 64]`` transitions per batch (runs of ``T + 1`` steps, the last step
copied to the front for the next run); they go into a replay buffer. A
``DataLoaderAgent(buffer)`` then puts one sampled batch at a time into a second workspace, and
the double-DQN loss of ``torchrl.objectives`` trains on it. Settings of
``examples/dqn_cartpole.py``: epsilon anneals from 1 to ``eps_end`` over ``eps_frames``, the
target network copies the online one every ``target_update_interval`` gradient steps, and
training stops at the first deterministic evaluation (an evaluation agent) reaching the target.

Usage: ``python examples/agents/dqn_agents.py [--frames N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from _agents_common import episode_returns, evaluate_agent, evaluation_agent, final_return
from _common import parse_config, plot_curve, report
from tensordict.nn import TensorDictSequential
from torch import nn
from tqdm import tqdm

from torchrl.agents import (
    Agents,
    DataLoaderAgent,
    EnvAgent,
    ModuleAgent,
    TemporalAgent,
    Workspace,
)
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.envs.utils import ExplorationType
from torchrl.modules import MLP, EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, HardUpdate


@dataclass
class Config:
    env_name: str = "CartPole-v1"
    frames: int = 100_096  # upper bound; training stops once solved
    num_envs: int = 4
    steps_per_env: int = 64  # frames per batch = num_envs * steps_per_env
    updates_per_batch: int = 128
    init_random_frames: int = 1024
    buffer_size: int = 100_000
    batch_size: int = 64
    lr: float = 2.3e-3
    gamma: float = 0.99
    eps_end: float = 0.04
    eps_frames: int = 16_000  # frames over which epsilon anneals to eps_end
    target_update_interval: int = 10  # gradient steps
    hidden: int = 256
    eval_every: int = 2048
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

    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    qnet = MLP(in_features=n_obs, out_features=n_act, num_cells=[cfg.hidden, cfg.hidden])
    greedy = QValueActor(qnet, in_keys=["observation"], spec=env.action_spec)
    egreedy = EGreedyModule(
        env.action_spec, eps_init=1.0, eps_end=cfg.eps_end, annealing_num_steps=cfg.eps_frames
    )
    policy = ModuleAgent(
        TensorDictSequential(greedy, egreedy), exploration_type=ExplorationType.RANDOM
    )
    acquisition = TemporalAgent(Agents(EnvAgent(env), policy))
    evaluation = evaluation_agent(eval_env, greedy)

    loss_fn = DQNLoss(greedy, delay_value=True, double_dqn=True, loss_function="smooth_l1")
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    target_updater = HardUpdate(loss_fn, value_network_update_interval=cfg.target_update_interval)
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr)
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.buffer_size), batch_size=cfg.batch_size
    )
    loader = DataLoaderAgent(buffer)  # one sampled batch per call

    history: dict = {"train": [], "eval": [], "solved_at": None}
    frames, next_eval, steps = 0, cfg.eval_every, cfg.steps_per_env
    workspace, samples = Workspace(), Workspace()
    start = time.perf_counter()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="DQN agents")
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
        buffer.extend(batch.reshape(-1))
        egreedy.step(n)
        if frames >= cfg.init_random_frames:
            for _ in range(cfg.updates_per_batch):
                loader(samples, t=0)
                loss = loss_fn(samples.get_step(0))["loss"]
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(loss_fn.parameters(), 10.0)
                optim.step()
                target_updater.step()

        history["train"] += episode_returns(batch, frames)
        bar.update(n)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            ret = evaluate_agent(evaluation, max_steps=500)
            history["eval"].append((frames, ret))
            bar.set_postfix(eval_return=f"{ret:.0f}", eps=f"{float(egreedy.eps):.2f}")
            if ret >= cfg.target_return:
                history["solved_at"] = frames
                break
    history["wall"] = time.perf_counter() - start
    history["frames"] = frames
    bar.close()
    env.close()
    eval_env.close()
    history["final_return"] = final_return(
        GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes), greedy, cfg.seed
    )
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    plot_curve(history, f"{cfg.out}/dqn_agents.png", "DQN (agents), CartPole-v1", cfg.target_return)
    report("DQN agents CartPole-v1", history, cfg.target_return, history["final_return"])


if __name__ == "__main__":
    main()
