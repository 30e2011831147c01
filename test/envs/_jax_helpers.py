"""Test helpers shared by the JAX env wrappers' tests (gymnax, jumanji).

Every jitted function compiles in seconds, so those tests share a persistent JAX compilation
cache in a temp dir (also seen by ParallelEnv's spawned workers, through the environment).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from torchrl.envs import ParallelEnv, SerialEnv, check_env_specs


@contextlib.contextmanager
def jax_compilation_cache(path: str) -> Iterator[None]:
    """Points JAX's persistent compilation cache at ``path`` (every entry kept), then restores."""
    import jax

    names = {
        "JAX_COMPILATION_CACHE_DIR": str(path),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    old = {k: os.environ.get(k) for k in names}
    os.environ.update(names)
    old_dir = jax.config.jax_compilation_cache_dir
    old_time = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_compilation_cache_dir", names["JAX_COMPILATION_CACHE_DIR"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    try:
        yield
    finally:
        jax.config.update("jax_compilation_cache_dir", old_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", old_time)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def seeded_rollout(env: Any, seed: int, steps: int) -> Any:
    """A rollout of random actions from ``env.set_seed(seed)`` and torch seed 0, through dones."""
    env.set_seed(seed)
    torch.manual_seed(0)
    return env.rollout(steps, break_when_any_done=False)


def collect_two_batches(env: Any) -> list[Any]:
    """Two batches of 32 frames from a ``SyncDataCollector`` (random policy) on a 4-env batch."""
    from torchrl.collectors import SyncDataCollector

    collector = SyncDataCollector(env, None, frames_per_batch=32, total_frames=64)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 2 and batches[0].batch_size == (4, 8)
    assert batches[-1]["next", "done"].any()
    return batches


def serial_and_parallel_rollouts(make: Callable[[], Any], seed: int, steps: int) -> tuple[Any, Any]:
    """The same seeded rollout of two sub-envs under ``SerialEnv`` and a spawned ``ParallelEnv``."""
    serial = SerialEnv(2, make)
    try:
        a = seeded_rollout(serial, seed, steps)
    finally:
        serial.close()
    parallel = ParallelEnv(2, make, mp_start_method="spawn")
    try:
        check_env_specs(parallel)
        b = seeded_rollout(parallel, seed, steps)
    finally:
        parallel.close()
    return a, b
