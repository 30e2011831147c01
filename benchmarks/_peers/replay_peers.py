"""Peer side of ``benchmarks/replay.py``: TorchRL's and SB3's replay buffers on the same workload.

Run by the peers' python (``TORCHRL_PEERS_PYTHON``) from outside the repo, so that ``import
torchrl`` finds TorchRL and not this package. Same items (165 raw bytes: observation f32[17],
action f32[6], next observation f32[17], reward f32[1], done bool[1]), same sizes, batches of 256,
extends of 1000, 1 torch thread. Prints one JSON object per measurement.

Usage: ``python replay_peers.py SIZE SECONDS``
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable

BATCH = 256
CHUNK = 1000
EPISODE = 1000
RAW_BYTES = 165


def _emit(impl: str, record: dict) -> None:
    print(json.dumps({"bench": "replay", "impl": impl, **record}), flush=True)


def _skip(impl: str, case: str, err: BaseException) -> None:
    _emit(impl, {"case": case, "skipped": f"{type(err).__name__}: {str(err)[:300]}"})


def rate(step: Callable[[], object], items: int, seconds: float, rounds: int = 5) -> dict:
    for _ in range(20):
        step()
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < 0.2:
        step()
        n += 1
    per_round = max(10, int(n / 0.2 * seconds / rounds))
    rates, cpu_rates = [], []
    for _ in range(rounds):
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(per_round):
            step()
        rates.append(per_round * items / (time.perf_counter() - start))
        cpu_rates.append(per_round * items / max(time.process_time() - cpu_start, 1e-9))
    # Wall clock is the figure; CPU time shows what a quiet machine would give when other
    # processes share the cores (sampling runs on one thread).
    return {
        "items_per_s": round(statistics.median(rates)),
        "best_items_per_s": round(max(rates)),
        "us_per_batch": round(1e6 * items / statistics.median(rates), 1),
        "items_per_cpu_s": round(statistics.median(cpu_rates)),
    }


def make_chunk(n: int, start: int = 0):
    import torch
    from tensordict import TensorDict

    done = torch.zeros(n, 1, dtype=torch.bool)
    steps = torch.arange(start, start + n)
    done[(steps % EPISODE) == EPISODE - 1] = True
    return TensorDict(
        {
            "observation": torch.randn(n, 17),
            "action": torch.randn(n, 6),
            "next": TensorDict(
                {"observation": torch.randn(n, 17), "reward": torch.randn(n, 1), "done": done},
                batch_size=[n],
            ),
        },
        batch_size=[n],
    )


def _fill(rb, chunks) -> float:
    start = time.perf_counter()
    for chunk in chunks:
        rb.extend(chunk)
    return sum(c.batch_size[0] for c in chunks) / (time.perf_counter() - start)


def bench_torchrl(size: int, seconds: float) -> None:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    try:
        import torchrl
        from torchrl.data import (
            LazyMemmapStorage,
            LazyTensorStorage,
            ReplayBuffer,
            SliceSampler,
            TensorDictPrioritizedReplayBuffer,
            TensorDictReplayBuffer,
        )
    except Exception as err:  # noqa: BLE001 - reported as a skip
        _skip("torchrl", "import", err)
        return
    impl = f"torchrl {torchrl.__version__}"
    source = make_chunk(size)
    chunks = [source[i : i + CHUNK] for i in range(0, size, CHUNK)]

    try:
        rb = ReplayBuffer(storage=LazyTensorStorage(size), batch_size=BATCH)
        extend = _fill(rb, chunks)
        name = "ReplayBuffer+LazyTensorStorage+RandomSampler"
        _emit(
            impl, {"case": "random", "buffer": name, "op": "extend", "items_per_s": round(extend)}
        )
        _emit(
            impl,
            {
                "case": "random",
                "buffer": name,
                "op": "sample",
                "batch": BATCH,
                **rate(rb.sample, BATCH, seconds),
            },
        )
        nbytes = sum(v.numel() * v.element_size() for v in rb.storage._storage.values(True, True))
        _emit(
            impl,
            {
                "case": "memory",
                "buffer": "LazyTensorStorage",
                "bytes_per_item": nbytes / size,
                "raw_bytes_per_item": RAW_BYTES,
                "ratio": round(nbytes / size / RAW_BYTES, 4),
            },
        )
        del rb
        gc.collect()
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(size), batch_size=BATCH)
        _fill(rb, chunks)
        _emit(
            impl,
            {
                "case": "random",
                "buffer": "TensorDictReplayBuffer+LazyTensorStorage+RandomSampler",
                "op": "sample",
                "batch": BATCH,
                **rate(rb.sample, BATCH, seconds),
            },
        )
        del rb
        gc.collect()
    except Exception as err:  # noqa: BLE001
        _skip(impl, "random", err)

    try:
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=0.7, beta=0.5, storage=LazyTensorStorage(size), batch_size=BATCH
        )
        extend = _fill(rb, chunks)

        def step(rb=rb) -> None:
            sample = rb.sample()
            sample.set("td_error", torch.rand(BATCH))
            rb.update_tensordict_priority(sample)

        name = "TensorDictPrioritizedReplayBuffer+LazyTensorStorage"
        _emit(
            impl,
            {"case": "prioritized", "buffer": name, "op": "extend", "items_per_s": round(extend)},
        )
        _emit(
            impl,
            {
                "case": "prioritized",
                "buffer": name,
                "op": "sample+update_priority",
                "batch": BATCH,
                **rate(step, BATCH, seconds),
            },
        )
        del rb
        gc.collect()
    except Exception as err:  # noqa: BLE001
        _skip(impl, "prioritized", err)

    try:
        with tempfile.TemporaryDirectory() as tmp:
            rb = ReplayBuffer(storage=LazyMemmapStorage(size, scratch_dir=tmp), batch_size=BATCH)
            extend = _fill(rb, chunks)
            name = "ReplayBuffer+LazyMemmapStorage+RandomSampler"
            _emit(
                impl,
                {"case": "memmap", "buffer": name, "op": "extend", "items_per_s": round(extend)},
            )
            _emit(
                impl,
                {
                    "case": "memmap",
                    "buffer": name,
                    "op": "sample",
                    "batch": BATCH,
                    **rate(rb.sample, BATCH, seconds),
                },
            )
            del rb
            gc.collect()
    except Exception as err:  # noqa: BLE001
        _skip(impl, "memmap", err)

    for cache in (True, False):
        try:
            rb = ReplayBuffer(
                storage=LazyTensorStorage(size),
                sampler=SliceSampler(slice_len=32, end_key=("next", "done"), cache_values=cache),
                batch_size=BATCH,
            )
            extend = _fill(rb, chunks)
            name = f"ReplayBuffer+LazyTensorStorage+SliceSampler(slice_len=32,cache_values={cache})"
            if cache:
                _emit(
                    impl,
                    {"case": "slice", "buffer": name, "op": "extend", "items_per_s": round(extend)},
                )
            _emit(
                impl,
                {
                    "case": "slice",
                    "buffer": name,
                    "op": "sample",
                    "batch": BATCH,
                    **rate(rb.sample, BATCH, seconds),
                },
            )
            del rb
            gc.collect()
        except Exception as err:  # noqa: BLE001
            _skip(impl, f"slice(cache_values={cache})", err)


def bench_sb3(size: int, seconds: float) -> None:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    try:
        import stable_baselines3
        from gymnasium import spaces
        from stable_baselines3.common.buffers import ReplayBuffer
    except Exception as err:  # noqa: BLE001
        _skip("sb3", "import", err)
        return
    impl = f"sb3 {stable_baselines3.__version__}"
    obs_space = spaces.Box(-np.inf, np.inf, (17,), np.float32)
    act_space = spaces.Box(-1.0, 1.0, (6,), np.float32)
    rng = np.random.default_rng(0)
    try:
        # SB3 adds one step of n_envs items per call: n_envs=1 is its usual off-policy setting,
        # n_envs=1000 mirrors our extends of 1000 items.
        for n_envs, n_items in ((1, min(size, 100_000)), (CHUNK, size)):
            rb = ReplayBuffer(size, obs_space, act_space, device="cpu", n_envs=n_envs)
            obs = rng.standard_normal((n_envs, 17), dtype=np.float32)
            act = rng.standard_normal((n_envs, 6), dtype=np.float32)
            rew = rng.standard_normal(n_envs).astype(np.float32)
            done = np.zeros(n_envs, dtype=bool)
            infos = [{} for _ in range(n_envs)]
            start = time.perf_counter()
            for _ in range(n_items // n_envs):
                rb.add(obs, obs, act, rew, done, infos)
            extend = n_items / (time.perf_counter() - start)
            _emit(
                impl,
                {
                    "case": "random",
                    "buffer": f"ReplayBuffer(n_envs={n_envs})",
                    "op": "extend",
                    "items_per_s": round(extend),
                },
            )
        # Fill the arrays directly to reach the full size quickly.
        rb = ReplayBuffer(size, obs_space, act_space, device="cpu", n_envs=1)
        rb.observations[:] = rng.standard_normal(rb.observations.shape, dtype=np.float32)
        rb.next_observations[:] = rng.standard_normal(rb.observations.shape, dtype=np.float32)
        rb.actions[:] = rng.standard_normal(rb.actions.shape, dtype=np.float32)
        rb.rewards[:] = rng.standard_normal(rb.rewards.shape, dtype=np.float32)
        rb.full = True
        _emit(
            impl,
            {
                "case": "random",
                "buffer": "ReplayBuffer(n_envs=1)",
                "op": "sample",
                "batch": BATCH,
                **rate(lambda: rb.sample(BATCH), BATCH, seconds),
            },
        )
        arrays = (
            rb.observations,
            rb.next_observations,
            rb.actions,
            rb.rewards,
            rb.dones,
            rb.timeouts,
        )
        nbytes = sum(a.nbytes for a in arrays)
        _emit(
            impl,
            {
                "case": "memory",
                "buffer": "ReplayBuffer",
                "bytes_per_item": nbytes / size,
                "raw_bytes_per_item": RAW_BYTES,
                "ratio": round(nbytes / size / RAW_BYTES, 4),
            },
        )
    except Exception as err:  # noqa: BLE001
        _skip(impl, "random", err)


def main() -> None:
    size, seconds = int(sys.argv[1]), float(sys.argv[2])
    warnings.filterwarnings("ignore")
    for bench in (bench_torchrl, bench_sb3):
        try:
            bench(size, seconds)
        except Exception:  # noqa: BLE001
            _emit(bench.__name__, {"skipped": traceback.format_exc()[-500:]})
        gc.collect()


if __name__ == "__main__":
    main()
