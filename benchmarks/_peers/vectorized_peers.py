"""Peer side of ``benchmarks/vectorized.py``: TorchRL's collector on its ``VmasEnv``.

Run by the peers' python (``TORCHRL_PEERS_PYTHON``) from outside the repo, so that ``import
torchrl`` finds TorchRL. Same workload: VMAS ``simple_spread``, continuous actions, episodes of
100 steps, random policy, batches of ``num_envs * steps`` frames, 1 torch thread. Prints one
JSON object per number of envs.

Usage: ``python vectorized_peers.py SECONDS STEPS NUM_ENVS [NUM_ENVS ...]``
"""

from __future__ import annotations

import json
import sys
import time
import traceback
import warnings

import torch

SCENARIO = "simple_spread"
MAX_STEPS = 100


def _emit(record: dict) -> None:
    print(json.dumps({"impl": "torchrl", **record}), flush=True)


def run(num_envs: int, steps: int, seconds: float) -> dict:
    import torchrl.collectors as collectors
    from torchrl.envs.libs.vmas import VmasEnv

    # TorchRL renamed SyncDataCollector to Collector (0.11+); take whichever this version has
    SyncDataCollector = getattr(collectors, "SyncDataCollector", None) or collectors.Collector

    env = VmasEnv(SCENARIO, num_envs=num_envs, continuous_actions=True, max_steps=MAX_STEPS, seed=0)
    collector = SyncDataCollector(env, None, frames_per_batch=num_envs * steps, total_frames=-1)
    iterator = iter(collector)
    next(iterator)  # warm-up
    frames, batches = 0, 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while True:
        frames += next(iterator).numel()
        batches += 1
        wall = time.perf_counter() - wall0
        if wall >= seconds and batches >= 2:
            break
    cpu = time.process_time() - cpu0
    collector.shutdown()
    return {
        "frames": frames,
        "frames_per_s": round(frames / wall, 1),
        "frames_per_cpu_s": round(frames / max(cpu, 1e-9), 1),
    }


def main() -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    seconds, steps = float(sys.argv[1]), int(sys.argv[2])
    for n in map(int, sys.argv[3:]):
        try:
            _emit({"num_envs": n, **run(n, steps, seconds)})
        except Exception as err:  # report and go on with the next size
            _emit({"num_envs": n, "error": repr(err), "trace": traceback.format_exc()[-800:]})


if __name__ == "__main__":
    main()
