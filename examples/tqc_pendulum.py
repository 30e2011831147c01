"""TQC on Pendulum-v1: SAC with quantile critics and a truncated mixture target.

Each of ``num_critics`` critics predicts ``n_quantiles`` return atoms; the Bellman target pools
the target critics' atoms at the next state and drops the ``top_quantiles_to_drop_per_net``
largest per critic before every critic fits the rest with the quantile Huber loss
(``TQCLoss``). The collector steps the env with the stochastic actor (uniform random actions for
the first ``init_random_frames``); each batch goes into the replay buffer and is followed by
``updates_per_frame`` gradient steps per collected frame (actor, critics and temperature share
one optimizer step); the target critics follow by Polyak averaging. Every ``eval_every`` frames
the deterministic policy is evaluated; training stops at the first evaluation that reaches
``target_return`` and, with ``confirm``, a second one on fresh episodes agrees.
``--env HalfCheetah-v5`` runs the same recipe on MuJoCo (no target score there; it needs
``pip install "gymnasium[mujoco]"``).

Usage: ``python examples/tqc_pendulum.py [--env NAME] [--frames N] [--seed S] [--out DIR]``.
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
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import Compose, DoubleToFloat, GymEnv, RewardSum, TransformedEnv
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import SoftUpdate
from torchrl.objectives.tqc import TQCLoss


@dataclass
class Config:
    env_name: str = "Pendulum-v1"
    frames: int = 30_000  # upper bound; training stops once solved
    frames_per_batch: int = 200
    updates_per_frame: float = 1.0
    init_random_frames: int = 1000
    buffer_size: int = 100_000
    batch_size: int = 256
    lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    hidden: int = 64
    num_critics: int = 2
    n_quantiles: int = 25
    top_quantiles_to_drop_per_net: int = 2
    eval_every: int = 1000
    eval_episodes: int = 5
    confirm: bool = True  # re-check a passing evaluation on fresh episodes before stopping
    final_eval_episodes: int = 10
    target_return: float = -200.0
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_env(name: str, num_envs: int | None = None) -> TransformedEnv:
    # MuJoCo observations are float64; the networks are float32.
    env = GymEnv(name) if num_envs is None else GymEnv(name, num_envs=num_envs)
    return TransformedEnv(env, Compose(DoubleToFloat(), RewardSum()))


def max_episode_steps(name: str) -> int:
    import gymnasium

    return int(gymnasium.spec(name).max_episode_steps or 1000)


def solve_target(cfg: Config) -> float | None:
    """``target_return`` on Pendulum; ``None`` elsewhere (MuJoCo tasks have no solved score)."""
    return cfg.target_return if cfg.env_name.startswith("Pendulum") else None


def make_agent(
    env: TransformedEnv, hidden: int, n_quantiles: int
) -> tuple[ProbabilisticActor, ValueOperator]:
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    actor_net = nn.Sequential(
        MLP(
            in_features=n_obs,
            out_features=2 * n_act,
            num_cells=[hidden, hidden],
            activation_class=nn.ReLU,
        ),
        NormalParamExtractor(),
    )
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=env.action_spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": env.action_spec.space.low, "high": env.action_spec.space.high},
    )
    # One output per quantile: "state_action_value" is [*B, n_quantiles].
    qvalue = ValueOperator(
        MLP(
            in_features=n_obs + n_act,
            out_features=n_quantiles,
            num_cells=[hidden, hidden],
            activation_class=nn.ReLU,
        ),
        in_keys=["observation", "action"],
    )
    return actor, qvalue


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = make_env(cfg.env_name)
    env.set_seed(cfg.seed)
    eval_env = make_env(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    episode_steps = max_episode_steps(cfg.env_name)
    target = solve_target(cfg)
    actor, qvalue = make_agent(env, cfg.hidden, cfg.n_quantiles)

    loss_fn = TQCLoss(
        actor,
        qvalue,
        num_qvalue_nets=cfg.num_critics,
        top_quantiles_to_drop_per_net=cfg.top_quantiles_to_drop_per_net,
    )
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    target_updater = SoftUpdate(loss_fn, tau=cfg.tau)
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr)

    collector = SyncDataCollector(
        env,
        actor,
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.frames,
        init_random_frames=cfg.init_random_frames,
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.buffer_size), batch_size=cfg.batch_size
    )

    history: dict = {"train": [], "eval": [], "solved_at": None, "eval_wall": 0.0}
    frames, next_eval = 0, cfg.eval_every
    start, cpu_start = time.perf_counter(), time.process_time()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="TQC")
    for batch in collector:
        n = batch.numel()
        frames += n
        buffer.extend(batch.reshape(-1))
        if frames >= cfg.init_random_frames:
            for _ in range(int(n * cfg.updates_per_frame)):
                losses = loss_fn(buffer.sample())
                loss = losses["loss_actor"] + losses["loss_qvalue"] + losses["loss_alpha"]
                optim.zero_grad()
                loss.backward()
                optim.step()
                target_updater.step()
            collector.update_policy_weights_()

        history["train"] += episode_returns(batch, frames)
        bar.update(n)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            eval_start = time.perf_counter()
            if target is None:
                ret = evaluate(eval_env, actor, episode_steps)
            else:
                ret = evaluate_confirmed(eval_env, actor, episode_steps, target, cfg.confirm)
            history["eval_wall"] += time.perf_counter() - eval_start
            history["eval"].append((frames, ret))
            bar.set_postfix(eval_return=f"{ret:.0f}")
            if target is not None and ret >= target:
                history["solved_at"] = frames
                break
    history["wall"] = time.perf_counter() - start
    history["cpu"] = time.process_time() - cpu_start
    history["frames"] = frames
    bar.close()
    collector.shutdown()
    eval_env.close()
    final_env = make_env(cfg.env_name, num_envs=cfg.final_eval_episodes)
    final_env.set_seed(cfg.seed + 20_000)
    history["final_return"] = evaluate(final_env, actor, max_steps=episode_steps)
    final_env.close()
    history["actor"] = actor
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    target = solve_target(cfg)
    plot_curve(history, f"{cfg.out}/tqc_pendulum.png", f"TQC, {cfg.env_name}", target)
    final = history["final_return"]
    report(f"TQC {cfg.env_name}", history, target, final, cfg.final_eval_episodes)


if __name__ == "__main__":
    main()
