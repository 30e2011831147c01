"""Env steps per second of envpool's CartPole behind ``MultiThreadedEnv`` vs the alternatives.

Loops measured, all with random actions and finished sub-envs reset in place:

- ``raw_envpool``: ``pool.step(actions)`` with envpool's own auto-reset (reset on the step after
  an episode's end);
- ``raw_envpool+explicit_resets``: ``pool.step`` then ``pool.reset(env_id)`` of the finished
  sub-envs, which is what torchrl's contract needs (the reset observation before the next
  action): the physical reference ``MultiThreadedEnv`` pays on top of;
- ``MultiThreadedEnv``: ``env.rollout(steps, break_when_any_done=False)`` (random actions from
  the action spec, explicit partial resets through ``reset(env_id)``, the result stacked);
- ``GymEnv(num_envs)``: the same rollout over gymnasium's ``SyncVectorEnv`` (one process);
- ``SerialEnv``: the same rollout over ``num_envs`` single ``GymEnv`` (only up to 16 envs).

``steps_per_s`` counts sub-env steps from wall-clock time, ``cpu_steps_per_s`` from
``time.process_time()`` (CPU of every thread of the process, envpool's included): the second is
what to compare on a shared machine. The best of ``--repeats`` runs of each is kept. torch runs
with 1 thread (``torch.set_num_threads(1)``). TorchRL's ``MultiThreadedEnv`` is measured in the
peers' venv when envpool is installed there (``TORCHRL_PEERS_PYTHON``), else a note is printed.
Prints one JSON object per measurement.

Usage: ``python benchmarks/multithreaded_env.py [--steps N] [--num-envs 8 64 512] [--threads T]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch

ENV = "CartPole-v1"


def _emit(record: dict) -> None:
    print(json.dumps({"bench": "envpool", "env": ENV, **record}), flush=True)


def _best(run: Callable[[], None], repeats: int) -> tuple[float, float]:
    run()  # warm-up
    wall = cpu = float("inf")
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        run()
        wall = min(wall, time.perf_counter() - w0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def _record(impl: str, num_envs: int, steps: int, wall: float, cpu: float) -> None:
    _emit(
        {
            "impl": impl,
            "num_envs": num_envs,
            "steps_per_s": round(steps * num_envs / wall),
            "cpu_steps_per_s": round(steps * num_envs / cpu),
            "torch_threads": torch.get_num_threads(),
        }
    )


def bench(steps: int, num_envs: int, threads: int, repeats: int) -> None:
    import envpool

    from torchrl.envs import GymEnv, MultiThreadedEnv, SerialEnv

    with warnings.catch_warnings():
        # envpool's float32 Boxes have float64 bounds: gymnasium warns when the pool builds them
        warnings.simplefilter("ignore", UserWarning)
        pool = envpool.make_gymnasium(ENV, num_envs=num_envs, seed=0, num_threads=threads)
        pool.reset()
    rng = np.random.default_rng(0)

    def raw() -> None:
        step = pool.step
        for _ in range(steps):
            step(rng.integers(0, 2, num_envs))

    _record(f"raw_envpool-{envpool.__version__}", num_envs, steps, *_best(raw, repeats))

    ids = np.arange(num_envs, dtype=np.int32)

    def raw_explicit_resets() -> None:
        step, reset = pool.step, pool.reset
        for _ in range(steps):
            _, _, terminated, truncated, _ = step(rng.integers(0, 2, num_envs))
            done = terminated | truncated
            if done.any():
                reset(ids[done])

    _record("raw_envpool+explicit_resets", num_envs, steps, *_best(raw_explicit_resets, repeats))

    kwargs = {"seed": 0, "num_threads": threads}
    envs: list[tuple[str, Callable[[], object]]] = [
        (
            "MultiThreadedEnv(ours)",
            lambda: MultiThreadedEnv(num_envs, ENV, create_env_kwargs=kwargs),
        ),
        ("GymEnv(num_envs)(ours)", lambda: GymEnv(ENV, num_envs=num_envs)),
    ]
    if num_envs <= 16:
        envs.append(("SerialEnv(GymEnv)(ours)", lambda: SerialEnv(num_envs, lambda: GymEnv(ENV))))
    for name, make in envs:
        env = make()
        env.set_seed(0)
        wall, cpu = _best(lambda env=env: env.rollout(steps, break_when_any_done=False), repeats)
        _record(name, num_envs, steps, wall, cpu)
        env.close()


def bench_peers(steps: int, num_envs: int) -> None:
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    if not os.path.exists(python):
        _emit({"impl": "torchrl-peer", "skipped": f"no peers python at {python}"})
        return
    check = subprocess.run([python, "-c", "import envpool"], capture_output=True, cwd="/")
    if check.returncode != 0:
        _emit({"impl": "torchrl-peer", "skipped": "envpool is not installed in the peers venv"})
        return
    code = (
        "import sys, time, json, torch; torch.set_num_threads(1)\n"
        "from torchrl.envs import MultiThreadedEnv\n"
        "steps, n = int(sys.argv[1]), int(sys.argv[2])\n"
        f"env = MultiThreadedEnv(n, {ENV!r}); env.set_seed(0)\n"
        "env.rollout(steps, break_when_any_done=False)\n"
        "t, c = time.perf_counter(), time.process_time()\n"
        "env.rollout(steps, break_when_any_done=False)\n"
        "t, c = time.perf_counter() - t, time.process_time() - c\n"
        "import torchrl\n"
        "print(json.dumps({'impl': 'TorchRL-' + torchrl.__version__ + ' MultiThreadedEnv',"
        " 'num_envs': n, 'steps_per_s': round(steps * n / t),"
        " 'cpu_steps_per_s': round(steps * n / c)}))\n"
    )
    proc = subprocess.run(
        [python, "-c", code, str(steps), str(num_envs)],
        capture_output=True,
        text=True,
        cwd="/",  # outside the repo: the peers' torchrl is imported, not ours
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""},
    )
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            _emit(json.loads(line))
    if proc.returncode != 0:
        _emit({"impl": "torchrl-peer", "skipped": f"peer run failed: {proc.stderr[-300:]}"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500, help="steps per timed run")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[8, 64, 512])
    parser.add_argument("--threads", type=int, default=0, help="envpool threads (0: its default)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for n in args.num_envs:
        bench(args.steps, n, args.threads, args.repeats)
        if not args.no_peers:
            bench_peers(args.steps, n)


if __name__ == "__main__":
    main()
