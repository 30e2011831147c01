"""d3rlpy 2.8.1's replay buffer on a D4RL-format file, for ``benchmarks/offline_data.py``.

Runs INSIDE the d3rlpy venv (default ``/work/d3rlpy-venv/bin/python``), started by the driver with
a working directory outside our repository so that nothing of ours is on the path. What it does,
the way d3rlpy's own ``d3rlpy.datasets.get_d4rl`` does it:

1. reads ``observations``, ``actions``, ``rewards``, ``terminals`` and ``timeouts`` from the file
   into memory with h5py (``read_s``);
2. builds ``d3rlpy.dataset.MDPDataset(observations, actions, rewards, terminals, timeouts)``, an
   in-memory ``ReplayBuffer`` of episodes (``build_s``);
3. samples batches with ``sample_transition_batch(batch_size)`` for ``--seconds`` after a short
   warm-up (``transitions_per_s``).

Resident memory (``/proc/self/status``) is recorded after the imports, after reading, after
building and after sampling. Torch (imported by d3rlpy) runs on 1 thread, as ours.

Usage::

    python d3rlpy_offline.py --file data.hdf5 --out result.json [--batch-size 256] [--seconds 3]

The result (one JSON object) is written to ``--out``; d3rlpy's own log lines go to stdout.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

RSS_FIELDS = {"VmRSS": "rss", "RssAnon": "rss_anon", "RssFile": "rss_file", "VmHWM": "rss_peak"}
WARMUP_BATCHES = 5


def rss() -> dict[str, int]:
    """Resident memory of this process in bytes (total, anonymous, file-backed, peak)."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in RSS_FIELDS:
                out[RSS_FIELDS[name]] = int(value.split()[0]) * 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--file", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()

    import d3rlpy
    import h5py
    import numpy as np
    import torch

    torch.set_num_threads(1)
    import_s = time.perf_counter() - T0
    gc.collect()
    rss_start = rss()

    t0 = time.perf_counter()
    with h5py.File(args.file, "r") as f:
        arrays = {
            k: np.asarray(f[k][()])
            for k in ("observations", "actions", "rewards", "terminals", "timeouts")
        }
    read_s = time.perf_counter() - t0
    rss_read = rss()

    t0 = time.perf_counter()
    dataset = d3rlpy.dataset.MDPDataset(
        observations=arrays["observations"],
        actions=arrays["actions"],
        rewards=arrays["rewards"],
        terminals=arrays["terminals"],
        timeouts=arrays["timeouts"],
    )
    build_s = time.perf_counter() - t0
    rss_built = rss()

    batch = dataset.sample_transition_batch(args.batch_size)
    for _ in range(WARMUP_BATCHES):
        dataset.sample_transition_batch(args.batch_size)
    batches = 0
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    elapsed = 0.0
    while elapsed < args.seconds:
        dataset.sample_transition_batch(args.batch_size)
        batches += 1
        elapsed = time.perf_counter() - t0
    cpu = max(time.process_time() - cpu0, 1e-9)
    rss_sampled = rss()

    result = {
        "d3rlpy_version": d3rlpy.__version__,
        "torch_version": torch.__version__,
        "import_s": round(import_s, 3),
        "read_s": round(read_s, 3),
        "build_s": round(build_s, 3),
        "episodes": len(dataset.episodes),
        # d3rlpy keeps no transition for the last step of an episode cut by a timeout (it has no
        # next observation to pair it with), so this is a little below the file's length.
        "transitions": int(dataset.transition_count),
        "batch_size": args.batch_size,
        "batch_shapes": {
            k: list(getattr(batch, k).shape)
            for k in ("observations", "actions", "rewards", "next_observations", "terminals")
        },
        "batches": batches,
        "sample_s": round(elapsed, 3),
        "transitions_per_s": batches * args.batch_size / elapsed,
        "transitions_per_cpu_s": batches * args.batch_size / cpu,
        "rss_start": rss_start,
        "rss_after_read": rss_read,
        "rss_after_build": rss_built,
        "rss_after_sample": rss_sampled,
        "pid": os.getpid(),
    }
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
