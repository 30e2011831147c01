"""IMPALA on CartPole-v1: an actor-critic learner on asynchronous data, corrected by V-trace.

Rollout worker processes step the envs while an inference server (a process of its own)
batches the policy calls of every env (``AsyncBatchedCollector``); the learner takes each batch ``[rows, T]``
as it arrives (data a few policy versions old) and makes ``updates_per_batch`` gradient steps,
each on a group of whole rows: ``A2CLoss`` with ``ValueEstimators.VTrace`` recomputes the
V-trace targets with the current critic and the current policy, then the policy gradient
``rho_t log pi(a_t|s_t) (r_t + gamma v_{t+1} - V(s_t))`` and the critic regression on ``v_t``
(Espeholt et al., 2018). After each batch the new weights go to the server. Actor and critic are
separate 2x64 tanh MLPs.

``train(**config)`` returns frames, wall time, frames/s, the return curve
``[(frames, wall_s, avg_return)]`` (average of the last 100 training episodes, as Sample
Factory reports it), ``reached_target`` and the policy lag (min/mean/max over the run).

Measured with one rollout process of 16 envs (the default now; 2 cores shared with other jobs,
load average about 5): ``pytest -m slow test/test_learning_async.py``, seeds 0-2, reached 475
after 100k, 99k and 117k frames in 7.7, 8.8 and 10.5 s (11-13k frames/s; policy lag mean 0.6,
max 2). Earlier, with two rollout processes of 8 envs (``train(seed=s)``, seeds 0-2, on a loaded
2-core machine): the average of the last 100 training episodes reached 475 after 98k, 94k and
91k frames (policy lag mean 0.7-0.85, max 4-11 versions); with 2 updates per batch, 114k, 116k and 148k frames. On the
quiet machine, with the envs bare on the workers and the server in its own process, seed 0
reached 475 after 103k frames in 11.7 s (8.8k frames/s); ``pytest -m slow
test/test_learning_async.py`` takes 6-7 s per seed.

Usage: ``python examples/impala_cartpole.py [--total-frames N] [--seed S] [--collector
multi_async]``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch
from _common import (
    AsyncRunTracker,
    evaluate,
    make_async_collector,
    optimizer_step,
    parse_config,
    plot_curve,
    report,
    run_async,
    total_loss,
)
from appo_cartpole import EnvMaker, make_agent, make_env

from torchrl.envs import GymEnv
from torchrl.objectives import A2CLoss
from torchrl.objectives.utils import ValueEstimators


@dataclass
class Config:
    env_name: str = "CartPole-v1"
    total_frames: int = 500_000  # upper bound; with stop_at_target, training stops once solved
    num_envs: int = 16
    rollout_length: int = 32  # T: steps of each trajectory chunk
    frames_per_batch: int = 512
    # One rollout process for the 16 envs, the inference server in a process of its own: on 2
    # cores it beat two rollout processes of 8 envs each (measured with
    # benchmarks/async_throughput.py's setup: CartPole 11.9k against 8.7-9.1k frames/s; the
    # collection's CPU time per frame 35 against 59 us for CartPole, 85 against 115 us for
    # HalfCheetah), because each server batch and each worker step then serves 16 envs at once.
    # Double-buffered groups (num_splits=2) are slower on CartPole, whose steps cost far less
    # than the inference round trip (see appo_cartpole.py).
    num_workers: int = 1
    num_splits: int = 1
    policy_backend: str = "multiprocessing"  # the inference server: its own process, or "threading"
    collector: str = "async_batched"  # or "multi_async" (MultiaSyncDataCollector)
    max_policy_lag: int = -1  # rows older than this are dropped; -1: keep all
    updates_per_batch: int = 4  # gradient steps per batch, each on a group of whole rows
    reward_scale: float = 0.1  # rewards are multiplied by this in the losses (not the returns)
    lr: float = 1e-3
    gamma: float = 0.99
    rho_thresh: float = 1.0
    c_thresh: float = 1.0
    entropy_coef: float = 0.0
    max_grad_norm: float = 0.5
    hidden: int = 64
    target_return: float = 475.0
    stop_at_target: bool = True
    return_window: int = 100
    final_eval_episodes: int = 10
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def train(**config) -> dict:
    """Trains IMPALA with the :class:`Config` fields given as keywords; returns the run's figures."""
    cfg = Config(**config)
    torch.manual_seed(cfg.seed)
    probe = make_env(1, cfg.env_name)
    n_obs = probe.observation_spec["observation"].shape[-1]
    n_act = probe.action_spec.shape[-1]
    probe.close()
    actor, critic = make_agent(n_obs, n_act, cfg.hidden)
    loss_fn = A2CLoss(
        actor,
        critic,
        entropy_coef=cfg.entropy_coef,
        entropy_bonus=cfg.entropy_coef > 0,
        loss_critic_type="l2",
        critic_coef=0.5,
    )
    loss_fn.make_value_estimator(
        ValueEstimators.VTrace, gamma=cfg.gamma, rho_thresh=cfg.rho_thresh, c_thresh=cfg.c_thresh
    )
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr, fused=True)

    tracker = AsyncRunTracker(cfg.target_return, cfg.return_window)
    collector = make_async_collector(cfg, EnvMaker(cfg.env_name), actor)

    def learn(batch):
        batch.set(("next", "reward"), batch.get(("next", "reward")) * cfg.reward_scale)
        rows = batch.shape[0]
        for idx in torch.randperm(rows).chunk(min(cfg.updates_per_batch, rows)):
            # V-trace with the current networks at each update
            optimizer_step(loss_fn, optim, total_loss(loss_fn(batch[idx])), cfg.max_grad_norm)

    wall = run_async(
        collector, tracker, learn, stop_at_target=cfg.stop_at_target, progress=cfg.progress
    )
    result = tracker.result(wall)
    result["config"] = dataclasses.asdict(cfg)
    if cfg.final_eval_episodes:
        eval_env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
        eval_env.set_seed(cfg.seed + 20_000)
        result["final_return"] = evaluate(eval_env, actor, max_steps=500)
        eval_env.close()
    return result


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # tiny networks: more threads only add overhead on small machines
    t0 = time.perf_counter()
    result = train(**dataclasses.asdict(cfg))
    reached = result["reached_target"]
    print(
        f"IMPALA CartPole: {result['frames']} frames in {result['wall_s']:.1f} s "
        f"({result['frames_per_s']:.0f} frames/s); average training return "
        f"{result['final_avg_return']}; target {cfg.target_return:g} "
        + (
            f"reached at {reached['frames']} frames, {reached['wall_s']:.1f} s"
            if reached
            else "not reached"
        )
        + f"; policy lag {result['policy_lag']}; process {time.perf_counter() - t0:.1f} s"
    )
    plot_curve(
        result, f"{cfg.out}/impala_cartpole.png", "IMPALA, CartPole-v1", target=cfg.target_return
    )
    report(
        "IMPALA CartPole-v1", result, cfg.target_return, result.get("final_return", float("nan"))
    )


if __name__ == "__main__":
    main()
