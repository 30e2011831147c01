"""TD-MPC2 on the pure-torch Pendulum: latent world model, Q ensemble, policy prior, MPPI planner.

The env is :class:`~torchrl.envs.PendulumEnv` (gymnasium's ``Pendulum-v1`` physics, batched,
in torch) with actions rescaled to ``[-1, 1]`` and 200-step episodes. A
:class:`~torchrl.trainers.algorithms.TdMpc2Trainer` collects ``frames_per_batch`` frames per
iteration with the :class:`~torchrl.modules.tdmpc2.TdMpc2Planner` (the first
``init_random_frames`` with uniform random actions), stores them in a slice replay buffer and
makes ``updates_per_frame`` two-phase updates per collected frame. Every ``eval_every`` frames
the planner is evaluated without exploration noise on ``eval_episodes`` fresh episodes; training
stops once an evaluation reaches ``target_return`` and, with ``confirm``, a second one on new
episodes agrees (a random policy scores about -1200, a good swing-up about -150). The networks and the planner are far smaller than the paper's (latent 64,
width 64, 2 Q-functions, 64 candidates, 3 iterations) so that a run takes minutes on a CPU.

Usage: ``python examples/tdmpc2_pendulum.py [--frames N] [--seed S] [--out DIR]``.
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

from torchrl.collectors import SyncDataCollector
from torchrl.envs import (
    ActionScaling,
    Compose,
    InitTracker,
    PendulumEnv,
    RewardSum,
    StepCounter,
    TransformedEnv,
)
from torchrl.modules.tdmpc2 import (
    TdMpc2Planner,
    TdMpc2PolicyPrior,
    TdMpc2QEnsemble,
    TdMpc2WorldModel,
)
from torchrl.objectives.tdmpc2 import TdMpc2Loss
from torchrl.trainers.algorithms.tdmpc2 import TdMpc2Trainer


@dataclass
class Config:
    frames: int = 10_000
    num_envs: int = 4
    frames_per_batch: int = 200
    init_random_frames: int = 1000
    updates_per_frame: float = 0.5
    batch_size: int = 64
    horizon: int = 3
    # TD-MPC2's heuristic for 200-step episodes: (T / 5 - 1) / (T / 5), clipped to [0.95, 0.995]
    discount: float = 0.975
    latent_dim: int = 64
    mlp_dim: int = 64
    num_q: int = 2
    lr: float = 3e-4
    # planner
    num_samples: int = 64
    num_elites: int = 8
    num_pi_trajs: int = 4
    iterations: int = 3
    # evaluation
    episode_steps: int = 200
    eval_every: int = 2000
    eval_episodes: int = 4
    target_return: float = -300.0
    confirm: bool = True
    seed: int = 0
    threads: int = 1
    out: str = "outputs"
    progress: bool = True


def make_env(num_envs: int, seed: int, planner: TdMpc2Planner, steps: int) -> TransformedEnv:
    """Pendulum with actions in [-1, 1], ``steps``-step episodes and the planner's warm start."""
    return TransformedEnv(
        PendulumEnv(batch_size=[num_envs], seed=seed),
        Compose(
            ActionScaling(),
            StepCounter(steps),
            InitTracker(),
            RewardSum(),
            planner.make_tensordict_primer(),
        ),
    )


def train(cfg: Config) -> dict:
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    obs_dim, act_dim = 3, 1  # PendulumEnv: [cos th, sin th, thdot] -> a torque
    wm = TdMpc2WorldModel(obs_dim, act_dim, latent_dim=cfg.latent_dim, mlp_dim=cfg.mlp_dim)
    pi = TdMpc2PolicyPrior(cfg.latent_dim, act_dim, mlp_dim=cfg.mlp_dim)
    q = TdMpc2QEnsemble(cfg.latent_dim, act_dim, mlp_dim=cfg.mlp_dim, num_q=cfg.num_q)
    loss = TdMpc2Loss(wm, pi, q, horizon=cfg.horizon, discount=cfg.discount)
    planner = TdMpc2Planner(
        wm,
        pi,
        q,
        horizon=cfg.horizon,
        discount=cfg.discount,
        num_samples=cfg.num_samples,
        num_elites=cfg.num_elites,
        num_pi_trajs=cfg.num_pi_trajs,
        iterations=cfg.iterations,
    )
    env = make_env(cfg.num_envs, cfg.seed, planner, cfg.episode_steps)
    eval_env = make_env(cfg.eval_episodes, cfg.seed + 10_000, planner, cfg.episode_steps)
    collector = SyncDataCollector(
        env,
        planner,
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.frames,
        init_random_frames=cfg.init_random_frames,
    )
    optim_steps = max(1, round(cfg.frames_per_batch * cfg.updates_per_frame))
    trainer = TdMpc2Trainer(
        collector=collector,
        total_frames=cfg.frames,
        loss_module=loss,
        planner=planner,
        batch_size=cfg.batch_size,
        buffer_size=cfg.frames,
        optim_steps_per_batch=optim_steps,
        lr=cfg.lr,
        progress_bar=cfg.progress,
        seed=cfg.seed,
    )
    history: dict = {"train": [], "eval": [], "solved_at": None}
    next_eval = cfg.eval_every

    def record(batch):  # post_steps_log: training episodes and periodic evaluations
        nonlocal next_eval
        frames = trainer.collected_frames
        history["train"] += episode_returns(batch, frames)
        if frames < next_eval:
            return None
        next_eval += cfg.eval_every
        ret = evaluate_confirmed(
            eval_env, planner, cfg.episode_steps, cfg.target_return, cfg.confirm
        )
        history["eval"].append((frames, ret))
        if cfg.progress:
            print(f"frames {frames}: evaluation return {ret:.1f}")
        if ret >= cfg.target_return and history["solved_at"] is None:
            history["solved_at"] = frames
            trainer.request_stop(f"evaluation return {ret:.1f} >= {cfg.target_return}")
        return {"eval_return": ret}

    trainer.register_op("post_steps_log", record)
    start = time.perf_counter()
    trainer.train()
    history["frames"] = trainer.collected_frames
    history["wall"] = time.perf_counter() - start
    history["final_return"] = evaluate(eval_env, planner, cfg.episode_steps)
    return history


def main(cfg: Config) -> dict:
    history = train(cfg)
    plot_curve(
        history, f"{cfg.out}/tdmpc2_pendulum.png", "TD-MPC2, Pendulum", target=cfg.target_return
    )
    report("tdmpc2_pendulum", history, cfg.target_return, history["final_return"])
    return history


if __name__ == "__main__":
    main(parse_config(Config, __doc__))
