"""Population-based training of PPO on CartPole-v1: the learning rate and entropy coefficient.

Four PPO members (the ``Trainer`` of ``ppo_cartpole_trainer.py``: collector, GAE, clipped PPO
loss, Adam) start from learning rates and entropy coefficients drawn log-uniformly from wide
ranges, most of them poor. Every ``round_frames`` frames the population is ranked by the mean
return of the training episodes that ended in the round; the bottom quarter copies a top
member (weights, Adam state, hyper-parameters) and perturbs its hyper-parameters by 0.8 or
1.2 (or resamples them). At the end, the best member's policy is evaluated deterministically.
With ``--compare-fixed``, every initial member is also trained alone with its fixed
hyper-parameters for the same frames, and evaluated the same way.

Usage: ``python examples/pbt_cartpole.py [--rounds N] [--backend serial|process|ray]
[--compare-fixed true] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
from _common import evaluate, parse_config
from ppo_cartpole import make_agent
from tensordict import TensorDictBase

from torchrl.collectors import SyncDataCollector
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE
from torchrl.trainers import BatchSubSampler, Trainer, UpdateWeights
from torchrl.trainers.pbt import ContinuousParam, PopulationBasedTraining, TrainerMember


@dataclass
class Config:
    env_name: str = "CartPole-v1"
    population: int = 4
    rounds: int = 8
    round_frames: int = 2048  # frames each member trains between two rankings
    num_envs: int = 8
    steps_per_env: int = 32
    optim_steps_per_batch: int = 10
    minibatch_size: int = 256
    lr_low: float = 1e-5
    lr_high: float = 1e-2
    entropy_low: float = 1e-4
    entropy_high: float = 0.1
    truncation: float = 0.25
    resample_probability: float = 0.25
    backend: str = "process"  # serial | process | ray
    gamma: float = 0.98
    gae_lambda: float = 0.8
    hidden: int = 64
    final_eval_episodes: int = 10
    compare_fixed: bool = False  # also train every initial member without PBT
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_member(hparams: dict[str, Any], seed: int, *, cfg: Config) -> TrainerMember:
    """One PPO ``Trainer`` wrapped as a PBT member; its score is the mean return of the
    training episodes that ended during the round (the previous score when none did)."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    env = TransformedEnv(GymEnv(cfg.env_name, num_envs=cfg.num_envs), RewardSum())
    env.set_seed(seed)
    actor, critic = make_agent(env, cfg.hidden)
    total = cfg.rounds * cfg.round_frames
    collector = SyncDataCollector(
        env, actor, frames_per_batch=cfg.num_envs * cfg.steps_per_env, total_frames=total
    )
    advantage = GAE(gamma=cfg.gamma, lmbda=cfg.gae_lambda, value_network=critic)
    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=0.2,
        entropy_bonus=True,
        entropy_coef=hparams["entropy_coef"],
        normalize_advantage=True,
        loss_critic_type="l2",
        critic_coef=0.5,
    )
    trainer = Trainer(
        collector=collector,
        total_frames=total,
        optim_steps_per_batch=cfg.optim_steps_per_batch,
        loss_module=loss_fn,
        optimizer=torch.optim.Adam(loss_fn.parameters(), lr=hparams["lr"]),
        clip_norm=0.5,
        progress_bar=False,
        seed=seed,
    )

    def compute_advantage(batch: TensorDictBase) -> TensorDictBase:
        with torch.no_grad():
            advantage(batch)
        return batch.reshape(-1)

    finished: list[torch.Tensor] = []  # returns of the episodes ended in this round
    last_score = [0.0]

    def record_returns(batch: TensorDictBase) -> None:
        finished.append(batch["next", "episode_reward"][batch["next", "done"]])

    def round_score(trainer: Trainer) -> float:
        returns = torch.cat(finished) if finished else torch.zeros(0)
        finished.clear()
        if returns.numel():
            last_score[0] = returns.mean().item()
        return last_score[0]

    trainer.register_op("batch_process", compute_advantage)
    trainer.register_op("pre_steps_log", record_returns)
    BatchSubSampler(batch_size=cfg.minibatch_size).register(trainer)
    UpdateWeights(collector, update_weights_interval=1).register(trainer)
    return TrainerMember(trainer, score_fn=round_score)


