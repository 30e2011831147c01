"""Several policies trained at once: one APPO learner per policy, each on its own envs.

One :class:`~torchrl.collectors.AsyncBatchedCollector` runs every env; ``policy_map`` gives each
env group to a policy, and each policy has its own inference server. Each batch the collector
yields holds one policy's data (``collector.last_policy_id``): this loop hands it to that
policy's learner (its own V-trace PPO loss and optimizer, here with its own learning rate),
then sends the new weights to that policy's server only
(``update_policy_weights_(policy_id=...)``). The policies share nothing but the processes.

``train(**config)`` returns one result per policy (frames, wall time, frames/s, the return
curve, when the average training return reached the target, policy lag), as
``examples/appo_cartpole.py`` does for one.

Run as a script, it then evaluates every policy deterministically on ``final_eval_episodes``
fresh episodes, plots each policy's running average training return to
``<out>/multi_policy_cartpole.png`` and prints the summary line of every example: the score is
the mean of the policies' final evaluations (each one is listed beside it).

Usage: ``python examples/multi_policy_cartpole.py [--total-frames N] [--seed S] [--out DIR]
[--no-progress]``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch
from _common import AsyncRunTracker, appo_loss, evaluate, parse_config, ppo_phase
from appo_cartpole import EnvMaker, make_agent
from tensordict import TensorDictBase
from torch import nn

from torchrl.collectors import AsyncBatchedCollector, policy_lag_stats
from torchrl.envs import GymEnv
from torchrl.objectives import ClipPPOLoss


@dataclass
class Config:
    env_name: str = "CartPole-v1"
    total_frames: int = 600_000  # all policies together; each stops once it reached the target
    lrs: str = "3e-3,1e-3"  # one learner per comma-separated learning rate
    envs_per_policy: int = 8
    frames_per_batch: int = 512  # per policy batch
    num_workers: int = 2
    num_splits: int = 2
    epochs: int = 4
    minibatch_size: int = 256
    reward_scale: float = 0.1
    gamma: float = 0.99
    clip_epsilon: float = 0.2
    max_grad_norm: float = 0.5
    hidden: int = 64
    target_return: float = 475.0
    return_window: int = 100
    seed: int = 0
    final_eval_episodes: int = 10
    out: str = "outputs"
    progress: bool = True


@dataclass
class Learner:
    """One policy's training state."""

    actor: nn.Module
    loss: ClipPPOLoss
    optim: torch.optim.Optimizer
    tracker: AsyncRunTracker
    done: bool = False


def make_learner(cfg: Config, lr: float, n_obs: int, n_act: int) -> Learner:
    actor, critic = make_agent(n_obs, n_act, cfg.hidden)
    loss, optim = appo_loss(actor, critic, lr=lr, gamma=cfg.gamma, clip_epsilon=cfg.clip_epsilon)
    return Learner(actor, loss, optim, AsyncRunTracker(cfg.target_return, cfg.return_window))


def learn(learner: Learner, batch: TensorDictBase, cfg: Config) -> None:
    """One optimisation phase of a policy on one of its batches."""
    batch.set(("next", "reward"), batch.get(("next", "reward")) * cfg.reward_scale)
    ppo_phase(learner.loss, learner.optim, batch, cfg.epochs, cfg.minibatch_size, cfg.max_grad_norm)


