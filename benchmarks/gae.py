"""GAE on 1000 trajectories x 1000 steps: ours (C++ default, vectorized, torch loop) and peers.

Data: ``[B, T, 1] = [1000, 1000, 1]`` float32, ``done`` with probability 0.001 per step
(``terminated = done``), gamma 0.99, lambda 0.95; ``next_state_value[t] = state_value[t + 1]``
inside a row so every library computes the same advantages. torch runs with 1 thread
(``torch.set_num_threads(1)``). Each implementation gets its input in its native layout, prepared
outside the timed region; only the advantage computation is timed (median and best of ``--reps``).

Measured implementations:

- ``torchrl (ours)``: ``generalized_advantage_estimate`` (C++ kernel on CPU);
- ``torchrl-vec (ours)``: ``vec_generalized_advantage_estimate`` (blocked discount matrices);
- ``torchrl-loop (ours)``: the torch fallback (loop over time, vectorized over the batch), used
  with autograd or without the extension;
- ``numpy-loop``: a plain NumPy loop over time, vectorized over the batch, on time-major arrays;
- peers, run by ``TORCHRL_PEERS_PYTHON`` (default ``/work/peers-venv/bin/python``) with
  ``benchmarks/_peers/gae_peers.py``: TorchRL's ``generalized_advantage_estimate`` and
  ``vec_generalized_advantage_estimate``, SB3's ``RolloutBuffer.compute_returns_and_advantage``
  and Tianshou's numba GAE kernel. Skipped with a JSON note when that python is absent.

Every record carries ``max_abs_diff``, the largest difference from our default's advantages.
Prints one JSON object per line. Usage: ``python benchmarks/gae.py [--reps 20] [--no-peers]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

import torchrl._recursions as recursions
from torchrl.objectives.value import functional as vf

torch.set_num_threads(1)

B, T = 1000, 1000
GAMMA, LMBDA, DONE_P = 0.99, 0.95, 0.001


def _emit(record: dict) -> None:
    print(json.dumps({"bench": "gae", **record}), flush=True)


def _time(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, min(times) * 1e3


def make_data(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((B, T + 1), dtype=np.float32)
    return {
        "reward": rng.standard_normal((B, T), dtype=np.float32),
        "state_value": np.ascontiguousarray(values[:, :T]),
        "next_state_value": np.ascontiguousarray(values[:, 1:]),
        "done": rng.random((B, T)) < DONE_P,
    }


def numpy_gae(
    reward: np.ndarray, value: np.ndarray, next_value: np.ndarray, done: np.ndarray
) -> np.ndarray:
    """Time-major ``[T, B]`` arrays; one vectorized step per time index, backwards."""
    not_done = 1.0 - done.astype(np.float32)
    delta = reward + GAMMA * next_value * not_done - value
    decay = np.float32(GAMMA * LMBDA) * not_done
    adv = np.empty_like(delta)
    last = np.zeros(delta.shape[1], dtype=np.float32)
    for t in range(delta.shape[0] - 1, -1, -1):
        last = delta[t] + decay[t] * last
        adv[t] = last
    return adv


def run_ours(data: dict[str, np.ndarray], reps: int) -> np.ndarray:
    tensors = {k: torch.from_numpy(v).unsqueeze(-1) for k, v in data.items()}
    args = (
        GAMMA,
        LMBDA,
        tensors["state_value"],
        tensors["next_state_value"],
        tensors["reward"],
        tensors["done"],
    )
    common = {"shape": [B, T, 1], "dtype": "float32", "torch_threads": torch.get_num_threads()}

    ref = vf.generalized_advantage_estimate(*args)[0]
    median, best = _time(lambda: vf.generalized_advantage_estimate(*args), reps)
    backend = "cpp" if hasattr(recursions._C, "value_recurrence") else "torch-loop (no extension)"
    _emit(
        {
            "impl": "torchrl (ours)",
            "fn": "generalized_advantage_estimate",
            "backend": backend,
            "median_ms": round(median, 3),
            "best_ms": round(best, 3),
            "max_abs_diff": 0.0,
            **common,
        }
    )

    vec = vf.vec_generalized_advantage_estimate(*args)[0]
    median, best = _time(lambda: vf.vec_generalized_advantage_estimate(*args), max(reps // 4, 3))
    _emit(
        {
            "impl": "torchrl-vec (ours)",
            "fn": "vec_generalized_advantage_estimate",
            "median_ms": round(median, 3),
            "best_ms": round(best, 3),
            "max_abs_diff": float((vec - ref).abs().max()),
            **common,
        }
    )

    saved = recursions._C
    recursions._C = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loop = vf.generalized_advantage_estimate(*args)[0]
            median, best = _time(
                lambda: vf.generalized_advantage_estimate(*args), max(reps // 4, 3)
            )
    finally:
        recursions._C = saved
    _emit(
        {
            "impl": "torchrl-loop (ours)",
            "fn": "generalized_advantage_estimate without the extension",
            "median_ms": round(median, 3),
            "best_ms": round(best, 3),
            "max_abs_diff": float((loop - ref).abs().max()),
            **common,
        }
    )

    time_major = {k: np.ascontiguousarray(v.T) for k, v in data.items()}
    tm_args = (
        time_major["reward"],
        time_major["state_value"],
        time_major["next_state_value"],
        time_major["done"],
    )
    adv = numpy_gae(*tm_args)
    median, best = _time(lambda: numpy_gae(*tm_args), reps)
    _emit(
        {
            "impl": "numpy-loop",
            "fn": "loop over time on [T, B] arrays",
            "median_ms": round(median, 3),
            "best_ms": round(best, 3),
            "max_abs_diff": float(np.abs(adv.T - ref.squeeze(-1).numpy()).max()),
            **common,
        }
    )
    return ref.squeeze(-1).numpy()


def run_peers(data: dict[str, np.ndarray], ours: np.ndarray, reps: int) -> None:
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    if not Path(python).exists():
        _emit({"impl": "peers", "skipped": f"no peers python at {python}"})
        return
    script = Path(__file__).resolve().parent / "_peers" / "gae_peers.py"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gae_data.npz"
        np.savez(path, advantage=ours, **data)
        # Run from the temp dir so that ``import torchrl`` finds TorchRL, not this checkout.
        proc = subprocess.run(
            [python, str(script), str(path), str(reps), str(GAMMA), str(LMBDA)],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=1200,
        )
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            print(line, flush=True)
    if proc.returncode != 0:
        _emit({"impl": "peers", "skipped": f"peer run failed: {proc.stderr[-400:]}"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    data = make_data()
    ours = run_ours(data, args.reps)
    if not args.no_peers:
        run_peers(data, ours, args.reps)


if __name__ == "__main__":
    sys.exit(main())
