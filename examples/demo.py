"""The `make demo` entry point: a random policy on CartPole-v1, with a progress bar and a plot.

Until the collectors and losses land, the demo shows the environment side of the library: a
gymnasium env behind the TensorDict API, checked against its specs, stepped with
``step_and_maybe_reset`` (which resets only finished sub-environments), and the episode returns
summarised and plotted. A later version trains an agent instead.

Usage: ``python examples/demo.py [--frames N] [--num-envs N] [--out DIR]``
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import torch
from tqdm import tqdm

from torchrl.envs import GymEnv
from torchrl.envs.utils import RandomPolicy, check_env_specs


@dataclass
class Config:
    env_name: str = "CartPole-v1"
    frames: int = 20_000
    num_envs: int = 4
    seed: int = 0
    out: str = "outputs"


def run(cfg: Config) -> list[float]:
    env = GymEnv(cfg.env_name, num_envs=cfg.num_envs)
    env.set_seed(cfg.seed)
    check_env_specs(env)
    policy = RandomPolicy(env.action_spec)

    returns: list[float] = []
    running = torch.zeros(env.batch_size)
    td = env.reset()
    steps = cfg.frames // cfg.num_envs
    with tqdm(
        total=steps * cfg.num_envs, desc=f"random policy on {cfg.env_name}", unit="frames"
    ) as bar:
        for _ in range(steps):
            td, td_next = env.step_and_maybe_reset(policy(td))
            running += td["next", "reward"].reshape(running.shape)
            done = td["next", "done"].reshape(running.shape)
            returns.extend(running[done].tolist())
            running[done] = 0.0
            td = td_next
            bar.update(cfg.num_envs)
            if returns:
                bar.set_postfix(
                    episodes=len(returns),
                    mean_return=f"{sum(returns[-20:]) / len(returns[-20:]):.1f}",
                )
    env.close()
    return returns


def plot(returns: list[float], path: str, title: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib is not installed, no plot: pip install "torchrl[plot]"')
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(returns, ".", alpha=0.4, label="episode return")
    window = 20
    if len(returns) >= window:
        smooth = torch.tensor(returns).unfold(0, window, 1).mean(-1)
        ax.plot(range(window - 1, len(returns)), smooth, label=f"mean of {window}")
    ax.set_xlabel("episode")
    ax.set_ylabel("return")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=Config.frames)
    parser.add_argument("--num-envs", type=int, default=Config.num_envs)
    parser.add_argument("--out", default=Config.out)
    args = parser.parse_args()
    cfg = Config(frames=args.frames, num_envs=args.num_envs, out=args.out)
    torch.manual_seed(cfg.seed)
    returns = run(cfg)
    os.makedirs(cfg.out, exist_ok=True)
    path = plot(
        returns, os.path.join(cfg.out, "demo_returns.png"), f"random policy, {cfg.env_name}"
    )
    mean = sum(returns) / max(len(returns), 1)
    print(f"{len(returns)} episodes, mean return {mean:.1f}, best {max(returns, default=0):.0f}")
    if path:
        print(f"plot written to {path}")


if __name__ == "__main__":
    main()
