"""Steps per second of gymnasium CartPole: raw gymnasium, torchrl's ``GymEnv``, and TorchRL's.

Loops measured (no policy: actions are drawn at random, as ``rollout`` does without one):

- ``raw_gymnasium``: ``env.step(env.action_space.sample())`` with a reset at each episode end, the
  reference any wrapper pays on top of (for ``--num-envs N``: a ``SyncVectorEnv`` with
  autoreset disabled, resetting finished sub-envs with a mask, as ``GymEnv`` does);
- ``rollout``: ``GymEnv("CartPole-v1").rollout(steps, break_when_any_done=False)`` (random actions
  from the action spec, finished sub-envs reset in place, the result stacked);
- ``step_and_maybe_reset``: ``env.rand_action(td)`` + ``env.step_and_maybe_reset(td)`` in a loop.

TorchRL's ``GymEnv`` runs the same loops in the peers' venv (``TORCHRL_PEERS_PYTHON``, default
``/work/peers-venv/bin/python``; skipped with a note when absent). ``steps_per_s`` counts env steps
(sub-env steps for a vector env); the best of 5 runs is kept. torch runs with 1 thread
(``torch.set_num_threads(1)``). Prints one JSON object per measurement.

``--breakdown`` adds the cost of each layer of one step (gymnasium's ``step``, ``GymEnv._step``,
``EnvBase.step``, ``rand_action``) in microseconds per call.

Usage: ``python benchmarks/gym_step.py [--steps N] [--num-envs N] [--no-peers] [--profile]
[--breakdown]``
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

from torchrl.envs.libs.gym import GymEnv

ENV = "CartPole-v1"


def _emit(record: dict) -> None:
    print(json.dumps({"bench": "gym_step", "env": ENV, **record}), flush=True)


def _best(run: Callable[[], None], repeats: int = 5) -> float:
    run()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def _record(impl: str, loop: str, num_envs: int, steps: int, seconds: float) -> dict:
    batch = max(num_envs, 1)
    return {
        "impl": impl,
        "num_envs": num_envs,
        "loop": loop,
        "steps_per_s": round(steps * batch / seconds),
        "us_per_step": round(seconds / steps * 1e6, 2),
        "torch_threads": torch.get_num_threads(),
    }


def bench_raw(steps: int, num_envs: int) -> None:
    import gymnasium as gym

    if num_envs:
        env = gym.make_vec(
            ENV,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED},
        )
    else:
        env = gym.make(ENV)
    env.reset(seed=0)

    def run() -> None:
        step, sample = env.step, env.action_space.sample
        for _ in range(steps):
            _, _, terminated, truncated, _ = step(sample())
            if num_envs:
                done = terminated | truncated
                if done.any():
                    env.reset(options={"reset_mask": done})
            elif terminated or truncated:
                env.reset()

    _emit(_record(f"gymnasium-{gym.__version__}", "raw_gymnasium", num_envs, steps, _best(run)))


def bench_ours(steps: int, num_envs: int, profile: bool) -> None:
    env = GymEnv(ENV, num_envs=num_envs) if num_envs else GymEnv(ENV)
    env.set_seed(0)

    def rollout() -> None:
        env.rollout(steps, break_when_any_done=False)

    def step_loop() -> None:
        td = env.reset()
        rand_action, step_and_maybe_reset = env.rand_action, env.step_and_maybe_reset
        for _ in range(steps):
            td = rand_action(td)
            _, td = step_and_maybe_reset(td)

    for loop, run in (("rollout", rollout), ("step_and_maybe_reset", step_loop)):
        _emit(_record("torchrl(ours)", loop, num_envs, steps, _best(run)))
    if profile:
        profiler = cProfile.Profile()
        profiler.runcall(rollout)
        stats = pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime")
        stats.print_stats(25)


def bench_breakdown(steps: int, num_envs: int) -> None:
    """Microseconds per call of each layer of a step, to see where a rollout spends its time."""
    env = GymEnv(ENV, num_envs=num_envs) if num_envs else GymEnv(ENV)
    env.set_seed(0)
    td = env.rand_action(env.reset())
    gym_env, action = env.env, env._write_action(td.get("action"))
    reset_every = 5  # keeps the env away from its episode end (a constant action ends it fast)

    def timed(name: str, call: Callable[[], object]) -> None:
        def run() -> None:
            for i in range(steps):
                if i % reset_every == 0:
                    gym_env.reset()
                call()

        seconds = _best(run)
        _emit(
            {
                "impl": "torchrl(ours)",
                "num_envs": num_envs,
                "loop": f"breakdown:{name}",
                "us_per_call": round(seconds / steps * 1e6, 2),
            }
        )

    timed("gymnasium env.step", lambda: gym_env.step(action))
    timed("GymEnv._step", lambda: env._step(td))
    timed("EnvBase.step", lambda: env.step(td))
    timed("EnvBase.rand_action", lambda: env.rand_action(td))


def bench_peers(steps: int, num_envs: int) -> None:
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    if not os.path.exists(python):
        _emit({"impl": "torchrl-peer", "skipped": f"no peers python at {python}"})
        return
    script = os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "_peers", "torchrl_gym_step.py"
    )
    # run outside the repo so that the peers' ``torchrl`` is imported, not ours
    proc = subprocess.run(
        [python, script, str(steps), str(num_envs)],
        capture_output=True,
        text=True,
        cwd="/",
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""},
    )
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            print(line, flush=True)
    if proc.returncode != 0:
        _emit({"impl": "torchrl-peer", "skipped": f"peer run failed: {proc.stderr[-300:]}"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2_000, help="steps per timed run")
    parser.add_argument("--num-envs", type=int, default=0, help="0: a single env; N: vector env")
    parser.add_argument("--no-peers", action="store_true", help="skip TorchRL's GymEnv")
    parser.add_argument("--profile", action="store_true", help="cProfile one rollout (stderr)")
    parser.add_argument("--breakdown", action="store_true", help="time each layer of a step")
    args = parser.parse_args()
    torch.set_num_threads(1)
    np.random.seed(0)
    bench_raw(args.steps, args.num_envs)
    bench_ours(args.steps, args.num_envs, args.profile)
    if args.breakdown:
        bench_breakdown(args.steps, args.num_envs)
    if not args.no_peers:
        bench_peers(args.steps, args.num_envs)


if __name__ == "__main__":
    main()
