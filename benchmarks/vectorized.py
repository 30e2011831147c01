"""Vectorized-simulator throughput: VMAS ``simple_spread`` frames/s against the number of envs.

Three ways to step ``simple_spread`` (3 agents, continuous actions, episodes of 100 steps,
uniform random actions, CPU, torch on 1 thread: ``torch.set_num_threads(1)``):

- ``raw_vmas``: the physical reference, a hand-written loop over ``vmas.make_env`` drawing one
  random action tensor per agent, calling ``env.step`` and resetting finished envs;
- ``ours``: our ``SyncDataCollector(VmasEnv("simple_spread", num_envs=n))`` with its random
  policy, batches of ``n * steps`` frames (every step's data is stored, as training needs);
  ``ours_same_td`` is the same with ``return_same_td=True`` (no copy of each batch);
- ``torchrl``: TorchRL's ``SyncDataCollector`` on its ``VmasEnv``, same settings, run by the
  peers' python (``benchmarks/_peers/vectorized_peers.py`` under ``TORCHRL_PEERS_PYTHON``,
  default ``/work/peers-venv/bin/python``; skipped with a JSON note when absent).

A frame is one env step of one sub-env (all agents together). Each case reports
``frames_per_s`` (wall clock) and ``frames_per_cpu_s`` (frames per CPU second of the process:
steadier when other jobs share the cores), plus ``ratio_to_raw`` for the collectors. One JSON
object per line. Usage: ``python benchmarks/vectorized.py [--envs 1 16 256 4096] [--seconds 2]
[--steps 20] [--no-peers]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

SCENARIO = "simple_spread"
MAX_STEPS = 100
DEFAULT_ENVS = [1, 4, 16, 64, 256, 1024, 4096]
PEERS = Path(__file__).parent / "_peers" / "vectorized_peers.py"


def _emit(record: dict) -> None:
    print(json.dumps({"bench": "vectorized", "scenario": SCENARIO, **record}), flush=True)


def _rate(run_batch: Callable[[], int], seconds: float) -> dict:
    """Frames per wall and per CPU second over batches run for at least ``seconds``."""
    run_batch()  # warm-up: first resets, buffer allocation
    frames, batches = 0, 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while True:
        frames += run_batch()
        batches += 1
        wall = time.perf_counter() - wall0
        if wall >= seconds and batches >= 2:
            break
    cpu = time.process_time() - cpu0
    return {
        "frames": frames,
        "frames_per_s": round(frames / wall, 1),
        "frames_per_cpu_s": round(frames / max(cpu, 1e-9), 1),
    }


def raw_vmas(num_envs: int, steps: int, seconds: float) -> dict:
    """The reference: VMAS stepped by hand with fresh uniform random actions every step."""
    import vmas

    env = vmas.make_env(
        SCENARIO, num_envs=num_envs, continuous_actions=True, max_steps=MAX_STEPS, seed=0
    )
    env.reset()
    shapes = [(num_envs, *space.shape) for space in env.action_space.spaces]

    def run_batch() -> int:
        for _ in range(steps):
            actions = [torch.rand(shape).mul_(2).sub_(1) for shape in shapes]
            _, _, dones, _ = env.step(actions)
            if dones.any():
                if dones.all():
                    env.reset()
                else:
                    for i in dones.nonzero().flatten().tolist():
                        env.reset_at(i)
        return num_envs * steps

    return _rate(run_batch, seconds)


def ours(num_envs: int, steps: int, seconds: float, same_td: bool = False) -> dict:
    """Our ``SyncDataCollector`` on our ``VmasEnv`` with the random policy.

    ``same_td=True`` passes ``return_same_td=True``: the batch is the collector's buffer, not a
    copy of it (valid when each batch is consumed before the next one is collected).
    """
    from torchrl.collectors import SyncDataCollector
    from torchrl.envs.libs.vmas import VmasEnv

    env = VmasEnv(SCENARIO, num_envs=num_envs, continuous_actions=True, max_steps=MAX_STEPS, seed=0)
    collector = SyncDataCollector(
        env, None, frames_per_batch=num_envs * steps, total_frames=-1, return_same_td=same_td
    )
    iterator = iter(collector)

    def run_batch() -> int:
        return next(iterator).numel()

    try:
        return _rate(run_batch, seconds)
    finally:
        collector.shutdown()


def peers(envs: list[int], steps: int, seconds: float) -> list[dict]:
    """TorchRL's collector, run by the peers' python from outside this repo."""
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    if not Path(python).exists():
        return [{"impl": "torchrl", "skipped": f"no peers python at {python}"}]
    cmd = [python, str(PEERS), str(seconds), str(steps), *map(str, envs)]
    env = {**os.environ, "PYTHONPATH": ""}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd="/", env=env, check=False)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 and not records:
        return [{"impl": "torchrl", "skipped": proc.stderr.strip().splitlines()[-1:]}]
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=DEFAULT_ENVS)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=20, help="env steps per collector batch")
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)

    raw_rates: dict[int, float] = {}
    raw_cpu: dict[int, float] = {}
    for n in args.envs:
        raw = raw_vmas(n, args.steps, args.seconds)
        raw_rates[n], raw_cpu[n] = raw["frames_per_s"], raw["frames_per_cpu_s"]
        _emit({"impl": "raw_vmas", "num_envs": n, **raw})
        for impl, same_td in (("ours", False), ("ours_same_td", True)):
            mine = ours(n, args.steps, args.seconds, same_td)
            _emit(
                {
                    "impl": impl,
                    "num_envs": n,
                    **mine,
                    "ratio_to_raw": round(mine["frames_per_s"] / raw_rates[n], 3),
                    "cpu_ratio_to_raw": round(mine["frames_per_cpu_s"] / raw_cpu[n], 3),
                }
            )
    if args.no_peers:
        return
    for record in peers(args.envs, args.steps, args.seconds):
        n = record.get("num_envs")
        if n in raw_rates and "frames_per_s" in record:
            record["ratio_to_raw"] = round(record["frames_per_s"] / raw_rates[n], 3)
            record["cpu_ratio_to_raw"] = round(record["frames_per_cpu_s"] / raw_cpu[n], 3)
        _emit(record)


if __name__ == "__main__":
    sys.exit(main())
