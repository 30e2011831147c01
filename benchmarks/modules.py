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

from module_cases import make_cases  # noqa: E402
from spec_cases import time_cases  # noqa: E402

from torchrl import data, modules  # noqa: E402


def _peer(seconds: float) -> dict[str, float] | str:
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    script = _PEERS / "torchrl_modules.py"
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
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (best kept)")
    args = parser.parse_args()
    cases = make_cases(modules, data)
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
        record = {"bench": "modules", "case": name, "us_per_call": round(us, 2), "torch_threads": 1}
        if isinstance(peer, dict) and name in peer:
            record["torchrl_impl"] = peer["_impl"]
            record["torchrl_us_per_call"] = peer[name]
            record["speedup"] = round(peer[name] / us, 2)
        elif isinstance(peer, str):
            record["torchrl"] = peer
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