def _evaluate_member(member: TrainerMember, cfg: Config) -> float:
    env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    env.set_seed(cfg.seed + 20_000)
    try:
        return evaluate(env, member.trainer.collector.policy, max_steps=500)
    finally:
        env.close()


def train(**config: Any) -> dict:
    """Runs PBT (and, with ``compare_fixed``, the fixed-hyper-parameter runs).

    Returns:
        ``history`` (one dict per member and round), ``best`` (its record), ``final_return``
        (deterministic evaluation of the best member), ``fixed`` (per initial member: its
        hyper-parameters and final evaluation, with ``compare_fixed``), ``frames`` per member,
        ``wall`` seconds.
    """
    cfg = Config(**config)
    factory = functools.partial(make_member, cfg=cfg)
    space = {
        "lr": ContinuousParam(cfg.lr_low, cfg.lr_high, log=True),
        "entropy_coef": ContinuousParam(cfg.entropy_low, cfg.entropy_high, log=True),
    }
    start = time.perf_counter()
    with PopulationBasedTraining(
        factory,
        space,
        population_size=cfg.population,
        ready_interval=cfg.round_frames,
        truncation=cfg.truncation,
        resample_probability=cfg.resample_probability,
        seed=cfg.seed,
        backend=cfg.backend,  # type: ignore[arg-type]
        ray_init_config={"num_cpus": 2},
    ) as pbt:
        initial = [dict(h) for h in pbt.hparams]
        for _ in range(cfg.rounds):
            records = pbt.step()
            if cfg.progress:
                scores = ", ".join(f"{r.score:6.1f}" for r in records)
                print(f"round {records[0].round}: training returns [{scores}]")
        best = pbt.best
        assert best is not None
        best_state = pbt.member_state_dict(best.member)
        history = [asdict(r) for r in pbt.history]
    wall = time.perf_counter() - start
    # a local copy of the best member, for the evaluation
    member = factory(dict(best.hparams), cfg.seed + best.member)
    member.load_state_dict(best_state)
    final_return = _evaluate_member(member, cfg)
    member.close()
    out: dict[str, Any] = {
        "history": history,
        "best": asdict(best),
        "final_return": final_return,
        "frames": cfg.rounds * cfg.round_frames,
        "wall": wall,
        "fixed": None,
    }
    if cfg.compare_fixed:
        fixed = []
        for index, hparams in enumerate(initial):
            member = factory(dict(hparams), cfg.seed + index)
            member.set_hparams(hparams)
            for _ in range(cfg.rounds):
                member.train(cfg.round_frames)
            fixed.append({"hparams": hparams, "final_return": _evaluate_member(member, cfg)})
            member.close()
        out["fixed"] = fixed
    return out


def plot(result: dict, path: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib is not installed, no plot: pip install "torchrl[plot]"')
        return None
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig, (ax_score, ax_lr) = plt.subplots(1, 2, figsize=(10, 3.5))
    members = sorted({h["member"] for h in result["history"]})
    for m in members:
        rows = [h for h in result["history"] if h["member"] == m]
        ax_score.plot([h["round"] for h in rows], [h["score"] for h in rows], "o-", label=f"{m}")
        ax_lr.plot([h["round"] for h in rows], [h["hparams"]["lr"] for h in rows], "o-")
    ax_score.set_xlabel("round")
    ax_score.set_ylabel("training episode return")
    ax_score.legend(title="member", fontsize="small")
    ax_lr.set_xlabel("round")
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_yscale("log")
    fig.suptitle("PBT of PPO on CartPole-v1")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"plot written to {path}")
    return path


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    result = train(**asdict(cfg))
    plot(result, os.path.join(cfg.out, "pbt_cartpole.png"))
    best = result["best"]
    hp = ", ".join(f"{k}={v:.3g}" for k, v in best["hparams"].items())
    print(
        f"PBT PPO CartPole-v1: best member {best['member']} ({hp}), final deterministic "
        f"evaluation return {result['final_return']:.1f}; {cfg.population} members x "
        f"{result['frames']} frames in {result['wall']:.1f} s ({cfg.backend})"
    )
    for index, run in enumerate(result["fixed"] or []):
        hp = ", ".join(f"{k}={v:.3g}" for k, v in run["hparams"].items())
        print(f"  fixed member {index} ({hp}): final return {run['final_return']:.1f}")


if __name__ == "__main__":
    main()
