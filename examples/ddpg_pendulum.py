"""DDPG on Pendulum-v1: a deterministic actor with Gaussian exploration noise and a Q critic.

The collector steps the env with the actor plus additive Gaussian noise (uniform random actions
for the first ``init_random_frames``); each batch goes into the replay buffer and is followed by
``updates_per_frame`` gradient steps per collected frame: the critic regresses on the one-step
TD target of the target networks, the actor climbs the critic; both targets follow by Polyak
averaging. Every ``eval_every`` frames the noiseless actor is evaluated; training stops at the
first evaluation that reaches ``target_return`` and, with ``confirm`` (the default), a second one
on fresh episodes agrees: five episodes can pass by luck while other starting states still fail.

Usage: ``python examples/ddpg_pendulum.py [--frames N] [--seed S] [--out DIR]``.
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
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from tqdm import tqdm

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import GymEnv, RewardSum, TransformedEnv
from torchrl.modules import MLP, AdditiveGaussianModule, TanhModule, ValueOperator
from torchrl.objectives import DDPGLoss, SoftUpdate


@dataclass
class Config:
    env_name: str = "Pendulum-v1"
    frames: int = 30_000  # upper bound; training stops once solved
    frames_per_batch: int = 200
    updates_per_frame: float = 1.0
    init_random_frames: int = 1000
    buffer_size: int = 100_000
    batch_size: int = 256
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    noise_sigma: float = 0.2  # in action units (Pendulum's torque lies in [-2, 2])
    hidden: int = 64
    eval_every: int = 1000
    eval_episodes: int = 5
    confirm: bool = True  # re-check a passing evaluation on fresh episodes before stopping
    final_eval_episodes: int = 10
    target_return: float = -200.0
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def make_agent(env: GymEnv, hidden: int) -> tuple[TensorDictSequential, ValueOperator]:
    """A deterministic actor squashed into the action bounds, and a Q(s, a) critic."""
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    actor = TensorDictSequential(
        TensorDictModule(
            MLP(n_obs, n_act, num_cells=[hidden, hidden], activation_class=nn.ReLU),
            in_keys=["observation"],
            out_keys=["action"],
        ),
        TanhModule(["action"], spec=env.action_spec),
    )
    critic = ValueOperator(
        MLP(n_obs + n_act, 1, num_cells=[hidden, hidden], activation_class=nn.ReLU),
        in_keys=["observation", "action"],
    )
    return actor, critic


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = TransformedEnv(GymEnv(cfg.env_name), RewardSum())
    env.set_seed(cfg.seed)
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    actor, critic = make_agent(env, cfg.hidden)
    noise = AdditiveGaussianModule(
        env.action_spec, sigma_init=cfg.noise_sigma, sigma_end=cfg.noise_sigma
    )
    exploration_policy = TensorDictSequential(actor, noise)

    loss_fn = DDPGLoss(actor, critic, delay_actor=True, delay_value=True, loss_function="l2")
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    target_updater = SoftUpdate(loss_fn, tau=cfg.tau)
    # The actor loss sees the critic's parameters detached, so one backward over the sum
    # trains each network on its own loss.
    optim = torch.optim.Adam(
        [
            {"params": actor.parameters(), "lr": cfg.actor_lr},
            {"params": critic.parameters(), "lr": cfg.critic_lr},
        ]
    )

    collector = SyncDataCollector(
        env,
        exploration_policy,
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.frames,
        init_random_frames=cfg.init_random_frames,
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.buffer_size), batch_size=cfg.batch_size
    )

    history: dict = {"train": [], "eval": [], "solved_at": None}
    frames, next_eval = 0, cfg.eval_every
    start, cpu_start = time.perf_counter(), time.process_time()
    bar = tqdm(total=cfg.frames, unit="frames", disable=not cfg.progress, desc="DDPG Pendulum")
    for batch in collector:
        n = batch.numel()
        frames += n
        buffer.extend(batch.reshape(-1))
        if frames >= cfg.init_random_frames:
            for _ in range(int(n * cfg.updates_per_frame)):
                losses = loss_fn(buffer.sample())
                optim.zero_grad()
                (losses["loss_actor"] + losses["loss_value"]).backward()
                optim.step()
                target_updater.step()
            collector.update_policy_weights_()

        history["train"] += episode_returns(batch, frames)
        bar.update(n)
        if frames >= next_eval:
            next_eval += cfg.eval_every
            ret = evaluate_confirmed(eval_env, actor, 200, cfg.target_return, cfg.confirm)
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
    history["final_return"] = evaluate(final_env, actor, max_steps=200)
    final_env.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    plot_curve(
        history, f"{cfg.out}/ddpg_pendulum.png", "DDPG, Pendulum-v1", target=cfg.target_return
    )
    report("DDPG Pendulum-v1", history, cfg.target_return, history["final_return"])


if __name__ == "__main__":
    main()
