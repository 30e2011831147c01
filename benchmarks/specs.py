"""Cost of the spec operations that envs and collectors call per step, next to TorchRL's.

Times ``rand``, ``is_in``, ``encode``, ``expand`` and ``Composite`` access on small specs (the
cases are in ``_peers/spec_cases.py``, shared with the peer script so both sides run the same
code). Prints one JSON object per case with ``us_per_call`` for us and, when TorchRL is
installed beside us (``TORCHRL_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``), for
TorchRL and the speed-up. Runs with ``torch.set_num_threads(1)``.

Usage: ``python benchmarks/specs.py [--seconds 0.2] [--no-peers]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

torch.set_num_threads(1)

_PEERS = Path(__file__).parent / "_peers"
sys.path.insert(0, str(_PEERS))

from spec_cases import make_cases, time_cases  # noqa: E402

from torchrl import data  # noqa: E402


def _peer(seconds: float) -> dict[str, float] | str:
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    script = _PEERS / "torchrl_specs.py"
    if not Path(python).exists():
        return f"skipped: {python} not found"
    # Our package is also called torchrl: run the peer outside this repo's import path.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [python, str(script), str(seconds)],
        capture_output=True,
        text=True,
        cwd="/",
        env=env,
        timeout=900,
    )
    if out.returncode != 0:
        return f"failed: {out.stderr[-1000:]}"
    times: dict[str, float] = {}
    for line in out.stdout.splitlines():
        record = json.loads(line)
        if "skipped" in record:
            return f"skipped: {record['skipped']}"
        times[record["case"]] = record["us_per_call"]
        times["_impl"] = record["impl"]  # type: ignore[assignment]
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=0.2, help="time per repeat of a case")
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    ours = time_cases(make_cases(data), args.seconds)
    peer = "skipped: --no-peers" if args.no_peers else _peer(args.seconds)
    for name, us in ours.items():
        record = {"bench": "specs", "case": name, "us_per_call": round(us, 2), "torch_threads": 1}
        if isinstance(peer, dict) and name in peer:
            record["torchrl_impl"] = peer["_impl"]
            record["torchrl_us_per_call"] = peer[name]
            record["speedup"] = round(peer[name] / us, 2)
        elif isinstance(peer, str):
            record["torchrl"] = peer
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
