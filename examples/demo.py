"""The `make demo` entry point: PPO learns CartPole-v1 in seconds on a small CPU.

It runs the training loop of ``examples/ppo_cartpole.py`` (a collector over 8 CartPoles, GAE, the
clipped PPO loss, Adam) with a progress bar, evaluates the greedy policy every 2048 frames, stops
once an evaluation reaches 475 (CartPole-v1's "solved" score; 500 is the maximum) and a second
one on fresh episodes agrees, writes the learning curve to ``outputs/demo_ppo_cartpole.png`` and ends with a final evaluation line.

Usage: ``python examples/demo.py [--frames N] [--seed S] [--out DIR]``
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import parse_config, plot_curve, report  # noqa: E402
from ppo_cartpole import Config, train  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_config(Config, __doc__, argv)
    # Small networks on a small machine: extra intra-op threads only add synchronisation.
    torch.set_num_threads(1)
    print(
        f"Training PPO on {cfg.env_name}: {cfg.num_envs} envs x {cfg.steps_per_env} steps per "
        f"batch, {cfg.epochs} epochs, lr {cfg.lr}, seed {cfg.seed}; stops at a deterministic "
        f"evaluation >= {cfg.target_return:g} (at most {cfg.frames} frames)"
    )
    history = train(cfg)
    plot_curve(
        history,
        os.path.join(cfg.out, "demo_ppo_cartpole.png"),
        f"PPO on {cfg.env_name} (seed {cfg.seed})",
        target=cfg.target_return,
    )
    report(f"PPO {cfg.env_name}", history, cfg.target_return, history["final_return"])
    return history


if __name__ == "__main__":
    main()
