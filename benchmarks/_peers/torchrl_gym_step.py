"""Peer side of ``benchmarks/gym_step.py``: TorchRL's own ``GymEnv`` on the same loops.

Run by the peers' python (``TORCHRL_PEERS_PYTHON``) from outside the repo, so that ``import
torchrl`` finds TorchRL and not this package. Prints one JSON object per measurement.

Usage: ``python torchrl_gym_step.py STEPS NUM_ENVS``
"""

from __future__ import annotations

import json
import sys
import time
import warnings


def main() -> None:
    steps, num_envs = int(sys.argv[1]), int(sys.argv[2])
    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    try:
        import torchrl
        from torchrl.envs import GymEnv
    except Exception as err:  # a peer that does not import is reported, not fatal
        print(json.dumps({"bench": "gym_step", "impl": "torchrl-peer", "skipped": repr(err)[:300]}))
        return
    impl = f"torchrl-{torchrl.__version__}"
    kwargs = {"num_envs": num_envs} if num_envs else {}
    env = GymEnv("CartPole-v1", **kwargs)
    env.set_seed(0)
    batch = max(num_envs, 1)

    def emit(loop: str, seconds: float, n: int) -> None:
        print(
            json.dumps(
                {
                    "bench": "gym_step",
                    "impl": impl,
                    "env": "CartPole-v1",
                    "num_envs": num_envs,
                    "loop": loop,
                    "steps_per_s": round(n * batch / seconds),
                    "torch_threads": torch.get_num_threads(),
                }
            ),
            flush=True,
        )

    env.rollout(100, break_when_any_done=False)  # warm-up
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        env.rollout(steps, break_when_any_done=False)
        best = min(best, time.perf_counter() - t0)
    emit("rollout", best, steps)

    best = float("inf")
    for _ in range(3):
        td = env.reset()
        t0 = time.perf_counter()
        for _ in range(steps):
            td = env.rand_action(td)
            _, td = env.step_and_maybe_reset(td)
        best = min(best, time.perf_counter() - t0)
    emit("step_and_maybe_reset", best, steps)


if __name__ == "__main__":
    main()
