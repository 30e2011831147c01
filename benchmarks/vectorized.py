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
  default ``/work/peers-venv/bin/python``; skipped with a JSON note when absent or when it has
  no ``vmas``).

A frame is one env step of one sub-env (all agents together). The three cases run one batch
each in turn for ``3 * seconds`` (so that they share the same machine load); each reports
``frames_per_s`` (wall clock), ``frames_per_cpu_s`` (frames per CPU second of the process:
steadier when other jobs share the cores) and ``best_frames_per_cpu_s`` (its best batch), and
the collectors their ratios to raw VMAS (``ratio_to_raw``, ``cpu_ratio_to_raw``,
``best_cpu_ratio_to_raw``). TorchRL's collector runs afterwards on its own. One JSON object per
line. ``--device cuda`` simulates on the GPU (raw VMAS and ours alike; each batch ends with a
synchronize, and the wall-clock rates are the ones to read). Usage: ``python
benchmarks/vectorized.py [--envs 1 16 256 4096] [--seconds 2] [--steps 20] [--no-peers]
[--device cuda]``.
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
from typing import Any

import torch

SCENARIO = "simple_spread"
MAX_STEPS = 100
DEFAULT_ENVS = [1, 4, 16, 64, 256, 1024, 4096]
PEERS = Path(__file__).parent / "_peers" / "vectorized_peers.py"


def _emit(record: dict) -> None:
    print(json.dumps({"bench": "vectorized", "scenario": SCENARIO, **record}), flush=True)


def _interleaved(runners: dict[str, Callable[[], int]], seconds: float) -> dict[str, dict]:
    """Frames per wall and CPU second of each runner, their batches run in turn.

    Running one batch of each case after the other (rather than each case for ``seconds``)
    exposes every case to the same load when other jobs share the cores, so that ratios hold
    even when the absolute figures swing. Besides totals, the best batch of each case is
    reported (``best_frames_per_cpu_s``): the steadiest figure on a busy machine.
    """
    for run in runners.values():
        run()  # warm-up: first resets, buffer allocation
    stats = {name: {"frames": 0, "wall": 0.0, "cpu": 0.0, "best": 0.0} for name in runners}
    start = time.perf_counter()
    rounds = 0
    while rounds < 2 or time.perf_counter() - start < seconds * len(runners):
        for name, run in runners.items():
            wall0, cpu0 = time.perf_counter(), time.process_time()
            frames = run()
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            entry = stats[name]
            entry["frames"] += frames
            entry["wall"] += wall
            entry["cpu"] += cpu
            entry["best"] = max(entry["best"], frames / max(cpu, 1e-9))
        rounds += 1
    return {
        name: {
            "frames": entry["frames"],
            "frames_per_s": round(entry["frames"] / entry["wall"], 1),
            "frames_per_cpu_s": round(entry["frames"] / max(entry["cpu"], 1e-9), 1),
            "best_frames_per_cpu_s": round(entry["best"], 1),
        }
        for name, entry in stats.items()
    }


def _synced(run_batch: Callable[[], int], device: str) -> Callable[[], int]:
    """``run_batch`` followed by ``torch.cuda.synchronize()`` on a GPU: the clocks then count
    the batch's queued kernels."""
    if torch.device(device).type != "cuda":
        return run_batch

    def run() -> int:
        frames = run_batch()
        torch.cuda.synchronize()
        return frames

    return run


def raw_vmas(num_envs: int, steps: int, device: str = "cpu") -> Callable[[], int]:
    """The reference: VMAS stepped by hand with fresh uniform random actions every step."""
    import vmas

    env = vmas.make_env(
        SCENARIO,
        num_envs=num_envs,
        device=device,
        continuous_actions=True,
        max_steps=MAX_STEPS,
        seed=0,
    )
    env.reset()
    shapes = [(num_envs, *space.shape) for space in env.action_space.spaces]

    def run_batch() -> int:
        for _ in range(steps):
            actions = [torch.rand(shape, device=device).mul_(2).sub_(1) for shape in shapes]
            _, _, dones, _ = env.step(actions)
            if dones.any():
                if dones.all():
                    env.reset()
                else:
                    for i in dones.nonzero().flatten().tolist():
                        env.reset_at(i)
        return num_envs * steps

    return _synced(run_batch, device)


def ours(
    num_envs: int, steps: int, same_td: bool = False, device: str = "cpu"
) -> tuple[Callable[[], int], Any]:
    """Our ``SyncDataCollector`` on our ``VmasEnv`` with the random policy.

    ``same_td=True`` passes ``return_same_td=True``: the batch is the collector's buffer, not a
    batch of the caller's own (valid when each batch is consumed before the next one is
    collected). Returns the batch runner and the collector (to shut down).
    """
    from torchrl.collectors import SyncDataCollector
    from torchrl.envs.libs.vmas import VmasEnv

    env = VmasEnv(
        SCENARIO,
        num_envs=num_envs,
        continuous_actions=True,
        max_steps=MAX_STEPS,
        seed=0,
        device=device,
    )
    collector = SyncDataCollector(
        env, None, frames_per_batch=num_envs * steps, total_frames=-1, return_same_td=same_td
    )
    iterator = iter(collector)

    def run_batch() -> int:
        return next(iterator).numel()

    return _synced(run_batch, device), collector


def peers(envs: list[int], steps: int, seconds: float) -> list[dict]:
    """TorchRL's collector, run by the peers' python from outside this repo."""
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    if not Path(python).exists():
        return [{"impl": "torchrl", "skipped": f"no peers python at {python}"}]
    check = subprocess.run([python, "-c", "import vmas"], capture_output=True, cwd="/")
    if check.returncode != 0:
        return [
            {"impl": "torchrl", "skipped": f"vmas is not installed in the peers venv ({python})"}
        ]
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
    parser.add_argument(
        "--device", default="cpu", help="where VMAS simulates (cuda: read the wall-clock rates)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)

    raw_rates: dict[int, float] = {}
    raw_cpu: dict[int, float] = {}
    for n in args.envs:
        mine = ours(n, args.steps, device=args.device)
        same = ours(n, args.steps, same_td=True, device=args.device)
        runners = {
            "raw_vmas": raw_vmas(n, args.steps, args.device),
            "ours": mine[0],
            "ours_same_td": same[0],
        }
        try:
            results = _interleaved(runners, args.seconds)
        finally:
            mine[1].shutdown()
            same[1].shutdown()
        raw = results.pop("raw_vmas")
        raw_rates[n], raw_cpu[n] = raw["frames_per_s"], raw["frames_per_cpu_s"]
        _emit({"impl": "raw_vmas", "num_envs": n, "device": args.device, **raw})
        for impl, record in results.items():
            _emit(
                {
                    "impl": impl,
                    "num_envs": n,
                    "device": args.device,
                    **record,
                    "ratio_to_raw": round(record["frames_per_s"] / raw_rates[n], 3),
                    "cpu_ratio_to_raw": round(record["frames_per_cpu_s"] / raw_cpu[n], 3),
                    "best_cpu_ratio_to_raw": round(
                        record["best_frames_per_cpu_s"] / raw["best_frames_per_cpu_s"], 3
                    ),
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
