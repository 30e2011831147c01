"""What the examples of this folder share: the ``--data`` flag, the dataset's score, the config.

``--data d4rl:PATH`` opens a D4RL-layout HDF5 file with
:class:`~torchrl.data.datasets.d4rl.D4RLExperienceReplay` (converted once into a memory-mapped
copy under ``--root``, reopened afterwards); ``--data minari:ID`` opens a dataset of Minari's
local store (``MINARI_DATASETS_PATH``) with
:class:`~torchrl.data.datasets.minari_data.MinariExperienceReplay`. Both give a replay buffer of
flat TED transitions with an ``"episode"`` id per transition. ``make_dataset.py`` writes both
from a SAC run.

Nothing here is part of the library.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

from torchrl.data.replay_buffers.query import trajectory_bounds

DATASET_NAME = "pendulum-sac-medium-replay-v0"
"""File name (without ``.hdf5``) of the D4RL file ``make_dataset.py`` writes."""

MINARI_ID = "pendulum/sac-medium-replay-v0"
"""Id of the Minari dataset ``make_dataset.py`` writes."""

DEFAULT_DATA = f"d4rl:outputs/{DATASET_NAME}.hdf5"

TRANSITION_KEYS = (
    "observation",
    "action",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
    ("next", "truncated"),
)
"""The entries the losses read; online data is cut to these to be mixed with a dataset's."""


@dataclass
class OfflineConfig:
    """Fields every trainer of this folder has (see ``iql_pendulum_offline.train_offline``)."""

    env_name: str = "Pendulum-v1"
    data: str = DEFAULT_DATA  # "d4rl:PATH" or "minari:ID"
    root: str = ""  # cache of converted datasets; "" means $TORCHRL_DATASETS_ROOT or ~/.cache
    offline_steps: int = 5000
    batch_size: int = 256
    lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    hidden: int = 256
    eval_every: int = 500  # gradient steps
    eval_episodes: int = 5
    final_eval_episodes: int = 50  # Pendulum returns vary a lot with the start state
    cosine_lr: bool = True  # decay the learning rate to 0 over the offline steps
    seed: int = 0
    out: str = "outputs"
    progress: bool = True


def open_dataset(spec: str, batch_size: int, *, root: str = "", **kwargs: Any) -> Any:
    """Opens the dataset named by ``--data`` as a replay buffer of flat TED transitions.

    Args:
        spec: ``"d4rl:PATH"`` (a D4RL-layout HDF5 file) or ``"minari:ID"`` (a dataset in
            Minari's local store).
        batch_size: the buffer's default batch size.
        root: where converted copies are cached (``""``: the reader's default).
        **kwargs: passed to the reader (``sampler=``, ``transform=``, ...).
    """
    kind, sep, name = spec.partition(":")
    if not sep or not name:
        raise ValueError(f"--data must be 'd4rl:PATH' or 'minari:ID', got {spec!r}")
    root_arg = root or None
    if kind == "d4rl":
        from torchrl.data.datasets.d4rl import D4RLExperienceReplay

        if not os.path.isfile(name):
            raise FileNotFoundError(
                f"--data {spec!r}: no file {name!r}; write it first with "
                f"'python examples/offline/make_dataset.py' (or pass another D4RL HDF5 file)"
            )
        # the reader reconverts its cached copy when the file changes (size, time)
        return D4RLExperienceReplay(
            Path(name).stem, batch_size, data_file=name, root=root_arg, **kwargs
        )
    if kind == "minari":
        from torchrl.data.datasets.minari_data import MinariExperienceReplay

        return MinariExperienceReplay(name, batch_size, root=root_arg, **kwargs)
    raise ValueError(f"--data must start with 'd4rl:' or 'minari:', got {spec!r}")


def transitions(dataset: Any) -> TensorDictBase:
    """Every stored transition of a dataset buffer, ``[N]`` (memory-mapped entries stay on disk)."""
    return dataset.storage[:]


def episode_returns(data: TensorDictBase, episode_key: str = "episode") -> torch.Tensor:
    """The return of every complete episode of flat transitions (cut by their episode ids).

    An episode the data cuts before its end (its last transition is not ``done``) is left out,
    unless no episode is complete.
    """
    bounds = trajectory_bounds(data, episode_key)
    reward = data["next", "reward"].reshape(-1).double()
    summed = torch.cat([reward.new_zeros(1), reward.cumsum(0)])
    returns = summed[bounds[:, 1]] - summed[bounds[:, 0]]
    complete = data["next", "done"].reshape(-1)[bounds[:, 1] - 1].bool()
    if complete.any():
        returns = returns[complete]
    return returns.float()


def behaviour_return(dataset: Any) -> float:
    """The mean episode return of a dataset: the score of the policy that collected it."""
    return float(episode_returns(transitions(dataset)).mean())


def describe(spec: str, dataset: Any) -> str:
    """One line about a dataset: where from, how many transitions and episodes, its return."""
    returns = episode_returns(transitions(dataset))
    return (
        f"dataset {spec}: {len(dataset)} transitions, {returns.numel()} complete episodes, "
        f"mean return {float(returns.mean()):.1f} (min {float(returns.min()):.1f}, "
        f"max {float(returns.max()):.1f})"
    )
