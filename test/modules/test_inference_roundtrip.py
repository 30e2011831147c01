"""Round-trip cost of SharedMemoryTransport: one worker process, the server thread, a tiny MLP.

Run as a script for the figures (``python test/modules/test_inference_roundtrip.py``); the
slow test checks a generous bound only, since the figures depend on the machine's load.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from torchrl.modules.inference_server import InferenceServer, SharedMemoryTransport


def _worker(client, n: int, results) -> None:
    torch.set_num_threads(1)
    td = TensorDict(observation=torch.randn(16, 4), batch_size=[16])
    for _ in range(200):  # warm-up
        client(td)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        client(td)
        times.append(time.perf_counter() - t0)
    results.put(times)


def measure(n: int = 2000, copy_result: bool = True) -> dict[str, float]:
    """Median round trip, median batch work on the server, and their difference, in us."""
    torch.set_num_threads(1)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))
    policy = TensorDictModule(mlp, ["observation"], ["action"])
    transport = SharedMemoryTransport(copy_result=copy_result)
    client = transport.client(example=TensorDict(observation=torch.zeros(16, 4), batch_size=[16]))
    server = InferenceServer(policy, transport)
    work: list[float] = []
    # Timed from outside (the server has no timing hook): the batch's model work, which every
    # serving path runs (the shared-memory transport copies rows out of it itself).
    compute = server._compute

    def timed(requests):
        t0 = time.perf_counter()
        out = compute(requests)
        work.append(time.perf_counter() - t0)
        return out

    server._compute = timed  # type: ignore[method-assign]
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    with server:
        proc = ctx.Process(target=_worker, args=(client, n, results), daemon=True)
        proc.start()
        times = results.get(timeout=300)
        proc.join(10)
    round_trip = statistics.median(times) * 1e6
    batch_work = statistics.median(work[-n:]) * 1e6
    return {
        "round_trip_us": round_trip,
        "batch_work_us": batch_work,
        "transport_overhead_us": round_trip - batch_work,
    }


@pytest.mark.slow  # a few thousand round trips; the bound is loose on purpose
def test_round_trip_overhead_is_small():
    figures = measure(1000)
    print(figures)
    assert figures["transport_overhead_us"] < 1000, figures


if __name__ == "__main__":
    for copy in (True, False):
        print(f"copy_result={copy}", {k: round(v, 1) for k, v in measure(copy_result=copy).items()})
