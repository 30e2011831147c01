"""PPO on CartPole-v1 with the ``Trainer``: the loop of ``ppo_cartpole.py`` as hooks.

The same networks, collector, GAE and clipped PPO loss; the ``Trainer`` runs the loop and the
hooks do the rest: GAE at ``batch_process``, random minibatches of the batch
(``BatchSubSampler``) at ``process_optim_batch``, the policy weights pushed to the collector
(``UpdateWeights``), the training reward (``LogReward``), a periodic deterministic evaluation
(``Recorder``) and ``EarlyStopping`` once the evaluation reaches ``target_return``. Logs go to
a CSV logger under ``out``.

Usage: ``python examples/ppo_cartpole_trainer.py [--frames N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from _common import evaluate, parse_config, plot_curve, report
from ppo_cartpole import make_agent
from tensordict import TensorDictBase

from torchrl.collectors import SyncDataCollector
from torchrl.envs import GymEnv
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE
from torchrl.trainers import (
    BatchSubSampler,
    CSVLogger,
    EarlyStopping,
    LogReward,
    Recorder,
    Trainer,
    UpdateWeights,
)


@dataclass
class Config:
    env_name: str = "CartPole-v1"
    frames: int = 102_400  # upper bound; training stops once solved
    num_envs: int = 8
    steps_per_env: int = 32
    optim_steps_per_batch: int = 10
    minibatch_size: int = 256
    lr: float = 2e-3
    gamma: float = 0.98
    gae_lambda: float = 0.8
    clip_epsilon: float = 0.2
    hidden: int = 64
    eval_every: int = 2048  # frames between evaluations
    eval_episodes: int = 4
    final_eval_episodes: int = 10
    target_return: float = 475.0
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = GymEnv(cfg.env_name, num_envs=cfg.num_envs)
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
        entropy_bonus=False,
        normalize_advantage=True,
        loss_critic_type="l2",
        critic_coef=0.5,
    )
    trainer = Trainer(
        collector=collector,
        total_frames=cfg.frames,
        optim_steps_per_batch=cfg.optim_steps_per_batch,
        loss_module=loss_fn,
        optimizer=torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr),
        logger=CSVLogger(exp_name="ppo_cartpole_trainer", log_dir=cfg.out),
        clip_norm=0.5,
        progress_bar=cfg.progress,
        seed=cfg.seed,
    )

    def compute_advantage(batch: TensorDictBase) -> TensorDictBase:
        with torch.no_grad():
            advantage(batch)
        return batch.reshape(-1)

    trainer.register_op("batch_process", compute_advantage)
    BatchSubSampler(batch_size=cfg.minibatch_size).register(trainer)
    UpdateWeights(collector, update_weights_interval=1).register(trainer)
    LogReward(log_pbar=True).register(trainer)

    history: dict = {"train": [], "eval": [], "solved_at": None}
    recorder = Recorder(
        record_interval=max(cfg.eval_every // frames_per_batch, 1),
        record_frames=500,
        policy_exploration=actor,
        environment=eval_env,
        log_pbar=True,
    )

    def evaluate_and_track(batch: TensorDictBase) -> dict | None:
        logs = recorder(batch)
        if logs is not None:
            history["eval"].append((trainer.collected_frames, logs["return_evaluation"]))
        return logs

    trainer.register_op("post_steps_log", evaluate_and_track)
    trainer.register_module("recorder", recorder)
    stopper = EarlyStopping("return_evaluation", cfg.target_return)
    stopper.register(trainer)

    start = time.perf_counter()
    trainer.train()
    history["wall"] = time.perf_counter() - start
    history["frames"] = trainer.collected_frames
    if stopper.stopped:
        history["solved_at"] = trainer.collected_frames
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
    plot_curve(
        history,
        f"{cfg.out}/ppo_cartpole_trainer.png",
        "PPO (Trainer), CartPole-v1",
        target=cfg.target_return,
    )
    report("PPO (Trainer) CartPole-v1", history, cfg.target_return, history["final_return"])


if __name__ == "__main__":
    main()
