"""Cost of one loss update (forward, backward, target update), next to TorchRL's.

The cases are in ``_peers/loss_cases.py``, shared with the peer script so both sides build the
same networks (2x64 MLPs) and batches (256 transitions): DQN (double, one-hot actions, soft
target update), SAC v2 (TanhNormal policy, two vmapped critics), TD3 (two critics, smoothing
noise) and clipped PPO on a minibatch that carries its advantage. Prints one JSON object per
case with ``us_per_call`` for us and, when TorchRL is installed beside us
(``TORCHRL_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``), for TorchRL and the
speed-up. Runs with ``torch.set_num_threads(1)``. On a shared machine, ``--rounds`` alternates
our measurement and the peer's several times and keeps the best time of each case.

Usage: ``python benchmarks/losses.py [--seconds 0.3] [--rounds 2] [--no-peers]``
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

torch.set_num_threads(1)

sys.path.insert(0, str(Path(__file__).parent / "_peers"))

from compare import main  # noqa: E402
from loss_cases import make_cases  # noqa: E402

from torchrl import modules, objectives  # noqa: E402

if __name__ == "__main__":
    main("losses", lambda: make_cases(modules, objectives), __doc__, default_seconds=0.3)
