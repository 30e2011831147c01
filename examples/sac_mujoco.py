"""SAC on a gymnasium MuJoCo task (HalfCheetah-v5 by default, ``--env-name Hopper-v5`` too).

The usual MuJoCo recipe: a tanh-Gaussian actor and twin Q critics of two 256-unit layers,
Adam at 3e-4, batches of 256, Polyak averaging with ``tau=0.005``, a learned temperature and
``init_random_frames`` uniformly random actions before learning starts. The collector steps
one env with the stochastic actor and yields ``frames_per_batch`` transitions; they go into the
replay buffer and are followed by ``updates_per_frame`` gradient steps per collected frame.
Every ``eval_every`` frames the deterministic policy (the squashed mean) plays
``eval_episodes`` full episodes. Nothing stops training early: MuJoCo tasks have no "solved"
score.

Needs ``mujoco`` (``pip install "gymnasium[mujoco]"``). A gradient step costs about 13 ms of
CPU time on one core, so 30k frames take 5-6 min; by then HalfCheetah-v5 has gone from about
-300 (random play) to a deterministic return of 470 (seed 0, still climbing) or 2500 (seed 1).

Usage: ``python examples/sac_mujoco.py [--env-name Hopper-v5] [--frames N] [--seed S]
[--out DIR]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import sac_pendulum  # its make_agent: the same SAC networks, wider here
import torch
from _common import episode_returns, evaluate, parse_config, plot_curve, report
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import Compose, DoubleToFloat, GymEnv, RewardSum, TransformedEnv
from torchrl.objectives import SACLoss, SoftUpdate


@dataclass
class Config:
    env_name: str = "HalfCheetah-v5"
    frames: int = 100_000
    frames_per_batch: int = 1000
    updates_per_frame: float = 1.0
    init_random_frames: int = 5000
    buffer_size: int = 1_000_000
    batch_size: int = 256
    lr: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    hidden: int = 256
    max_episode_steps: int = 1000  # gymnasium's time limit for the MuJoCo tasks
    eval_every: int = 5000
    eval_episodes: int = 5
    final_eval_episodes: int = 10
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_env(name: str, num_envs: int | None = None) -> TransformedEnv:
    # MuJoCo observations are float64; the networks are float32.
    env = GymEnv(name) if num_envs is None else GymEnv(name, num_envs=num_envs)
    return TransformedEnv(env, Compose(DoubleToFloat(), RewardSum()))


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = make_env(cfg.env_name)
    env.set_seed(cfg.seed)
    eval_env = make_env(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    actor, qvalue = sac_pendulum.make_agent(env, cfg.hidden)

    loss_fn = SACLoss(actor, qvalue, num_qvalue_nets=2, loss_function="l2")
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
        storage=LazyTensorStorage(min(cfg.buffer_size, cfg.frames)), batch_size=cfg.batch_size
    )

    history: dict = {"train": [], "eval": []}
    frames, next_eval = 0, cfg.eval_every
    start = time.perf_counter()
    bar = tqdm(
        total=cfg.frames, unit="frames", disable=not cfg.progress, desc=f"SAC {cfg.env_name}"
    )
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
            ret = evaluate(eval_env, actor, max_steps=cfg.max_episode_steps)
            history["eval"].append((frames, ret))
            bar.set_postfix(eval_return=f"{ret:.0f}")
    history["wall"] = time.perf_counter() - start
    history["frames"] = frames
    bar.close()
    collector.shutdown()
    eval_env.close()
    final_env = make_env(cfg.env_name, num_envs=cfg.final_eval_episodes)
    final_env.set_seed(cfg.seed + 20_000)
    history["final_return"] = evaluate(final_env, actor, max_steps=cfg.max_episode_steps)
    final_env.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks gain little from more threads; runs share cores
    history = train(cfg)
    plot_curve(history, f"{cfg.out}/sac_mujoco.png", f"SAC, {cfg.env_name}")
    report(
        f"SAC {cfg.env_name}",
        history,
        None,
        history["final_return"],
        episodes=cfg.final_eval_episodes,
    )


if __name__ == "__main__":
    main()
