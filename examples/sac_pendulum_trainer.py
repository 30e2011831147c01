"""SAC on Pendulum-v1 with the ``Trainer``: the loop of ``sac_pendulum.py`` as hooks.

The same networks and SAC loss; the ``Trainer`` runs the loop. ``ReplayBufferTrainer``
stores every batch and samples the optimization batches, the optimizer sums the ``loss_*``
terms, ``SoftUpdate`` runs after each optimizer step, ``UpdateWeights`` pushes the weights to
the collector, ``Recorder`` evaluates the deterministic policy periodically and
``EarlyStopping`` ends training once it reaches ``target_return``. Logs go to a CSV logger.

Usage: ``python examples/sac_pendulum_trainer.py [--frames N] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from _common import evaluate, parse_config, plot_curve, report
from sac_pendulum import make_agent
from tensordict import TensorDictBase

from torchrl.collectors import SyncDataCollector
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
from torchrl.envs import GymEnv
from torchrl.objectives import SACLoss, SoftUpdate
from torchrl.trainers import (
    CSVLogger,
    EarlyStopping,
    LogReward,
    Recorder,
    ReplayBufferTrainer,
    Trainer,
    UpdateWeights,
)


@dataclass
class Config:
    env_name: str = "Pendulum-v1"
    frames: int = 30_000  # upper bound; training stops once solved
    frames_per_batch: int = 200
    init_random_frames: int = 1000
    buffer_size: int = 100_000
    batch_size: int = 256
    lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    hidden: int = 64
    eval_every: int = 1000
    eval_episodes: int = 5
    final_eval_episodes: int = 10
    target_return: float = -200.0
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def train(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    env = GymEnv(cfg.env_name)
    env.set_seed(cfg.seed)
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    actor, qvalue = make_agent(env, cfg.hidden)
    loss_fn = SACLoss(actor, qvalue, num_qvalue_nets=2, loss_function="l2")
    loss_fn.make_value_estimator(gamma=cfg.gamma)
    collector = SyncDataCollector(
        env,
        actor,
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.frames,
        init_random_frames=cfg.init_random_frames,
    )
    trainer = Trainer(
        collector=collector,
        total_frames=cfg.frames,
        # One gradient step per collected frame.
        optim_steps_per_batch=cfg.frames_per_batch,
        loss_module=loss_fn,
        optimizer=torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr),
        logger=CSVLogger(exp_name="sac_pendulum_trainer", log_dir=cfg.out),
        clip_norm=None,
        progress_bar=cfg.progress,
        seed=cfg.seed,
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.buffer_size), batch_size=cfg.batch_size
    )
    ReplayBufferTrainer(buffer, batch_size=cfg.batch_size).register(trainer)
    target_updater = SoftUpdate(loss_fn, tau=cfg.tau)
    trainer.register_op("post_optim", target_updater.step)
    UpdateWeights(collector, update_weights_interval=1).register(trainer)
    LogReward(log_pbar=True).register(trainer)

    history: dict = {"train": [], "eval": [], "solved_at": None}
    # Pendulum episodes last 200 steps: each evaluation runs one episode per eval env.
    recorder = Recorder(
        record_interval=max(cfg.eval_every // cfg.frames_per_batch, 1),
        record_frames=200,
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
    history["final_return"] = evaluate(final_env, actor, max_steps=200)
    final_env.close()
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    plot_curve(
        history,
        f"{cfg.out}/sac_pendulum_trainer.png",
        "SAC (Trainer), Pendulum-v1",
        target=cfg.target_return,
    )
    report("SAC (Trainer) Pendulum-v1", history, cfg.target_return, history["final_return"])


if __name__ == "__main__":
    main()
