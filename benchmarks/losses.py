"""Cost of one loss update (forward, backward, target update): ours, plain PyTorch and TorchRL.

The cases are in ``_peers/loss_cases.py``, shared with the peer script so both libraries build
the same networks (2x64 MLPs) and batches (256 transitions): DQN (double, one-hot actions, soft
target update), SAC v2 (TanhNormal policy, two critics), TD3 (two critics, smoothing noise) and
clipped PPO on a minibatch that carries its advantage. ``_peers/plain_cases.py`` writes the same
updates in plain PyTorch (the same layers and loss terms, plain tensors, no TensorDict): the
floor a library can reach, whose ratio ``ours_over_plain`` is our overhead (the target is at
most 1.15). Prints one JSON object per case with ``us_per_call`` (ours, wall clock),
``cpu_us_per_call`` (this thread's CPU time per call, which a loaded machine disturbs far
less), the same two for plain PyTorch, ``ours_over_plain`` (ratio of the CPU times) and, when
TorchRL is installed beside us
(``TORCHRL_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``), TorchRL's time and the
speed-up. Runs with ``torch.set_num_threads(1)``. On a shared machine, ``--rounds`` alternates
the three measurements several times and keeps the best time of each case.

Measured on 2026-11-27 on a 2-core machine shared with other jobs (load ~1.9, ``--rounds 3``,
recorded in ``docs/benchmarks/losses.json``, after the MLP's direct layer calls and the losses'
shortcuts: cached ensemble member views, direct actor and critic network calls, cheaper key checks,
parameter swaps and target-update pairs): ``ours_over_plain`` 1.28 (DQN), 1.25 (SAC), 1.27 (TD3)
and 1.27 (PPO), from 1.34 / 1.30 / 1.34 / 1.29 earlier that day and 1.39 / 1.41 / 1.51 / 1.46
before it; the 1.15 target is not met. Five runs that evening (small changes between them) gave
1.25-1.31 (DQN), 1.23-1.32 (SAC), 1.26-1.34 (TD3) and 1.15-1.29 (PPO): compare ratios of one run
only. TorchRL 0.14.1's wall time over ours: 2.11 / 1.86 / 1.99 / 1.87. The gap to plain PyTorch is
Python bookkeeping spread thinly over the loss call (TensorDict reads and writes, parameter swaps
for target and detached networks, input checks, the logged diagnostics), no part above 10-20 us;
with a batch of 1 and 1 cell (arithmetic removed) ours costs about 200 us (DQN) to 500 us (SAC)
more per update than plain PyTorch. The networks themselves cost the same (a 2x64 MLP forward on
256 rows: ~150 us in both). Compiling removes the gap (``benchmarks/compile.py``).

Usage: ``python benchmarks/losses.py [--seconds 0.3] [--rounds 2] [--no-peers] [--no-plain]``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

torch.set_num_threads(1)

sys.path.insert(0, str(Path(__file__).parent / "_peers"))

from compare import run_peer  # noqa: E402
from loss_cases import make_cases  # noqa: E402
from plain_cases import make_plain_cases, time_call  # noqa: E402

from torchrl import modules, objectives  # noqa: E402


def _keep_best(best: dict[str, float], name: str, us: float) -> None:
    best[name] = min(us, best.get(name, float("inf")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=0.3, help="time per repeat of a case")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (best kept)")
    parser.add_argument("--no-peers", action="store_true", help="skip TorchRL")
    parser.add_argument("--no-plain", action="store_true", help="skip the plain-PyTorch floor")
    args = parser.parse_args()
    ours_cases = make_cases(modules, objectives)
    plain_cases = {} if args.no_plain else make_plain_cases()
    ours: dict[str, float] = {}
    ours_cpu: dict[str, float] = {}
    plain: dict[str, float] = {}
    plain_cpu: dict[str, float] = {}
    peer: dict[str, float] = {}
    peer_note = "skipped: --no-peers" if args.no_peers else ""
    impl = ""
    for _ in range(max(args.rounds, 1)):
        # Case by case, ours then plain: the ratio of two back-to-back timings is what
        # survives a machine whose load changes from one minute to the next.
        for name, fn in ours_cases.items():
            wall, cpu = time_call(fn, args.seconds)
            _keep_best(ours, name, wall)
            _keep_best(ours_cpu, name, cpu)
            if name in plain_cases:
                wall, cpu = time_call(plain_cases[name], args.seconds)
                _keep_best(plain, name, wall)
                _keep_best(plain_cpu, name, cpu)
        if args.no_peers:
            continue
        result = run_peer("losses", args.seconds)
        if isinstance(result, str):
            peer_note = result
            continue
        impl = str(result.pop("_impl"))
        for name, us in result.items():
            _keep_best(peer, name, us)
    for name, us in ours.items():
        record: dict = {
            "bench": "losses",
            "case": name,
            "us_per_call": round(us, 2),
            "cpu_us_per_call": round(ours_cpu[name], 2),
        }
        if name in plain:
            record["plain_us_per_call"] = round(plain[name], 2)
            record["plain_cpu_us_per_call"] = round(plain_cpu[name], 2)
            record["ours_over_plain"] = round(ours_cpu[name] / plain_cpu[name], 3)
        if name in peer:
            record["torchrl_impl"] = impl
            record["torchrl_us_per_call"] = peer[name]
            record["speedup"] = round(peer[name] / us, 2)
        elif peer_note:
            record["torchrl"] = peer_note
        record["torch_threads"] = 1
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
