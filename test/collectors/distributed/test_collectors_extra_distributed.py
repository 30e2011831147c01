"""DistributedCollector / DistributedSyncCollector (torch.distributed) and RayEvalWorker (Ray)."""

from __future__ import annotations

import time

import pytest
import torch
from _collector_helpers import RaisingEnv, counting_env, threshold_policy

from torchrl.collectors import SyncDataCollector, WorkerError
from torchrl.collectors.distributed import (
    DistributedCollector,
    DistributedDataCollector,
    DistributedSyncCollector,
    DistributedSyncDataCollector,
    RayEvalWorker,
)
from torchrl.collectors.distributed.generic import _merge_kwargs


def _set_bias(policy, value):
    with torch.no_grad():
        policy.module.linear.bias.fill_(value)


# ------------------------------------------------------------------ torch.distributed names
def test_names():
    assert DistributedSyncDataCollector is DistributedSyncCollector
    assert issubclass(DistributedSyncCollector, DistributedCollector)
    assert issubclass(DistributedCollector, DistributedDataCollector)


def test_bad_args_fail_before_any_launch():
    with pytest.raises(ValueError, match="always collects with sync=True"):
        DistributedSyncCollector(counting_env, frames_per_batch=10, sync=False)
    with pytest.raises(ValueError, match="both directly and in collector_kwargs"):
        DistributedCollector(
            counting_env,
            frames_per_batch=10,
            max_frames_per_traj=3,
            collector_kwargs={"max_frames_per_traj": 4},
        )
    with pytest.raises(TypeError, match="postproc must be callable"):
        DistributedCollector(counting_env, frames_per_batch=10, postproc=3)
    with pytest.raises(ValueError, match="launcher"):
        DistributedCollector(counting_env, frames_per_batch=10, launcher="ssh")


def test_collector_keywords_merge_into_each_worker():
    given = {"max_frames_per_traj": 3}
    assert _merge_kwargs("X", None, given) == {"max_frames_per_traj": 3}
    assert _merge_kwargs("X", [{"a": 1}, None], given) == [
        {"a": 1, "max_frames_per_traj": 3},
        {"max_frames_per_traj": 3},
    ]


@pytest.mark.slow
def test_distributed_sync_collector_local_processes():
    policy = threshold_policy()
    collector = DistributedSyncCollector(
        counting_env,
        policy,
        frames_per_batch=20,
        total_frames=60,
        num_workers=2,
        max_frames_per_traj=3,
        split_trajs=True,
        postproc=lambda td: td.set("seen", torch.ones(td.batch_size)),
    )
    try:
        assert collector.launcher == "mp" and collector.sync
        batches = []
        for i, batch in enumerate(collector):
            batches.append(batch)
            if i == 0:
                _set_bias(policy, 1.0)
                collector.update_policy_weights_()
        # split into trajectories of at most max_frames_per_traj=3 steps (done here)
        assert all(b.shape[-1] == 3 for b in batches)
        assert all(b["seen"].all() for b in batches)
        mask = batches[-1][("collector", "mask")]
        assert (batches[-1]["action"][mask] == 1).all()  # the new weights reached the workers
        assert (batches[0]["action"][batches[0][("collector", "mask")]] == 0).all()
    finally:
        collector.shutdown()


@pytest.mark.slow
def test_distributed_collector_async_local_processes():
    collector = DistributedCollector(
        counting_env, None, frames_per_batch=10, total_frames=30, num_workers=2, sync=False
    )
    try:
        assert [b.numel() for b in collector] == [10, 10, 10]
    finally:
        collector.shutdown()


@pytest.mark.slow
def test_distributed_collector_reports_a_crashed_worker():
    collector = DistributedCollector(
        RaisingEnv,
        None,
        frames_per_batch=4,
        total_frames=-1,
        num_workers=1,
        collector_class=SyncDataCollector,
        collector_kwargs={"create_env_kwargs": {"fail_at": 6}},
        timeout=60,
    )
    start = time.monotonic()
    try:
        with pytest.raises(WorkerError, match="worker 0"):
            for _ in collector:
                pass
        assert time.monotonic() - start < 30
    finally:
        collector.shutdown()


# ------------------------------------------------------------------------------ RayEvalWorker
def test_ray_eval_worker_submit_poll(ray_cluster):
    # a local function: Ray ships it by value (this test module is not importable in actors)
    def _policy_maker(env):
        return threshold_policy()

    worker = RayEvalWorker(None, counting_env, _policy_maker, num_gpus=0)
    try:
        assert worker.poll() is None and not worker.pending
        worker.submit(None, max_steps=10)
        assert worker.pending
        with pytest.raises(RuntimeError, match="pending"):
            worker.submit(None)
        result = worker.wait(60)
        assert result["reward"] == 0.0 and result["episode_length"] == 5.0
        assert result["frames"] is None
        policy = threshold_policy()
        _set_bias(policy, 1.0)
        worker.submit(policy, max_steps=3)  # a module: its weights are sent
        deadline = time.monotonic() + 60
        while (result := worker.poll(0.1)) is None and time.monotonic() < deadline:
            pass
        assert result == {"reward": 3.0, "episode_length": 3.0, "frames": None}
    finally:
        worker.shutdown()


@pytest.mark.slow
def test_ray_eval_worker_errors(ray_cluster):
    def _policy_maker(env):
        return threshold_policy()

    with pytest.raises(ValueError, match="num_gpus=0"):
        RayEvalWorker(None, counting_env, _policy_maker, num_gpus=64)

    def broken_env():
        raise RuntimeError("no simulator here")

    with pytest.raises(WorkerError, match="no simulator here"):
        RayEvalWorker(None, broken_env, _policy_maker, num_gpus=0)
