"""PPO on CartPole-v1 built from a config file: ``examples/configs/ppo_cartpole.yaml``.

The run of ``ppo_cartpole_trainer.py`` (same networks, GAE, clipped PPO loss, evaluation and
early stopping), but every part is described by a ``PPOTrainerConfig`` read from YAML and built
by ``torchrl.trainers.algorithms.configs.build`` into a ``PPOTrainer``.

Usage: ``python examples/ppo_cartpole_hydra.py [key=value ...]``, e.g. ``optim.lr=1e-3
env.num_envs=4 trainer.seed=1``. With ``hydra-core`` installed, Hydra reads the command line
(``--multirun`` sweeps, ``--cfg job`` and the rest work); without it, ``key=value`` overrides
are still understood. ``--out DIR`` (logs and plot) and ``--no-progress`` are accepted too.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from _common import evaluate, plot_curve, report

from torchrl.envs import GymEnv
from torchrl.trainers.algorithms.configs import PPOTrainerConfig, build, run_with_config

CONFIG = Path(__file__).resolve().parent / "configs" / "ppo_cartpole.yaml"
FINAL_EVAL_EPISODES = 10


def train(cfg: PPOTrainerConfig) -> dict:
    built = build(cfg)
    history: dict = {"train": [], "eval": built.eval_history, "solved_at": None}
    start = time.perf_counter()
    built.trainer.train()
    history["wall"] = time.perf_counter() - start
    history["frames"] = built.trainer.collected_frames
    if built.stopper is not None and built.stopper.stopped:
        history["solved_at"] = built.trainer.collected_frames
    if built.eval_env is not None:
        built.eval_env.close()
    final_env = GymEnv(cfg.env.name, num_envs=FINAL_EVAL_EPISODES)
    final_env.set_seed(cfg.trainer.seed + 20_000)
    history["final_return"] = evaluate(final_env, built.actor, max_steps=cfg.eval.max_steps)
    final_env.close()
    return history


def main(cfg: PPOTrainerConfig) -> None:
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    target = cfg.eval.target_return
    plot_curve(
        history, f"{cfg.logger.log_dir}/ppo_cartpole_hydra.png", "PPO (config), CartPole-v1", target
    )
    report("PPO (config) CartPole-v1", history, target, history["final_return"])


def split_script_flags(argv: list[str]) -> list[str]:
    """Turns ``--out DIR`` and ``--no-progress`` into overrides; returns the other arguments."""
    args, out = list(argv), []
    if "--no-progress" in args:
        args.remove("--no-progress")
        out.append("trainer.progress_bar=false")
    if "--out" in args:
        i = args.index("--out")
        out.append(f"logger.log_dir={args[i + 1]}")
        del args[i : i + 2]
    return args + out


if __name__ == "__main__":
    sys.argv = [sys.argv[0], *split_script_flags(sys.argv[1:])]
    run_with_config(main, PPOTrainerConfig, CONFIG)
