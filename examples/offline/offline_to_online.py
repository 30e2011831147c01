"""IQL pre-trained on a dataset file, then fine-tuned online on Pendulum-v1.

Phase 1 is ``iql.py``: IQL on the dataset alone (``--data d4rl:PATH`` or ``--data minari:ID``)
for ``offline_steps`` gradient steps; its greedy policy is scored on ``final_eval_episodes``
fresh episodes: the offline start. Phase 2 goes on with the same networks and loss online: a
collector runs the (stochastic) IQL actor for ``online_frames`` frames, each collected batch goes
into an :class:`~torchrl.data.OfflineToOnlineReplayBuffer` whose samples draw
``offline_fraction`` of every batch from the fixed dataset and the rest from the online data,
and ``updates_per_frame`` gradient steps follow each batch (Adam at ``online_lr``, soft target
updates). The final greedy policy is scored on the same initial states as the offline start.

Usage: ``python examples/offline/offline_to_online.py [--data d4rl:PATH | --data minari:ID]
[--offline-steps N] [--online-frames N] [--offline-fraction F] [--seed S] [--out DIR]``.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import iql
import torch
from _offline import TRANSITION_KEYS, open_dataset
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import episode_returns, evaluate, parse_config, plot_curve  # noqa: E402

from torchrl.collectors import SyncDataCollector  # noqa: E402
from torchrl.data import OfflineToOnlineReplayBuffer  # noqa: E402
from torchrl.envs import GymEnv, RewardSum, TransformedEnv  # noqa: E402
from torchrl.objectives import SoftUpdate  # noqa: E402


@dataclass
class Config(iql.Config):
    online_frames: int = 10_000
    frames_per_batch: int = 200
    updates_per_frame: float = 1.0
    offline_fraction: float = 0.5  # share of each batch drawn from the dataset
    online_lr: float = 3e-4
    eval_every_frames: int = 1000


def keep_transition_keys(batch: Any) -> Any:
    """The entries the loss reads: the dataset's and the collector's samples then match."""
    return batch.select(*TRANSITION_KEYS)


def final_score(cfg: Config, actor: Any) -> float:
    """The greedy return on ``final_eval_episodes`` fixed initial states (same for both phases)."""
    env = GymEnv(cfg.env_name, num_envs=cfg.final_eval_episodes)
    env.set_seed(cfg.seed + 20_000)
    ret = evaluate(env, actor, max_steps=200)
    env.close()
    return ret


def train(cfg: Config, dataset: Any = None) -> dict:
    """Both phases; the history holds ``offline_return`` (the start) and ``final_return``."""
    if dataset is None:
        dataset = open_dataset(
            cfg.data, cfg.batch_size, root=cfg.root, transform=keep_transition_keys
        )
    offline = iql.train(cfg, dataset)
    actor, loss_fn = offline["actor"], offline["loss_fn"]
    history: dict = {
        "behaviour_return": offline["behaviour_return"],
        "offline_return": offline["final_return"],
        "offline_eval": offline["eval"],
        "train": [],
        "eval": [(0, offline["final_return"])],
    }

    buffer = OfflineToOnlineReplayBuffer(
        dataset,
        online_capacity=max(cfg.online_frames, 1),
        offline_fraction=cfg.offline_fraction,
        batch_size=cfg.batch_size,
    )
    env = TransformedEnv(GymEnv(cfg.env_name), RewardSum())
    env.set_seed(cfg.seed)
    eval_env = GymEnv(cfg.env_name, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 10_000)
    collector = SyncDataCollector(
        env, actor, frames_per_batch=cfg.frames_per_batch, total_frames=cfg.online_frames
    )
    target_updater = SoftUpdate(loss_fn, tau=cfg.tau)
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.online_lr)
    frames, next_eval = 0, cfg.eval_every_frames
    start = time.perf_counter()
    bar = tqdm(total=cfg.online_frames, disable=not cfg.progress, desc="IQL online")
    try:
        for batch in collector:
            n = batch.numel()
            frames += n
            buffer.extend(keep_transition_keys(batch.reshape(-1)))
            for _ in range(int(n * cfg.updates_per_frame)):
                losses = loss_fn(buffer.sample())
                loss = sum(v for k, v in losses.items() if k.startswith("loss_"))
                optim.zero_grad()
                loss.backward()
                optim.step()
                target_updater.step()
            collector.update_policy_weights_()
            history["train"] += episode_returns(batch, frames)
            bar.update(n)
            if frames >= next_eval or frames >= cfg.online_frames:
                next_eval += cfg.eval_every_frames
                ret = evaluate(eval_env, actor, max_steps=200)
                history["eval"].append((frames, ret))
                bar.set_postfix(eval_return=f"{ret:.0f}")
    finally:
        bar.close()
        collector.shutdown()
        eval_env.close()
    history["wall"] = time.perf_counter() - start
    history["frames"] = frames
    history["final_return"] = final_score(cfg, actor)
    return history


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    history = train(cfg)
    plot_curve(
        history,
        f"{cfg.out}/offline_to_online_iql.png",
        "IQL offline -> online, Pendulum-v1 (frame 0: the offline start)",
        target=history["behaviour_return"],
        target_label="behaviour policy",
    )
    # the summary line of every example: score first, the budget ("N online frames in W s") last
    print(
        f"IQL offline-to-online Pendulum-v1: final deterministic evaluation return "
        f"{history['final_return']:.1f} (offline start {history['offline_return']:.1f} after "
        f"{cfg.offline_steps} gradient steps on the dataset; {cfg.offline_fraction:.0%} of each "
        f"batch from the dataset); behaviour policy {history['behaviour_return']:.1f}; "
        f"{history['frames']} online frames in {history['wall']:.1f} s"
    )


if __name__ == "__main__":
    main()
