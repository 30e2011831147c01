"""Recurrent A2C on CartPole-v1 with agents: an LSTM policy acts step by step, trains on sequences.

The policy is an ``LSTMModule`` followed by a linear head and a categorical actor. Acting, the
policy agent runs one step at a time: it reads the LSTM state of step ``t`` (zeroed where
``"is_init"`` marks an episode start) and writes the next state under ``"next"``, which the env
agent carries to step ``t + 1`` (the env has an ``InitTracker`` and the LSTM's primer). For the
loss, the actor runs once over each stored sequence ``[16, T]`` in recurrent mode: the state is
rebuilt from the stored state of the first step and the ``"is_init"`` flags, as
:func:`torchrl.agents.replay` does, so the loss sees the outputs the acting policy computed. The
critic is a feed-forward network on the observation. Otherwise the settings of
``examples/a2c_cartpole.py``.

Usage: ``python examples/agents/a2c_lstm_agents.py [--frames N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from _agents_common import episode_returns, evaluate_agent, evaluation_agent, final_return
from _common import parse_config, plot_curve, report
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from tqdm import tqdm

from torchrl.agents import Agents, EnvAgent, ModuleAgent, TemporalAgent, Workspace
from torchrl.envs import Compose, GymEnv, InitTracker, RewardSum, TransformedEnv
from torchrl.envs.utils import ExplorationType
from torchrl.modules import (
    MLP,
    LSTMModule,
    OneHotCategorical,
    ProbabilisticActor,
    ValueOperator,
    set_recurrent_mode,
)
from torchrl.objectives import A2CLoss
from torchrl.objectives.value import GAE


@dataclass
class Config:
    env_name: str = "CartPole-v1"
    frames: int = 300_032  # upper bound; training stops once solved
    num_envs: int = 16
    steps_per_env: int = 16
    lr: float = 3e-3
    gamma: float = 0.99
    gae_lambda: float = 0.95
    hidden: int = 64
    eval_every: int = 4096
    eval_episodes: int = 4
    final_eval_episodes: int = 10
    target_return: float = 475.0
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_env(cfg: Config, num_envs: int, lstm: LSTMModule, train: bool) -> TransformedEnv:
    transforms = [InitTracker(), lstm.make_tensordict_primer()]
    if train:
        transforms.insert(0, RewardSum())
    return TransformedEnv(GymEnv(cfg.env_name, num_envs=num_envs), Compose(*transforms))


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    probe = GymEnv(cfg.env_name)
    n_obs = probe.observation_spec["observation"].shape[-1]
    n_act = probe.action_spec.shape[-1]
    probe.close()
    lstm = LSTMModule(input_size=n_obs, hidden_size=cfg.hidden, in_key="observation", out_key="h")
    env = make_env(cfg, cfg.num_envs, lstm, train=True)
    env.set_seed(cfg.seed)
    eval_env = make_env(cfg, cfg.eval_episodes, lstm, train=False)
    eval_env.set_seed(cfg.seed + 10_000)

    head = TensorDictModule(nn.Linear(cfg.hidden, n_act), in_keys=["h"], out_keys=["logits"])
    actor = ProbabilisticActor(
        TensorDictSequential(lstm, head),
        in_keys=["logits"],
        spec=env.action_spec,
        distribution_class=OneHotCategorical,
        distribution_kwargs={"validate_args": False},
        return_log_prob=True,
    )
    critic = ValueOperator(
        MLP(n_obs, 1, num_cells=[cfg.hidden, cfg.hidden], activation_class=nn.Tanh),
        in_keys=["observation"],
    )
    policy = ModuleAgent(actor, exploration_type=ExplorationType.RANDOM)
    acquisition = TemporalAgent(Agents(EnvAgent(env), policy))
    evaluation = evaluation_agent(eval_env, actor)
    advantage = GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic, average_gae=True)
    loss_fn = A2CLoss(actor, critic, entropy_bonus=False, critic_coef=0.5, loss_critic_type="l2")
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr)

    history: dict = {"train": [], "eval": [], "solved_at": None}
    frames, next_eval, steps = 0, cfg.eval_every, cfg.steps_per_env
    workspace = Workspace()
    start = time.perf_counter()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="A2C-LSTM agents")
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
        with set_recurrent_mode(True):  # the actor runs over the sequences [16, T]
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
        make_env(cfg, cfg.final_eval_episodes, lstm, train=False), actor, cfg.seed
    )
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    title = "Recurrent A2C (agents), CartPole-v1"
    plot_curve(history, f"{cfg.out}/a2c_lstm_agents.png", title, cfg.target_return)
    report("A2C-LSTM agents CartPole-v1", history, cfg.target_return, history["final_return"])


if __name__ == "__main__":
    main()
