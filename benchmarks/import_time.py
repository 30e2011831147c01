"""How much ``import torchrl`` (with ``torchrl.envs`` and ``torchrl.data``) adds on top of torch.

Each sample is a fresh interpreter that imports ``torch`` and ``tensordict`` first, then torchrl, and
reports both durations. Prints one JSON object per measured library; the figure to watch is
``added_s_median`` (target: at most 0.3 s). With ``TORCHRL_PEERS_PYTHON`` pointing at a venv with
TorchRL's own package, the same measurement is made for it.

Usage: ``python benchmarks/import_time.py [--repeats N]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_PROBE = """
import time
t0 = time.perf_counter()
import torch, tensordict
t1 = time.perf_counter()
import torchrl, torchrl.envs, torchrl.data
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""

DEFAULT_PEERS_PYTHON = "/work/peers-venv/bin/python"


def measure(python: str, repeats: int, cwd: str | None = None) -> dict:
    base, added = [], []
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="0")
    for _ in range(repeats):
        out = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, check=True, cwd=cwd, env=env
        ).stdout.split()
        base.append(float(out[0]))
        added.append(float(out[1]))
    return {
        "torch_tensordict_s_median": round(statistics.median(base), 4),
        "added_s_median": round(statistics.median(added), 4),
        "added_s_min": round(min(added), 4),
        "repeats": repeats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    # one warm-up run so that bytecode caches exist, as in a user's second import
    measure(sys.executable, 1)
    print(
        json.dumps(
            {"bench": "import_time", "library": "ours", **measure(sys.executable, args.repeats)}
        )
    )
    peers = os.environ.get("TORCHRL_PEERS_PYTHON", DEFAULT_PEERS_PYTHON)
    if os.path.exists(peers):
        try:
            # run from / so that our checkout's torchrl does not shadow theirs
            measure(peers, 1, cwd="/")
            result = measure(peers, args.repeats, cwd="/")
            print(json.dumps({"bench": "import_time", "library": "TorchRL (PyPI)", **result}))
        except subprocess.CalledProcessError as err:
            print(
                json.dumps(
                    {
                        "bench": "import_time",
                        "library": "TorchRL (PyPI)",
                        "error": err.stderr.strip().splitlines()[-1:],
                    }
                )
            )
    else:
        print(
            json.dumps(
                {
                    "bench": "import_time",
                    "library": "TorchRL (PyPI)",
                    "skipped": f"no peers python at {peers}",
                }
            )
        )


if __name__ == "__main__":
    main()
