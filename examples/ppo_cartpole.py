"""PPO on CartPole-v1: a collector, GAE, the clipped PPO loss and Adam, nothing else.

The loop reads top to bottom. A ``SyncDataCollector`` steps 8 CartPoles with the current
stochastic policy and yields batches of ``[8, 32]`` transitions; the advantages come from GAE
over each batch; several epochs of gradient steps on the clipped PPO objective follow; the
collector picks up the new weights on its next batch. Every ``eval_every`` frames a
deterministic evaluation (the most likely action) runs on its own envs, and training stops at
the first evaluation that reaches ``target_return`` (and, with ``confirm``, a second one on
fresh episodes).

Usage: ``python examples/ppo_cartpole.py [--frames N] [--seed S] [--out DIR]``. With the
defaults it solves CartPole (deterministic evaluation >= 475; seed 0: 12k frames, held-out
final evaluation 500); without the confirmation, in 6-12k frames (median 8k over seeds 0-4).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from _common import (
    episode_returns,
    evaluate,
    evaluate_confirmed,
    parse_config,
    plot_curve,
    report,
)
from tensordict.nn import TensorDictModule
from torch import nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator
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


def make_agent(env: GymEnv, hidden: int) -> tuple[ProbabilisticActor, ValueOperator]:
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    policy_net = MLP(
        in_features=n_obs, out_features=n_act, num_cells=[hidden, hidden], activation_class=nn.Tanh
    )
    actor = ProbabilisticActor(
        TensorDictModule(policy_net, in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        spec=env.action_spec,
        distribution_class=OneHotCategorical,
        # The logits come from our own network: skipping torch's argument checks saves about
        # a quarter of each policy call.
        distribution_kwargs={"validate_args": False},
        return_log_prob=True,
    )
    value_net = MLP(
        in_features=n_obs, out_features=1, num_cells=[hidden, hidden], activation_class=nn.Tanh
    )
    critic = ValueOperator(value_net, in_keys=["observation"])
    return actor, critic


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = TransformedEnv(GymEnv(cfg.env_name, num_envs=cfg.num_envs), RewardSum())
    env.set_seed(cfg.seed)
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    actor, critic = make_agent(env, cfg.hidden)

    frames_per_batch = cfg.num_envs * cfg.steps_per_env
    collector = SyncDataCollector(
        env, actor, frames_per_batch=frames_per_batch, total_frames=cfg.frames
    )
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
    # The fused kernel updates all parameters at once: for small networks the per-tensor
    # Python overhead of the default implementation dominates.
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr, fused=True)

    history: dict = {"train": [], "eval": [], "solved_at": None, "eval_wall": 0.0}
    frames, next_eval = 0, cfg.eval_every
    start, cpu_start = time.perf_counter(), time.process_time()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="PPO CartPole")
    for batch in collector:
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
        collector.update_policy_weights_()

        history["train"] += episode_returns(batch, frames)
        bar.update(n)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            eval_start = time.perf_counter()
            ret = evaluate_confirmed(eval_env, actor, 500, cfg.target_return, cfg.confirm)
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
    collector.shutdown()
    eval_env.close()
    final_env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    final_env.set_seed(cfg.seed + 20_000)
    history["final_return"] = evaluate(final_env, actor, max_steps=500)
    final_env.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # tiny networks: more threads only add overhead on small machines
    history = train(cfg)
    plot_curve(history, f"{cfg.out}/ppo_cartpole.png", "PPO, CartPole-v1", target=cfg.target_return)
    report("PPO CartPole-v1", history, cfg.target_return, history["final_return"])


if __name__ == "__main__":
    main()
