"""Replay buffers on 1M HalfCheetah-like transitions: ours, then TorchRL's and SB3's side by side.

An item holds ``observation`` float32[17], ``action`` float32[6], ``("next", "observation")``
float32[17], ``("next", "reward")`` float32[1] and ``("next", "done")`` bool[1]: 165 raw bytes.
Episodes are 1000 steps long (``done`` every 1000th item). Measured, each as items per second:

- extend: the empty buffer filled by batches of 1000 items (a collector's batch);
- sample: batches of 256 from the full buffer (random, memory-mapped, slices of 32);
- prioritized: ``sample`` + ``update_tensordict_priority`` per batch of 256;
- memory: bytes held per item vs the raw 165 bytes, from the storage tensors and, separately, from
  the process RSS growth while filling (source batches generated on the fly).

Torch runs on 1 thread (``torch.set_num_threads(1)``), here and in the peers. The peers run under
``TORCHRL_PEERS_PYTHON`` (default ``/work/peers-venv/bin/python``) with
``benchmarks/_peers/replay_peers.py``; they are skipped with a JSON note when absent.

Prints one JSON object per line. Usage:
``python benchmarks/replay.py [--size 1000000] [--seconds 2] [--no-peers]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tensordict import TensorDict

from torchrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ReplayBuffer,
    SliceSampler,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from torchrl.data.replay_buffers.storages import storage_nbytes

BATCH = 256
CHUNK = 1000
EPISODE = 1000
RAW_BYTES = 17 * 4 + 6 * 4 + 17 * 4 + 4 + 1


def _emit(record: dict) -> None:
    print(json.dumps({"bench": "replay", "impl": "ours", **record}), flush=True)


def make_chunk(n: int, start: int = 0) -> TensorDict:
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


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fill(rb: ReplayBuffer, chunks: list[TensorDict]) -> float:
    """Extends ``rb`` with every chunk; returns items per second."""
    start = time.perf_counter()
    for chunk in chunks:
        rb.extend(chunk)
    elapsed = time.perf_counter() - start
    return sum(c.batch_size[0] for c in chunks) / elapsed


def rate(step: Callable[[], object], items: int, seconds: float, rounds: int = 5) -> dict:
    """Items per second of ``step``: median and best over ``rounds`` timed rounds."""
    for _ in range(20):
        step()
    # Size each round to about seconds / rounds.
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


def bench_random(chunks: list[TensorDict], size: int, seconds: float) -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(size), batch_size=BATCH)
    extend = fill(rb, chunks)
    _emit(
        {
            "case": "random",
            "buffer": "ReplayBuffer+LazyTensorStorage+RandomSampler",
            "op": "extend",
            "items_per_s": round(extend),
            "size": len(rb),
        }
    )
    _emit(
        {
            "case": "random",
            "buffer": "ReplayBuffer+LazyTensorStorage+RandomSampler",
            "op": "sample",
            "batch": BATCH,
            **rate(rb.sample, BATCH, seconds),
        }
    )
    _emit(
        {
            "case": "memory",
            "buffer": "LazyTensorStorage",
            "bytes_per_item": storage_nbytes(rb.storage) / size,
            "raw_bytes_per_item": RAW_BYTES,
            "ratio": round(storage_nbytes(rb.storage) / size / RAW_BYTES, 4),
        }
    )
    del rb
    gc.collect()
    td_rb = TensorDictReplayBuffer(storage=LazyTensorStorage(size), batch_size=BATCH)
    fill(td_rb, chunks)
    _emit(
        {
            "case": "random",
            "buffer": "TensorDictReplayBuffer+LazyTensorStorage+RandomSampler",
            "op": "sample",
            "batch": BATCH,
            **rate(td_rb.sample, BATCH, seconds),
        }
    )


def bench_prioritized(chunks: list[TensorDict], size: int, seconds: float) -> None:
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(size), batch_size=BATCH
    )
    extend = fill(rb, chunks)
    name = "TensorDictPrioritizedReplayBuffer+LazyTensorStorage"
    _emit({"case": "prioritized", "buffer": name, "op": "extend", "items_per_s": round(extend)})

    def step(rb: TensorDictPrioritizedReplayBuffer = rb) -> None:
        sample = rb.sample()
        sample.set("td_error", torch.rand(BATCH))
        rb.update_tensordict_priority(sample)

    _emit(
        {
            "case": "prioritized",
            "buffer": name,
            "op": "sample+update_priority",
            "batch": BATCH,
            **rate(step, BATCH, seconds),
        }
    )
    _emit(
        {
            "case": "prioritized",
            "buffer": name,
            "op": "sample",
            "batch": BATCH,
            **rate(rb.sample, BATCH, seconds),
        }
    )
    trees = 2 * 2 * (1 << (size - 1).bit_length()) * 4  # two float32 trees, leaves padded to 2^k
    _emit(
        {
            "case": "memory",
            "buffer": "LazyTensorStorage+PrioritizedSampler",
            "bytes_per_item": (storage_nbytes(rb.storage) + trees) / size,
            "raw_bytes_per_item": RAW_BYTES,
            "ratio": round((storage_nbytes(rb.storage) + trees) / size / RAW_BYTES, 4),
        }
    )


def bench_memmap(chunks: list[TensorDict], size: int, seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="replay_bench_") as tmp:
        rb = ReplayBuffer(
            storage=LazyMemmapStorage(size, scratch_dir=Path(tmp) / "rb"), batch_size=BATCH
        )
        extend = fill(rb, chunks)
        name = "ReplayBuffer+LazyMemmapStorage+RandomSampler"
        _emit({"case": "memmap", "buffer": name, "op": "extend", "items_per_s": round(extend)})
        _emit(
            {
                "case": "memmap",
                "buffer": name,
                "op": "sample",
                "batch": BATCH,
                **rate(rb.sample, BATCH, seconds),
            }
        )
        del rb
        gc.collect()


def bench_slice(chunks: list[TensorDict], size: int, seconds: float) -> None:
    for cache in (True, False):
        rb = ReplayBuffer(
            storage=LazyTensorStorage(size),
            sampler=SliceSampler(slice_len=32, end_key=("next", "done"), cache_values=cache),
            batch_size=BATCH,
        )
        extend = fill(rb, chunks)
        name = f"ReplayBuffer+LazyTensorStorage+SliceSampler(slice_len=32,cache_values={cache})"
        if cache:
            _emit({"case": "slice", "buffer": name, "op": "extend", "items_per_s": round(extend)})
        _emit(
            {
                "case": "slice",
                "buffer": name,
                "op": "sample",
                "batch": BATCH,
                **rate(rb.sample, BATCH, seconds),
            }
        )
        del rb
        gc.collect()


def bench_rss(size: int) -> None:
    """Process memory growth while filling a buffer from batches made on the fly."""
    gc.collect()
    before = _rss()
    rb = ReplayBuffer(storage=LazyTensorStorage(size), batch_size=BATCH)
    for start in range(0, size, CHUNK):
        rb.extend(make_chunk(min(CHUNK, size - start), start))
    gc.collect()
    grown = _rss() - before
    _emit(
        {
            "case": "memory",
            "buffer": "LazyTensorStorage (process RSS growth)",
            "bytes_per_item": round(grown / size, 2),
            "raw_bytes_per_item": RAW_BYTES,
            "ratio": round(grown / size / RAW_BYTES, 4),
        }
    )


def run_peers(size: int, seconds: float) -> None:
    python = os.environ.get("TORCHRL_PEERS_PYTHON", "/work/peers-venv/bin/python")
    if not Path(python).exists():
        print(
            json.dumps(
                {"bench": "replay", "impl": "peers", "skipped": f"no peers python at {python}"}
            ),
            flush=True,
        )
        return
    script = Path(__file__).resolve().parent / "_peers" / "replay_peers.py"
    with tempfile.TemporaryDirectory() as tmp:
        # Run from a temp dir so that ``import torchrl`` finds TorchRL, not this checkout.
        proc = subprocess.run(
            [python, str(script), str(size), str(seconds)],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=3000,
        )
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            print(line, flush=True)
    if proc.returncode != 0:
        print(
            json.dumps(
                {
                    "bench": "replay",
                    "impl": "peers",
                    "skipped": f"peer run failed: {proc.stderr[-600:]}",
                }
            ),
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per figure")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--only", default=None, help="comma-separated cases to run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cases = (
        set(args.only.split(","))
        if args.only
        else {"random", "prioritized", "memmap", "slice", "rss"}
    )
    _emit(
        {
            "case": "setup",
            "loadavg": os.getloadavg(),
            "size": args.size,
            "batch": BATCH,
            "chunk": CHUNK,
            "torch_threads": torch.get_num_threads(),
            "raw_bytes_per_item": RAW_BYTES,
        }
    )
    if "rss" in cases:
        bench_rss(args.size)
    source = make_chunk(args.size)
    chunks = [source[i : i + CHUNK] for i in range(0, args.size, CHUNK)]
    if "random" in cases:
        bench_random(chunks, args.size, args.seconds)
    if "prioritized" in cases:
        bench_prioritized(chunks, args.size, args.seconds)
    if "memmap" in cases:
        bench_memmap(chunks, args.size, args.seconds)
    if "slice" in cases:
        bench_slice(chunks, args.size, args.seconds)
    del source, chunks
    gc.collect()
    if not args.no_peers:
        run_peers(args.size, args.seconds)
    _emit({"case": "done", "loadavg": os.getloadavg()})


if __name__ == "__main__":
    sys.exit(main())
