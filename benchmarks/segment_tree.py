"""Throughput of the segment trees behind prioritized replay: batched update and sampling.

Measures, for a tree of 1,000,000 leaves and batches of 256 (both configurable):

- ``update``: ``tree.update(indices, priorities)`` on a sum tree;
- ``update_sum_min``: the same batch written to a sum tree and a min tree, as a prioritized
  sampler does when priorities change;
- ``sample``: draw 256 uniform numbers, scale them by ``tree.total()`` and ``scan_lower_bound``.

for torchrl's C++ trees and its NumPy fallback (float64 and float32), and for the peers run in
their own venv (``TORCHRL_PEERS_PYTHON``, default ``/work/peers-venv/bin/python``): tianshou's
numba ``SegmentTree`` and TorchRL's C++ trees (skipped with a note when they do not load).
Prints one JSON object per measurement (the best of 5 timed runs, to stay robust on a shared
machine). torch runs with 1 thread (``torch.set_num_threads(1)``); the trees are single-threaded.

Usage: ``python benchmarks/segment_tree.py [--capacity N] [--batch B] [--seconds S]``
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

from torchrl.data._segment_tree import _HAS_C, MinSegmentTree, SumSegmentTree

N_BATCHES = 64  # pre-drawn batches, cycled, so that drawing indices is not timed


def _rate(
    step: Callable[[int], None], batch: int, seconds: float, repeats: int = 5
) -> tuple[float, float]:
    """Best items/s over ``repeats`` timed runs of about ``seconds`` each: wall clock, CPU time.

    Also run by the peers' python (its source is sent along), so it only needs ``time``.
    """
    for k in range(10):  # warm-up
        step(k)
    n = 10
    while True:  # calibrate the number of calls per run
        t0 = time.perf_counter()
        for k in range(n):
            step(k)
        elapsed = time.perf_counter() - t0
        if elapsed > 0.05:
            break
        n *= 4
    n = max(1, int(n * seconds / elapsed))
    best_wall = best_cpu = 0.0
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for k in range(n):
            step(k)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        best_wall = max(best_wall, n * batch / wall)
        best_cpu = max(best_cpu, n * batch / max(cpu, 1e-9))
    return best_wall, best_cpu


def _emit(record: dict) -> None:
    print(json.dumps({"bench": "segment_tree", **record}), flush=True)


def bench_torchrl(capacity: int, batch: int, seconds: float) -> None:
    rng = np.random.default_rng(0)
    indices = rng.integers(0, capacity, size=(N_BATCHES, batch))
    priorities = rng.random((N_BATCHES, batch)) + 1e-3
    backends = ["cpp", "numpy"] if _HAS_C else ["numpy"]
    for backend in backends:
        for dtype in (torch.float64, torch.float32):
            sum_tree = SumSegmentTree(capacity, dtype, backend=backend)
            min_tree = MinSegmentTree(capacity, dtype, backend=backend)
            initial = rng.random(capacity) + 1e-3
            sum_tree.update(np.arange(capacity), initial)
            min_tree.update(np.arange(capacity), initial)

            def update(k: int, sum_tree=sum_tree) -> None:
                j = k % N_BATCHES
                sum_tree.update(indices[j], priorities[j])

            def update_sum_min(k: int, sum_tree=sum_tree, min_tree=min_tree) -> None:
                j = k % N_BATCHES
                sum_tree.update(indices[j], priorities[j])
                min_tree.update(indices[j], priorities[j])

            def sample(k: int, sum_tree=sum_tree) -> None:
                sum_tree.scan_lower_bound(rng.random(batch) * sum_tree.total())

            for op, step in (("update", update), ("update_sum_min", update_sum_min)):
                _emit(_record(f"torchrl-{backend}", op, dtype, capacity, batch, step, seconds))
            _emit(_record(f"torchrl-{backend}", "sample", dtype, capacity, batch, sample, seconds))


def _record(impl, op, dtype, capacity, batch, step, seconds) -> dict:
    rate, cpu_rate = _rate(step, batch, seconds)
    return {
        "impl": impl,
        "op": op,
        "dtype": str(dtype).replace("torch.", ""),
        "capacity": capacity,
        "batch": batch,
        "items_per_s": round(rate),
        "us_per_batch": round(batch / rate * 1e6, 2),
        "items_per_cpu_s": round(cpu_rate),
        "torch_threads": torch.get_num_threads(),
    }


# Run by the peers' python after the source of _rate. Prints JSON lines like ours (or a
# "skipped" note per peer).
_PEER_CODE = r"""
import json, sys
import numpy as np
capacity, batch, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
N = 64

