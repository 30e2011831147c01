"""RayCollector on a local Ray instance (one per session, see conftest.py)."""

from __future__ import annotations

import functools
import os
import signal
import time

import pytest
import torch

pytest.importorskip("ray")

from _collector_helpers import SlowEnv, counting_env, threshold_policy  # noqa: E402

from torchrl.collectors import WorkerError  # noqa: E402
from torchrl.collectors.distributed import RayCollector  # noqa: E402

# A partial of a helper class: actors import it by name (test modules are not importable).
_slow_env = functools.partial(SlowEnv, delay=0.05, max_steps=5)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def _check_run(collector: RayCollector, policy, batch_frames: int, total: int) -> None:
    """Exact sizes and totals, ids unique across workers, new weights used after an update."""
    frames, rewards, ids_per_batch = 0, [], []
    for i, batch in enumerate(collector):
        assert batch.numel() == batch_frames
        frames += batch.numel()
        ids_per_batch.append(batch["collector", "traj_ids"])
        rewards.append(batch["next", "reward"].sum().item())
        if i == 0:
            with torch.no_grad():
                policy.module.linear.bias.fill_(1.0)  # the policy now always writes action 1
            collector.update_policy_weights_()
            for w in range(collector.num_collectors):
                assert collector.worker_weights(w)["module.linear.bias"].item() == 1.0
    assert frames == total == collector.frames
    assert rewards[0] == 0.0
    # Async batches already under way during the update may still use the old weights.
    assert rewards[-1] == batch_frames
    # Each worker's ids are id * n + rank: a trajectory id never shows up in two workers.
    ids = torch.cat(ids_per_batch)
    n = collector.num_collectors
    assert set((ids % n).unique().tolist()) == set(range(n))
    per_worker = [set(ids[ids % n == w].tolist()) for w in range(n)]
    assert not per_worker[0] & per_worker[1]


def test_ray_sync(ray_cluster):
    policy = threshold_policy()
    collector = RayCollector(
        counting_env, policy, num_collectors=2, sync=True, frames_per_batch=20, total_frames=100
    )
    try:
        pids = list(collector.pids)
        _check_run(collector, policy, 20, 100)
        # The run is over: a new iteration yields nothing more.
        assert list(collector) == []
    finally:
        collector.shutdown()
    assert _wait_gone(pids) == []


@pytest.mark.slow
def test_ray_async(ray_cluster):
    policy = threshold_policy()
    collector = RayCollector(
        counting_env,
        policy,
        num_collectors=2,
        sync=False,
        frames_per_batch=10,
        total_frames=200,
        update_after_each_batch=True,
    )
    try:
        _check_run(collector, policy, 10, 200)
        state = collector.state_dict()
        assert set(state) == {"worker0", "worker1", "frames"}
    finally:
        collector.shutdown()


@pytest.mark.slow
def test_ray_kill_worker(ray_cluster):
    collector = RayCollector(
        _slow_env, None, num_collectors=2, sync=False, frames_per_batch=10, total_frames=-1
    )
    pids = list(collector.pids)
    try:
        it = iter(collector)
        next(it)
        os.kill(pids[1], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerError, match="worker 1"):
            for _ in it:
                pass
        assert time.monotonic() - start < 30
    finally:
        collector.shutdown()
    assert _wait_gone(pids) == []


def test_ray_bad_args(ray_cluster):
    with pytest.raises(ValueError, match="multiple of num_collectors"):
        RayCollector(counting_env, None, num_collectors=2, sync=True, frames_per_batch=5)
    with pytest.raises(ValueError, match="collector_kwargs"):
        RayCollector(
            counting_env, None, frames_per_batch=4, collector_kwargs={"frames_per_batch": 3}
        )
