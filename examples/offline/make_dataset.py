"""Makes a "medium-replay" Pendulum-v1 dataset with our own SAC and writes it as D4RL and Minari.

SAC (``examples/sac_pendulum.py``) trains online for ``behaviour_frames`` frames; everything its
collector gathered meanwhile (random play first, then a policy that improves) is the dataset, as
in the medium-replay datasets of D4RL. It is written twice:

* with :func:`~torchrl.data.datasets.d4rl.export_d4rl` to ``<out>/pendulum-sac-medium-replay-v0.hdf5``
  (D4RL's HDF5 layout: observations, actions, rewards, terminals, timeouts, next_observations),
  with ``<out>/pendulum-sac-medium-replay-v0.json`` beside it (the behaviour score and sizes);
* with :func:`~torchrl.data.datasets.minari_data.export_minari` as the Minari dataset
  ``pendulum/sac-medium-replay-v0`` in Minari's local store (``MINARI_DATASETS_PATH``, default
  ``~/.minari/datasets``; an older dataset of that id is replaced).

The behaviour policy's score is the dataset's mean episode return; the trainers of this folder
compute it again from the data and try to beat it.

Usage: ``python examples/offline/make_dataset.py [--behaviour-frames N] [--seed S] [--out DIR]``,
then e.g. ``python examples/offline/iql.py --data d4rl:outputs/pendulum-sac-medium-replay-v0.hdf5``
or ``--data minari:pendulum/sac-medium-replay-v0``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass

import torch
from _offline import DATASET_NAME, MINARI_ID, TRANSITION_KEYS, episode_returns

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import iql_pendulum_offline  # noqa: E402
from _common import parse_config  # noqa: E402


@dataclass
class Config:
    env_name: str = "Pendulum-v1"
    behaviour_frames: int = 10_000  # SAC's whole run: 50 episodes of 200 steps
    batch_size: int = 256
    hidden: int = 256
    minari: bool = True  # also write the Minari dataset
    minari_id: str = MINARI_ID
    seed: int = 0
    out: str = "outputs"
    progress: bool = True
    # read by iql_pendulum_offline.make_dataset: everything SAC collected is the dataset
    dataset: str = "replay"
    dataset_frames: int = 0


def make(cfg: Config) -> dict:
    """Trains SAC, writes its replay data; returns the paths and the behaviour score."""
    from torchrl.data.datasets.d4rl import export_d4rl

    if cfg.dataset != "replay":
        raise ValueError(f"dataset must be 'replay' (SAC's replay data), got {cfg.dataset!r}")
    torch.manual_seed(cfg.seed)
    start = time.perf_counter()
    buffer, _ = iql_pendulum_offline.make_dataset(cfg)  # type: ignore[arg-type]
    sac_wall = time.perf_counter() - start
    # what the losses read; the collector's and the actor's other entries are left out
    data = buffer.storage[: len(buffer)].select(*TRANSITION_KEYS, ("collector", "traj_ids"))
    returns = episode_returns(data, episode_key=("collector", "traj_ids"))  # type: ignore[arg-type]
    data = data.exclude(("collector", "traj_ids"))  # episodes end with done flags
    os.makedirs(cfg.out, exist_ok=True)
    path = export_d4rl(data, os.path.join(cfg.out, f"{DATASET_NAME}.hdf5"))
    info = {
        "env_name": cfg.env_name,
        "behaviour": f"SAC, {cfg.behaviour_frames} frames (medium-replay: all it collected)",
        "behaviour_return": float(returns.mean()),
        "episodes": int(returns.numel()),
        "transitions": int(data.shape[0]),
        "seed": cfg.seed,
        "d4rl_file": str(path),
        "minari_id": cfg.minari_id if cfg.minari else None,
    }
    with open(path.with_suffix(".json"), "w") as f:
        json.dump(info, f, indent=1)
    if cfg.minari:
        from torchrl.data.datasets.minari_data import export_minari

        export_minari(
            data,
            cfg.minari_id,
            env_id=cfg.env_name,
            algorithm_name="SAC (torchrl examples/offline/make_dataset.py)",
            author="torchrl examples",
            description=(
                f"Everything SAC collected on {cfg.env_name} in its first {cfg.behaviour_frames} "
                f"frames (medium-replay style), seed {cfg.seed}; mean episode return "
                f"{info['behaviour_return']:.1f}."
            ),
            overwrite=True,
        )
    info["sac_wall"] = sac_wall
    return info


def main() -> None:
    cfg = parse_config(Config, __doc__)
    torch.set_num_threads(1)  # small networks: more threads only add overhead on small machines
    info = make(cfg)
    print(
        f"behaviour policy (SAC, {cfg.behaviour_frames} frames): mean episode return "
        f"{info['behaviour_return']:.1f} over {info['episodes']} episodes; "
        f"{info['transitions']} transitions written to {info['d4rl_file']}"
        + (f" and to the Minari dataset {info['minari_id']}" if info["minari_id"] else "")
        + f"; SAC ran {info['sac_wall']:.1f} s"
    )


if __name__ == "__main__":
    main()
