"""What checking actions against the action spec costs per step (``validate_actions``).

For GymEnv CartPole-v1 and Pendulum-v1, ``SerialEnv(8)`` of CartPole (its batched stepper) and
the pure-torch ``PendulumEnv``, a loop of ``rand_action`` + ``step_and_maybe_reset`` runs on one
env with the check switched on and off (``env.validate_actions``), the two interleaved round by
round in alternating order (so that a shared machine's varying load hits both alike),
``--repeats`` rounds of ``--steps`` steps, in CPU time of this process (``time.process_time``):
the best time of each mode, and the median of the rounds' paired differences. ``check_us`` times the check alone on one action. Prints one
JSON object per env.

Usage: ``python benchmarks/action_checks.py [--steps 300] [--repeats 41]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial

import torch
from tensordict import TensorDictBase

from torchrl.envs import EnvBase, GymEnv, PendulumEnv, SerialEnv

torch.set_num_threads(1)


def _serial(validate: bool) -> EnvBase:
    env = SerialEnv(8, partial(GymEnv, "CartPole-v1"))
    env.validate_actions = validate
    return env


CASES: dict[str, Callable[[bool], EnvBase]] = {
    "GymEnv CartPole-v1": lambda v: GymEnv("CartPole-v1", validate_actions=v),
    "GymEnv Pendulum-v1": lambda v: GymEnv("Pendulum-v1", validate_actions=v),
    "SerialEnv(8) CartPole-v1": _serial,
    "PendulumEnv (pure torch)": lambda v: PendulumEnv(validate_actions=v),
}


def _cpu_us(fn: Callable[[], object], calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls * 1e6


def check_cost(env: EnvBase, td: TensorDictBase, calls: int) -> float:
    """CPU microseconds of the action check alone, in a tight loop (warm caches).

    A single gymnasium env, and a ``SerialEnv`` of them (its batched stepper), check while
    converting the action: there, the cost of the checked conversion minus that of the plain one.
    """
    check = env._spec_cache().check_actions
    if check is not None:
        return _cpu_us(lambda: check(td), calls)
    action = td["action"]
    if isinstance(env, SerialEnv):
        checked, plain = env._stepper.checked_write, env._stepper.write
    else:
        checked, plain = env._checked_write, env._write_action
    return _cpu_us(lambda: checked(action), calls) - _cpu_us(lambda: plain(action), calls)


def measure(name: str, build: Callable[[bool], EnvBase], steps: int, repeats: int) -> dict:
    env = build(True)
    env.set_seed(0)
    td = env.reset()
    rand_action, step = env.rand_action, env.step_and_maybe_reset
    best = {True: float("inf"), False: float("inf")}
    diffs = []
    for round_ in range(repeats + 1):  # the first round warms up
        times = {}
        for validate in (True, False) if round_ % 2 else (False, True):
            env.validate_actions = validate
            start = time.process_time()
            for _ in range(steps):
                _, td = step(rand_action(td))
            times[validate] = (time.process_time() - start) / steps * 1e6
            best[validate] = min(best[validate], times[validate])
        if round_:
            diffs.append(times[True] - times[False])
    alone = check_cost(env, env.rand_action(td), steps * 10)
    env.close()
    return {
        "bench": "action_checks",
        "env": name,
        "cpu_us_per_step_on": round(best[True], 2),
        "cpu_us_per_step_off": round(best[False], 2),
        # the median of the paired differences of the rounds: robust to a varying load
        "difference_us": round(statistics.median(diffs), 2),
        "difference_pct": round(statistics.median(diffs) / best[False] * 100, 1),
        "check_us": round(alone, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps per timed round")
    parser.add_argument("--repeats", type=int, default=41, help="timed rounds")
    args = parser.parse_args()
    for name, build in CASES.items():
        print(json.dumps(measure(name, build, args.steps, args.repeats)), flush=True)


if __name__ == "__main__":
    main()
