"""Shared driver of the micro-benchmarks that time the same cases for us and for TorchRL.

A benchmark script builds its cases (``make_cases`` in a ``*_cases.py`` module that the peer
script imports too) and calls :func:`main`. Our cases run in this process; TorchRL's run in the
peers venv (``TORCHRL_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``) through
``_peers/torchrl_<bench>.py``. ``--rounds`` alternates the two several times and keeps the best
time of each case, which is what survives a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from spec_cases import time_cases

_PEERS = Path(__file__).parent


def run_peer(bench: str, seconds: float) -> dict[str, float] | str:
    """Times the cases of ``_peers/torchrl_<bench>.py`` under the peers' python."""
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    if not Path(python).exists():
        return f"skipped: {python} not found"
    # Our package is also called torchrl: run the peer outside this repo's import path.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [python, str(_PEERS / f"torchrl_{bench}.py"), str(seconds)],
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


def main(bench: str, make_cases: Callable[[], dict], doc: str, default_seconds: float) -> None:
    """Parses the common flags, times our cases and the peer's, prints one JSON line per case."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument(
        "--seconds", type=float, default=default_seconds, help="time per repeat of a case"
    )
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (best kept)")
    args = parser.parse_args()
    cases = make_cases()
    ours: dict[str, float] = {}
    peer: dict[str, float] | str = {}
    for _ in range(max(args.rounds, 1)):
        for name, us in time_cases(cases, args.seconds).items():
            ours[name] = min(us, ours.get(name, float("inf")))
        if args.no_peers:
            peer = "skipped: --no-peers"
            continue
        result = run_peer(bench, args.seconds)
        if isinstance(result, str):
            peer = result
            continue
        assert isinstance(peer, dict)
        for name, us in result.items():
            peer[name] = us if name == "_impl" else min(us, peer.get(name, float("inf")))
    for name, us in ours.items():
        record = {"bench": bench, "case": name, "us_per_call": round(us, 2), "torch_threads": 1}
        if isinstance(peer, dict) and name in peer:
            record["torchrl_impl"] = peer["_impl"]
            record["torchrl_us_per_call"] = peer[name]
            record["speedup"] = round(peer[name] / us, 2)
        elif isinstance(peer, str):
            record["torchrl"] = peer
        print(json.dumps(record), flush=True)
