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

from loss_cases import make_cases  # noqa: E402
from spec_cases import time_cases  # noqa: E402

from torchrl import modules, objectives  # noqa: E402


def _peer(seconds: float) -> dict[str, float] | str:
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    script = _PEERS / "torchrl_losses.py"
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
    parser.add_argument("--seconds", type=float, default=0.3, help="time per repeat of a case")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (best kept)")
    args = parser.parse_args()
    cases = make_cases(modules, objectives)
    ours: dict[str, float] = {}
    peer: dict[str, float] | str = {}
    for _ in range(max(args.rounds, 1)):
        for name, us in time_cases(cases, args.seconds).items():
            ours[name] = min(us, ours.get(name, float("inf")))
        if args.no_peers:
            peer = "skipped: --no-peers"
            continue
        result = _peer(args.seconds)
        if isinstance(result, str):
            peer = result
            continue
        assert isinstance(peer, dict)
        for name, us in result.items():
            peer[name] = us if name == "_impl" else min(us, peer.get(name, float("inf")))
    for name, us in ours.items():
        record = {"bench": "losses", "case": name, "us_per_call": round(us, 2), "torch_threads": 1}
        if isinstance(peer, dict) and name in peer:
            record["torchrl_impl"] = peer["_impl"]
            record["torchrl_us_per_call"] = peer[name]
            record["speedup"] = round(peer[name] / us, 2)
        elif isinstance(peer, str):
            record["torchrl"] = peer
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
