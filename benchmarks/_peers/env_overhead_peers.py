"""Peer side of ``benchmarks/env_overhead.py``: TorchRL's and SB3's envs on the same loops.

Run by the peers' python (``TORCHRL_PEERS_PYTHON``) from outside the repo, so that ``import
torchrl`` finds TorchRL and not this package. Prints one JSON object per measurement, in the
format of ``env_overhead.py``; a peer that fails to import or run is reported, not fatal.

Usage: ``python env_overhead_peers.py --frames N --repeats K --envs CartPole-v1,Pendulum-v1``
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
import warnings
from functools import partial

N_ENVS = 8
CHUNK = 500  # steps per rollout call


def _emit(**record: object) -> None:
    print(json.dumps({"bench": "env_overhead", **record}), flush=True)


def _measure(env_name, impl, loop, frames, repeats, run) -> None:
    import torch

    run()
    best_wall, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        cpu, wall = time.process_time(), time.perf_counter()
        run()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    _emit(
        env=env_name,
        impl=impl,
        loop=loop,
        steps_per_s=round(frames / best_wall),
        us_per_frame=round(best_wall / frames * 1e6, 2),
        cpu_us_per_frame=round(best_cpu / frames * 1e6, 2),
        torch_threads=torch.get_num_threads(),
    )


def _rollout(env, steps: int, chunk: int):
    def run() -> None:
        done = 0
        while done < steps:
            n = min(chunk, steps - done)
            env.rollout(n, break_when_any_done=False)
            done += n

    return run


def _guard(impl: str, env_name: str, fn) -> None:
    try:
        fn()
    except Exception as err:  # one failing peer must not hide the others
        _emit(
            env=env_name,
            impl=impl,
            note=f"failed: {err!r}"[:300],
            trace=traceback.format_exc()[-800:],
        )


def _make_gym(env_name: str):
    from torchrl.envs import GymEnv

    return GymEnv(env_name)


def _make_serial(env_name: str, n: int):
    from torchrl.envs import SerialEnv

    return SerialEnv(n, partial(_make_gym, env_name))


def bench_torchrl(env_name: str, frames: int, repeats: int) -> None:
    import torchrl
    from torchrl.envs import ParallelEnv

    version = torchrl.__version__

    def gym_env() -> None:
        env = _make_gym(env_name)
        env.set_seed(0)
        _measure(
            env_name,
            "torchrl GymEnv",
            f"rollout (torchrl {version})",
            frames,
            repeats,
            _rollout(env, frames, CHUNK),
        )

        def loop() -> None:
            td = env.reset()
            for _ in range(frames):
                td = env.rand_action(td)
                _, td = env.step_and_maybe_reset(td)

        _measure(
            env_name,
            "torchrl GymEnv step_and_maybe_reset",
            f"loop (torchrl {version})",
            frames,
            repeats,
            loop,
        )
        env.close()

    def batched(name: str, build) -> None:
        steps = frames // N_ENVS
        env = build()
        try:
            env.set_seed(0)
            _measure(
                env_name,
                f"torchrl {name}",
                f"rollout (torchrl {version})",
                steps * N_ENVS,
                repeats,
                _rollout(env, steps, CHUNK),
            )
        finally:
            env.close()

    _guard("torchrl GymEnv", env_name, gym_env)
    _guard(
        "torchrl SerialEnv(8)",
        env_name,
        lambda: batched("SerialEnv(8)", lambda: _make_serial(env_name, N_ENVS)),
    )
    _guard(
        "torchrl ParallelEnv(2x4)",
        env_name,
        lambda: batched(
            "ParallelEnv(2x4)", lambda: ParallelEnv(2, partial(_make_serial, env_name, 4))
        ),
    )


def bench_sb3(env_name: str, frames: int, repeats: int) -> None:
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    version = stable_baselines3.__version__
    steps = frames // N_ENVS

    def vec(name: str, cls) -> None:
        venv = cls([partial(gym.make, env_name)] * N_ENVS)
        try:
            venv.seed(0)
            venv.reset()
            space = venv.action_space
            space.seed(0)

            def run() -> None:
                for _ in range(steps):
                    venv.step(np.stack([space.sample() for _ in range(N_ENVS)]))

            _measure(
                env_name, f"sb3 {name}", f"step loop (sb3 {version})", steps * N_ENVS, repeats, run
            )
        finally:
            venv.close()

    _guard("sb3 DummyVecEnv(8)", env_name, lambda: vec("DummyVecEnv(8)", DummyVecEnv))
    _guard("sb3 SubprocVecEnv(8)", env_name, lambda: vec("SubprocVecEnv(8)", SubprocVecEnv))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=16000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--envs", default="CartPole-v1,Pendulum-v1")
    parser.add_argument("--rollout-steps", type=int, default=500)
    args = parser.parse_args()
    global CHUNK
    CHUNK = args.rollout_steps
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    for env_name in args.envs.split(","):
        for name, bench in (("torchrl", bench_torchrl), ("sb3", bench_sb3)):
            try:
                bench(env_name, args.frames, args.repeats)
            except Exception as err:  # e.g. the peer is not installed
                _emit(env=env_name, impl=name, note=f"skipped: {err!r}"[:300])


if __name__ == "__main__":
    main()
