"""Small helpers shared by the examples: command-line config, deterministic evaluation, plot.

Nothing here is part of the library; each example keeps its training loop to itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any, TypeVar

import torch

from torchrl.envs.utils import ExplorationType, set_exploration_type

C = TypeVar("C")


def parse_config(cls: type[C], doc: str | None = None, argv: list[str] | None = None) -> C:
    """Builds a dataclass config from the command line: one ``--flag`` per field.

    A bool field ``progress`` becomes ``--no-progress``; other bools take ``true``/``false``.
    """
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else "")
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        flag = "--" + f.name.replace("_", "-")
        if isinstance(f.default, bool):
            if f.name == "progress":
                parser.add_argument("--no-progress", dest="progress", action="store_false")
            else:
                parser.add_argument(
                    flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=f.default
                )
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default)
    return cls(**vars(parser.parse_args(argv)))


@torch.no_grad()
def evaluate(env: Any, policy: Any, max_steps: int) -> float:
    """Mean return of one deterministic episode in each sub-env of a batched ``env``.

    The protocol of ``benchmarks/time_to_solve.py``: every call resets all sub-envs (fresh
    initial states; ``env`` is seeded once by the caller), runs the policy with its most likely
    action, and counts each sub-env's rewards up to (and including) its first ``done``; the
    rollout stops once every sub-env has finished or after ``max_steps`` steps. The episodes run
    side by side, as in SB3's vectorised ``evaluate_policy``, and are independent.
    """
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        rollout = env.rollout(max_steps, policy, break_when_all_done=True)
    reward = rollout["next", "reward"].reshape(*rollout.batch_size)
    done = rollout["next", "done"].reshape(*rollout.batch_size).long()
    alive_before = (done.cumsum(-1) - done) == 0
    return float((reward * alive_before).sum(-1).mean())


def evaluate_confirmed(
    env: Any, policy: Any, max_steps: int, target: float, confirm: bool = True
) -> float:
    """An :func:`evaluate` that, with ``confirm``, re-checks a passing score on fresh episodes.

    A policy that has just crossed the target often still fails some starting states, and a
    handful of evaluation episodes can pass by luck. With ``confirm``, a first evaluation that
    reaches ``target`` is followed by a second one on new initial states, and the lower of the two
    is returned: the caller counts the task solved only if both pass. A failing first evaluation
    is returned as it is (no second rollout).
    """
    ret = evaluate(env, policy, max_steps)
    if confirm and ret >= target:
        ret = min(ret, evaluate(env, policy, max_steps))
    return ret


def episode_returns(batch: Any, frames: int) -> list[tuple[int, float]]:
    """``(frames, return)`` for every episode that ends in ``batch`` (needs ``RewardSum``)."""
    nxt = batch["next"]
    if "episode_reward" not in nxt.keys():
        return []
    done = nxt["done"].squeeze(-1)
    return [(frames, float(r)) for r in nxt["episode_reward"].squeeze(-1)[done]]


def plot_curve(
    history: dict,
    path: str,
    title: str,
    target: float | None = None,
    xlabel: str = "frames",
    target_label: str = "target",
) -> str | None:
    """Writes a PNG of return vs frames (training episodes: dots, evaluations: line), says where.

    Returns the path written, or ``None`` when matplotlib is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib is not installed, no plot: pip install "torchrl[plot]"')
        return None
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if history.get("train"):
        x, y = zip(*history["train"])
        ax.plot(x, y, ".", alpha=0.3, markersize=3, label="training episode return")
    if history.get("eval"):
        x, y = zip(*history["eval"])
        ax.plot(x, y, "o-", label="deterministic evaluation")
    if target is not None:
        ax.axhline(
            target, color="gray", linestyle="--", linewidth=1, label=f"{target_label} {target:.0f}"
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel("return")
    ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"learning curve written to {path}")
    return path


def report(
    name: str,
    history: dict,
    target: float | None,
    final_return: float,
    episodes: int | None = None,
) -> None:
    """Prints the one-line summary every example ends with.

    ``target=None`` (an example without a solve threshold) leaves out the target and whether it
    was reached; ``episodes`` says how many episodes the final evaluation averaged.
    """
    head = f"{name}: final deterministic evaluation return {final_return:.1f}"
    if target is None:
        head += f" ({episodes} episodes)" if episodes is not None else ""
    else:
        solved = history.get("solved_at")
        when = f"solved at {solved} frames" if solved is not None else "not solved"
        head += f" (target {target:g}); {when}"
    print(f"{head}; {history['frames']} frames in {history['wall']:.1f} s")
