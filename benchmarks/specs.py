"""Cost of the spec operations that envs and collectors call per step, next to TorchRL's.

Times ``rand``, ``is_in``, ``encode``, ``expand`` and ``Composite`` access on small specs (the
cases are in ``_peers/spec_cases.py``, shared with the peer script so both sides run the same
code). Prints one JSON object per case with ``us_per_call`` for us and, when TorchRL is
installed beside us (``TORCHRL_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``), for
TorchRL and the speed-up. Runs with ``torch.set_num_threads(1)``.

Usage: ``python benchmarks/specs.py [--seconds 0.2] [--no-peers]``
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

torch.set_num_threads(1)

sys.path.insert(0, str(Path(__file__).parent / "_peers"))

from compare import main  # noqa: E402
from spec_cases import make_cases  # noqa: E402

from torchrl import data  # noqa: E402

if __name__ == "__main__":
    main("specs", lambda: make_cases(data), __doc__, default_seconds=0.2)