def train(**config) -> dict:
    """Trains one APPO learner per entry of ``lrs``; returns ``{"policies": [result, ...]}``."""
    cfg = Config(**config)
    torch.manual_seed(cfg.seed)
    make = EnvMaker(cfg.env_name)
    probe = make()
    n_obs = probe.observation_spec["observation"].shape[-1]
    n_act = probe.action_spec.shape[-1]
    probe.close()
    lrs = [float(x) for x in cfg.lrs.split(",")] if isinstance(cfg.lrs, str) else list(cfg.lrs)
    learners = [make_learner(cfg, lr, n_obs, n_act) for lr in lrs]
    n = len(learners)
    groups = cfg.num_workers * cfg.num_splits
    per_group = n * cfg.envs_per_policy // groups
    collector = AsyncBatchedCollector(
        [make] * (n * cfg.envs_per_policy),
        policy=[learner.actor for learner in learners],
        # group g (envs g*per_group...) runs policy g % n: every worker serves every policy
        policy_map=[(i // per_group) % n for i in range(n * cfg.envs_per_policy)],
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.total_frames,
        num_workers=cfg.num_workers,
        num_splits=cfg.num_splits,
        seed=cfg.seed,
    )
    try:
        for batch in collector:
            p = collector.last_policy_id
            learner = learners[p]
            version = collector.policy_versions[p]
            if learner.tracker.update(batch, version, policy_lag_stats):
                learner.done = True
            if all(learner.done for learner in learners):
                break
            learn(learner, batch, cfg)
            collector.update_policy_weights_(policy_id=p)
            if cfg.progress and learner.tracker.curve and batch.batch_size.numel():
                f, w, r = learner.tracker.curve[-1]
                if f % 20_480 < cfg.frames_per_batch:
                    print(f"policy {p}: frames {f:>8d}  {w:6.1f} s  avg return {r:6.1f}")
    finally:
        collector.shutdown()
    results = []
    for lr, learner in zip(lrs, learners, strict=True):
        result = learner.tracker.result(learner.tracker.elapsed())
        for key in ("train", "eval", "wall", "solved_at"):
            result.pop(key)
        result["lr"] = lr
        result["actor"] = learner.actor
        results.append(result)
    return {"policies": results, "config": dataclasses.asdict(cfg)}


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    out = train(**dataclasses.asdict(cfg))
    wall = time.perf_counter() - t0
    for p, result in enumerate(out["policies"]):
        eval_env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
        eval_env.set_seed(cfg.seed + 20_000)
        result["final_return"] = evaluate(eval_env, result["actor"], max_steps=500)
        eval_env.close()
        reached = result["reached_target"]
        print(
            f"policy {p} (lr {result['lr']:g}): {result['frames']} frames; average training "
            f"return {result['final_avg_return']}; target {cfg.target_return:g} "
            + (f"reached at {reached['frames']} frames" if reached else "not reached")
            + f"; policy lag {result['policy_lag']}"
        )
    print(f"process {time.perf_counter() - t0:.1f} s")
    plot(out["policies"], cfg, f"{cfg.out}/multi_policy_cartpole.png")
    finals = [r["final_return"] for r in out["policies"]]
    each = ", ".join(
        f"policy {p} (lr {r['lr']:g}) {r['final_return']:.1f}"
        for p, r in enumerate(out["policies"])
    )
    frames = sum(r["frames"] for r in out["policies"])
    print(
        f"Multi-policy APPO CartPole-v1: final deterministic evaluation return "
        f"{sum(finals) / len(finals):.1f} (mean of {len(finals)} policies: {each}; "
        f"{cfg.final_eval_episodes} episodes each); {frames} frames in {wall:.1f} s"
    )


def plot(results: list[dict], cfg: Config, path: str) -> None:
    """Each policy's running average training return vs its own frames, one line per policy."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib is not installed, no plot: pip install "torchrl[plot]"')
        return
    import os

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for p, result in enumerate(results):
        if result["return_curve"]:
            frames, _, avg = zip(*result["return_curve"])
            ax.plot(frames, avg, "-", label=f"policy {p} (lr {result['lr']:g})")
    ax.axhline(cfg.target_return, color="gray", linestyle="--", linewidth=1, label="target")
    ax.set_xlabel("frames (of that policy)")
    ax.set_ylabel(f"average training return (last {cfg.return_window})")
    ax.set_title("Two APPO policies at once, CartPole-v1")
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"learning curve written to {path}")


if __name__ == "__main__":
    main()
