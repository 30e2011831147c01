"""Distributed collection: frames/s over Ray vs a local multi-process collector, weight latency.

Cases (CartPole-v1, random-init 2x64 MLP policy taking the argmax of 2 logits, torch on 1
thread everywhere: ``torch.set_num_threads(1)`` here and in every worker):

- ``ray_async_2w`` / ``ray_sync_2w``: ``RayCollector`` with 2 actors, each a
  ``SyncDataCollector`` on one ``GymEnv``;
- ``dist_mp_async_2w``: ``DistributedDataCollector(launcher="mp")``, 2 workers over gloo;
- ``multiasync_2w``: the local ``MultiaSyncDataCollector`` with 2 worker processes of one env
  each (the same total envs);
- ``weight_update_1m``: latency of ``RayCollector.update_policy_weights_()`` (sync mode: returns
  once both workers loaded the weights) for a ~1M-parameter MLP (4 hidden layers of 576), and
  the same for ``DistributedDataCollector`` (sync: a gloo broadcast from rank 0).

Start-up (actor or process launch, ``ray.init``) is excluded from frames/s: each case warms up
with 2 batches, then times ``--batches`` batches of ``--frames-per-batch`` frames. One JSON object
per line. Usage: ``RAY_AUTH_MODE=disabled python benchmarks/distributed.py [--batches 20]
[--frames-per-batch 1000] [--updates 20]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import torch
from tensordict.nn import TensorDictModule
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_env() -> Any:
    """A CartPole-v1 ``GymEnv`` (a picklable constructor for the workers)."""
    from torchrl.envs import GymEnv

    return GymEnv("CartPole-v1", categorical_action_encoding=True)


class _ArgmaxMLP(nn.Module):
    def __init__(self, hidden: int, depth: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        size = 4
        for _ in range(depth):
            layers += [nn.Linear(size, hidden), nn.Tanh()]
            size = hidden
        layers.append(nn.Linear(size, 2))
        self.net = nn.Sequential(*layers)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.net(observation).argmax(-1)


def make_policy(hidden: int = 64, depth: int = 2) -> TensorDictModule:
    """A CartPole policy: an MLP whose argmax is the (index) action."""
    return TensorDictModule(_ArgmaxMLP(hidden, depth), ["observation"], ["action"])


def _throughput(collector: Any, batches: int) -> float:
    it = iter(collector)
    for _ in range(2):
        next(it)
    start = time.perf_counter()
    frames = 0
    for _ in range(batches):
        frames += next(it).numel()
    return frames / (time.perf_counter() - start)


def _emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--frames-per-batch", type=int, default=1000)
    parser.add_argument("--updates", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.abspath(__file__)), os.environ.get("PYTHONPATH", "")]
    )
    import ray

    from torchrl.collectors import MultiaSyncDataCollector
    from torchrl.collectors.distributed import DistributedDataCollector, RayCollector

    fpb = args.frames_per_batch
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for sync in (False, True):
            collector = RayCollector(
                make_env, make_policy(), num_collectors=2, sync=sync, frames_per_batch=fpb
            )
            fps = _throughput(collector, args.batches)
            collector.shutdown()
            _emit(
                case=f"ray_{'sync' if sync else 'async'}_2w",
                env="CartPole-v1",
                frames_per_s=round(fps),
                frames_per_batch=fpb,
            )

        collector = DistributedDataCollector(
            make_env,
            make_policy(),
            num_workers=2,
            sync=False,
            launcher="mp",
            frames_per_batch=fpb,
        )
        fps = _throughput(collector, args.batches)
        collector.shutdown()
        _emit(
            case="dist_mp_async_2w",
            env="CartPole-v1",
            frames_per_s=round(fps),
            frames_per_batch=fpb,
        )

        collector = MultiaSyncDataCollector(
            [make_env, make_env], make_policy(), frames_per_batch=fpb, total_frames=-1
        )
        fps = _throughput(collector, args.batches)
        collector.shutdown()
        _emit(
            case="multiasync_2w", env="CartPole-v1", frames_per_s=round(fps), frames_per_batch=fpb
        )

        big = make_policy(hidden=576, depth=4)
        params = sum(p.numel() for p in big.parameters())
        for name, build in (
            (
                "ray",
                lambda: RayCollector(
                    make_env, big, num_collectors=2, sync=True, frames_per_batch=10
                ),
            ),
            (
                "dist_mp",
                lambda: DistributedDataCollector(
                    make_env, big, num_workers=2, sync=True, launcher="mp", frames_per_batch=10
                ),
            ),
        ):
            collector = build()
            collector.update_policy_weights_()
            times = []
            for _ in range(args.updates):
                start = time.perf_counter()
                collector.update_policy_weights_()
                times.append(time.perf_counter() - start)
            collector.shutdown()
            times.sort()
            _emit(
                case=f"weight_update_1m_{name}",
                params=params,
                workers=2,
                median_ms=round(1000 * times[len(times) // 2], 2),
                min_ms=round(1000 * times[0], 2),
            )
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