def emit(impl, op, dtype, step):
    r, c = _rate(step, batch, seconds)
    print(json.dumps({"bench": "segment_tree", "impl": impl, "op": op, "dtype": dtype,
        "capacity": capacity, "batch": batch, "items_per_s": round(r),
        "us_per_batch": round(batch / r * 1e6, 2), "items_per_cpu_s": round(c)}), flush=True)

rng = np.random.default_rng(0)
indices = rng.integers(0, capacity, size=(N, batch))
priorities = rng.random((N, batch)) + 1e-3

try:
    import tianshou
    from tianshou.data.utils.segtree import SegmentTree
except Exception as err:
    print(json.dumps({"bench": "segment_tree", "impl": "tianshou", "skipped": repr(err)[:300]}))
else:
    impl = "tianshou-" + tianshou.__version__ + "-numba"
    tree = SegmentTree(capacity)
    tree[np.arange(capacity)] = rng.random(capacity) + 1e-3
    def update(k):
        tree[indices[k % N]] = priorities[k % N]
    def sample(k):
        # tianshou asserts v < total; the draw stays below it.
        tree.get_prefix_sum_idx(rng.random(batch) * tree.reduce() * (1 - 1e-12))
    emit(impl, "update", "float64", update)
    emit(impl, "sample", "float64", sample)

try:
    import torch
    torch.set_num_threads(1)
    from torchrl._torchrl import SumSegmentTreeFp32
except Exception as err:
    print(json.dumps({"bench": "segment_tree", "impl": "torchrl-peer-cpp",
                      "skipped": repr(err)[:300]}))
else:
    import torchrl
    tree = SumSegmentTreeFp32(capacity)
    tree.update(np.arange(capacity), (rng.random(capacity) + 1e-3).astype(np.float32))
    pr32 = priorities.astype(np.float32)
    def update(k):
        tree.update(indices[k % N], pr32[k % N])
    def sample(k):
        tree.scan_lower_bound((rng.random(batch) * tree.query(0, capacity)).astype(np.float32))
    emit("torchrl-" + torchrl.__version__ + "-cpp", "update", "float32", update)
    emit("torchrl-" + torchrl.__version__ + "-cpp", "sample", "float32", sample)
"""


def bench_peers(capacity: int, batch: int, seconds: float) -> None:
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    if not os.path.exists(python):
        _emit({"impl": "peers", "skipped": f"no peers python at {python} (TORCHRL_PEERS_PYTHON)"})
        return
    # Run outside the repo so the peers' `torchrl` is imported, not ours.
    code = "\n".join(
        [
            "from __future__ import annotations",
            "import time",
            "from collections.abc import Callable",
            inspect.getsource(_rate),
            _PEER_CODE,
        ]
    )
    proc = subprocess.run(
        [python, "-c", code, str(capacity), str(batch), str(seconds)],
        capture_output=True,
        text=True,
        cwd="/",
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""},
    )
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        _emit({"impl": "peers", "skipped": f"peer run failed: {proc.stderr.strip()[-300:]}"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=0.3, help="per timed run (best of 5)")
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    bench_torchrl(args.capacity, args.batch, args.seconds)
    if not args.no_peers:
        bench_peers(args.capacity, args.batch, args.seconds)


if __name__ == "__main__":
    main()
