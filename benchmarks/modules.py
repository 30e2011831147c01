"""Cost of policy-side operations (distributions, actors, exploration, RNNs), next to TorchRL's.

The cases are in ``_peers/module_cases.py``, shared with the peer script so both sides run the
same code: TanhNormal sampling and scoring (with and without backward), a masked categorical,
a ProbabilisticActor (MLP + TanhNormal) on 256 and on 1 observation, a QValueActor, an MLP, the
epsilon-greedy and additive-Gaussian modules, an LSTM step and an LSTM over ``[16, 64]``
sequences with episode starts inside, and an independent-parameter MultiAgentMLP. Prints one
JSON object per case with ``us_per_call`` for us and, when TorchRL is installed beside us
(``TORCHRL_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``), for TorchRL and the
speed-up. Runs with ``torch.set_num_threads(1)``. On a shared machine, ``--rounds`` alternates
our measurement and the peer's several times and keeps the best time of each case.

Usage: ``python benchmarks/modules.py [--seconds 0.2] [--rounds 2] [--no-peers]``
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

torch.set_num_threads(1)

sys.path.insert(0, str(Path(__file__).parent / "_peers"))

from compare import main  # noqa: E402
from module_cases import make_cases  # noqa: E402

from torchrl import data, modules  # noqa: E402

if __name__ == "__main__":
    main("modules", lambda: make_cases(modules, data), __doc__, default_seconds=0.2)
