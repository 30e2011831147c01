"""APPO on CartPole-v1: asynchronous PPO with V-trace, Sample Factory style.

Rollout worker processes step the envs while an inference server (a process of its own)
batches the policy calls of every env (``AsyncBatchedCollector``); the learner below trains on each batch
``[rows, T]`` as it arrives, so the data may be a few policy versions old. V-trace corrects
for it: advantages and critic targets come from ``ValueEstimators.VTrace`` (truncated
importance weights ``pi / mu`` against the behaviour log-probabilities stored with the data),
and the PPO ratio is taken against the behaviour policy (``ClipPPOLoss``). After each
optimisation phase the new weights go to the server (``update_policy_weights_``). Actor and
critic are separate 2x64 tanh MLPs (the networks of the Sample Factory comparison,
``benchmarks/async_throughput.py``).

``train(**config)`` returns frames, wall time, frames/s, the return curve
``[(frames, wall_s, avg_return)]`` (average of the last 100 training episodes, as Sample
Factory reports it), ``reached_target`` and the policy lag (min/mean/max over the run).

Measured on 2 cores shared with other jobs (load average about 5; defaults: one rollout process
of 16 envs, 2 gradient steps per 512 frames): ``pytest -m slow test/test_learning_async.py``,
seeds 0-2, reached an average training return of 475 after 107k, 115k and 72k frames in 6.0,
5.9 and 4.9 s (15-20k frames/s, learning included; policy lag mean 0.4-0.9, max 3 weight
updates). Before the throughput work (two rollout processes of 8 envs, 8 gradient steps per 512
frames, the learner waiting for the server to take the weights), on the quiet machine: 475 after
62k and 60k frames in 4.2 and 4.0 s (about 15k frames/s), 10.6k frames/s at load 1-5.
``benchmarks/async_throughput.py`` compares it with Sample Factory.

Usage: ``python examples/appo_cartpole.py [--total-frames N] [--seed S] [--collector
multi_async]``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch
from _common import (
    AsyncRunTracker,
    appo_loss,
    evaluate,
    make_async_collector,
    parse_config,
    plot_curve,
    ppo_phase,
    report,
    run_async,
)
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.envs import EnvBase, GymEnv, RewardSum, TransformedEnv
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator


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
    # Double-buffered groups (num_splits=2) were slower: 15.7-17.4k against 24.3-25.0k frames/s
    # (2026-11-27, quiet machine): a CartPole step costs far less than the inference round
    # trip, and two groups of 8 double the server's calls, each costing about as much as one
    # of 16. They pay where an env step costs more (appo_mujoco.py).
    num_workers: int = 1
    num_splits: int = 1
    collector: str = "async_batched"  # or "multi_async" (MultiaSyncDataCollector)
    policy_backend: str = "multiprocessing"  # the inference server: its own process, or "threading"
    max_policy_lag: int = -1  # rows older than this are dropped; -1: keep all
    # 2 passes over each batch in one minibatch of 512 (2 gradient steps per 512 frames; Sample
    # Factory's CartPole example makes 1): 4 epochs of 256 (8 steps) reached 475 in about 10%
    # fewer frames, but the learner then bounded the frames/s on 2 cores (measured, seeds 0-2:
    # 475 at 95-101k frames in 4.8-5.3 s, against 90-104k frames in 5.3-7.0 s with 3 epochs)
    epochs: int = 2
    reward_scale: float = 0.1  # rewards are multiplied by this in the losses (not the returns)
    minibatch_size: int = 512
    lr: float = 3e-3
    gamma: float = 0.99
    rho_thresh: float = 1.0
    c_thresh: float = 1.0
    clip_epsilon: float = 0.2
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


def make_env(num_envs: int = 1, env_name: str = "CartPole-v1") -> EnvBase:
    """One CartPole (``num_envs=1``), or a vector of them with ``RewardSum``.

    The single envs run on :class:`~torchrl.collectors.AsyncBatchedCollector`'s rollout workers
    bare, which lets a group's ``SerialEnv`` step them through its fast path for gymnasium envs
    (a transform on each env costs more than the step); the learner sums the rewards per env
    (:class:`AsyncRunTracker`). The vector (for the
    ``multi_async`` collector, whose batches do not name their envs) keeps ``RewardSum``.
    """
    if num_envs == 1:
        return GymEnv(env_name)
    return TransformedEnv(GymEnv(env_name, num_envs=num_envs), RewardSum())


def make_agent(n_obs: int, n_act: int, hidden: int) -> tuple[ProbabilisticActor, ValueOperator]:
    actor = ProbabilisticActor(
        TensorDictModule(
            MLP(n_obs, n_act, num_cells=[hidden, hidden], activation_class=nn.Tanh),
            in_keys=["observation"],
            out_keys=["logits"],
        ),
        in_keys=["logits"],
        distribution_class=OneHotCategorical,
        distribution_kwargs={"validate_args": False},
        return_log_prob=True,
    )
    critic = ValueOperator(
        MLP(n_obs, 1, num_cells=[hidden, hidden], activation_class=nn.Tanh),
        in_keys=["observation"],
    )
    return actor, critic


def train(**config) -> dict:
    """Trains APPO with the :class:`Config` fields given as keywords; returns the run's figures."""
    cfg = Config(**config)
    torch.manual_seed(cfg.seed)
    probe = make_env(1, cfg.env_name)
    n_obs = probe.observation_spec["observation"].shape[-1]
    n_act = probe.action_spec.shape[-1]
    probe.close()
    actor, critic = make_agent(n_obs, n_act, cfg.hidden)
    loss_fn, optim = appo_loss(
        actor, critic, lr=cfg.lr, gamma=cfg.gamma, clip_epsilon=cfg.clip_epsilon,
        entropy_coef=cfg.entropy_coef, rho_thresh=cfg.rho_thresh, c_thresh=cfg.c_thresh,
    )  # fmt: skip

    tracker = AsyncRunTracker(cfg.target_return, cfg.return_window)
    collector = make_async_collector(cfg, EnvMaker(cfg.env_name), actor)

    def learn(batch):
        batch.set(("next", "reward"), batch.get(("next", "reward")) * cfg.reward_scale)
        ppo_phase(loss_fn, optim, batch, cfg.epochs, cfg.minibatch_size, cfg.max_grad_norm)

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


class EnvMaker:
    """A picklable env constructor: ``EnvMaker(name)(n)`` builds ``n`` envs."""

    def __init__(self, env_name: str) -> None:
        self.env_name = env_name

    def __call__(self, num_envs: int = 1) -> EnvBase:
        return make_env(num_envs, self.env_name)


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # tiny networks: more threads only add overhead on small machines
    t0 = time.perf_counter()
    result = train(**dataclasses.asdict(cfg))
    reached = result["reached_target"]
    print(
        f"APPO CartPole: {result['frames']} frames in {result['wall_s']:.1f} s "
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
        result, f"{cfg.out}/appo_cartpole.png", "APPO, CartPole-v1", target=cfg.target_return
    )
    report("APPO CartPole-v1", result, cfg.target_return, result.get("final_return", float("nan")))


if __name__ == "__main__":
    main()
