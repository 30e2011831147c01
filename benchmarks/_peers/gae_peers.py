"""Peer side of ``benchmarks/gae.py``: TorchRL, SB3 and Tianshou GAE on the same data.

Run by the peers' python (``TORCHRL_PEERS_PYTHON``) from outside the repo, so that ``import
torchrl`` finds TorchRL and not this package. Reads the ``.npz`` written by ``gae.py`` (``[B, T]``
float32 arrays, plus our advantages for the ``max_abs_diff`` check) and prints one JSON object per
measurement. Only the advantage computation is timed; inputs are put in each library's native
layout beforehand.

Usage: ``python gae_peers.py DATA.npz REPS GAMMA LMBDA``
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable

import numpy as np


def _time(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, min(times) * 1e3


def _emit(impl: str, fn: str, timing: tuple[float, float], diff: float, **extra) -> None:
    record = {
        "bench": "gae",
        "impl": impl,
        "fn": fn,
        "median_ms": round(timing[0], 3),
        "best_ms": round(timing[1], 3),
        "max_abs_diff": diff,
        **extra,
    }
    print(json.dumps(record), flush=True)


def _skip(impl: str, err: BaseException) -> None:
    print(json.dumps({"bench": "gae", "impl": impl, "skipped": repr(err)[:300]}), flush=True)


def bench_torchrl(data, ours, reps, gamma, lmbda) -> None:
    import torch

    torch.set_num_threads(1)
    try:
        import torchrl
        from torchrl.objectives.value.functional import (
            generalized_advantage_estimate,
            vec_generalized_advantage_estimate,
        )
    except Exception as err:  # a peer that does not import is reported, not fatal
        _skip("torchrl-peer", err)
        return
    t = {k: torch.from_numpy(data[k]).unsqueeze(-1) for k in data.files if k != "advantage"}
    args = (gamma, lmbda, t["state_value"], t["next_state_value"], t["reward"], t["done"])
    extra = {"torch_threads": torch.get_num_threads(), "dtype": "float32"}
    for fn, reps_fn in (
        (generalized_advantage_estimate, reps),
        (vec_generalized_advantage_estimate, max(reps // 4, 3)),
    ):
        adv = fn(*args, t["done"])[0]
        timing = _time(lambda fn=fn: fn(*args, t["done"]), reps_fn)
        diff = float(np.abs(adv.squeeze(-1).numpy() - ours).max())
        _emit(f"torchrl-{torchrl.__version__}", fn.__name__, timing, diff, **extra)


def bench_sb3(data, ours, reps, gamma, lmbda) -> None:
    try:
        import stable_baselines3
        import torch
        from gymnasium import spaces
        from stable_baselines3.common.buffers import RolloutBuffer
    except Exception as err:
        _skip("sb3", err)
        return
    torch.set_num_threads(1)
    n_envs, steps = data["reward"].shape
    box = spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
    buf = RolloutBuffer(steps, box, box, device="cpu", gae_lambda=lmbda, gamma=gamma, n_envs=n_envs)
    # SB3 is time-major [T, n_envs]; the next value of step t is values[t + 1], masked by
    # episode_starts[t + 1] (= done at t), and last_values / dones close the buffer.
    buf.rewards[:] = data["reward"].T
    buf.values[:] = data["state_value"].T
    done = data["done"].T.astype(np.float32)
    buf.episode_starts[1:] = done[:-1]
    buf.episode_starts[0] = 0.0
    last_values = torch.from_numpy(np.ascontiguousarray(data["next_state_value"][:, -1]))
    last_dones = np.ascontiguousarray(data["done"][:, -1])

    def run() -> None:
        buf.compute_returns_and_advantage(last_values, last_dones)

    run()
    diff = float(np.abs(buf.advantages.T - ours).max())
    _emit(
        f"sb3-{stable_baselines3.__version__}",
        "RolloutBuffer.compute_returns_and_advantage",
        _time(run, reps),
        diff,
        dtype="float32",
    )


def bench_tianshou(data, ours, reps, gamma, lmbda) -> None:
    try:
        import tianshou
        from tianshou.algorithm.algorithm_base import _gae
    except Exception as err:
        _skip("tianshou", err)
        return
    n_envs, steps = data["reward"].shape
    # Tianshou's buffers are flat: trajectories one after the other, end_flag on every episode
    # end and at the end of each row; v_s_ is already zeroed after terminations.
    done = data["done"]
    end_flag = done.copy()
    end_flag[:, -1] = True
    flat = {
        "v_s": data["state_value"].ravel(),
        "v_s_": (data["next_state_value"] * ~done).ravel(),
        "rew": data["reward"].ravel(),
        "end_flag": end_flag.ravel(),
    }

    def run():
        return _gae(flat["v_s"], flat["v_s_"], flat["rew"], flat["end_flag"], gamma, lmbda)

    adv = run()  # numba compiles on the first call
    diff = float(np.abs(adv.reshape(n_envs, steps) - ours).max())
    _emit(
        f"tianshou-{tianshou.__version__}",
        "numba _gae kernel (flat arrays)",
        _time(run, reps),
        diff,
        dtype="float32",
    )


def main() -> None:
    path, reps, gamma, lmbda = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    warnings.filterwarnings("ignore")
    data = np.load(path)
    ours = data["advantage"]
    for bench in (bench_torchrl, bench_sb3, bench_tianshou):
        bench(data, ours, reps, gamma, lmbda)


if __name__ == "__main__":
    main()
