"""DistributedDataCollector with the mp launcher and submitit's local executor (gloo)."""

from __future__ import annotations

import functools
import os
import signal
import time

import pytest
import torch
from _collector_helpers import SlowEnv, counting_env, threshold_policy

from torchrl.collectors import WorkerError
from torchrl.collectors.distributed import DistributedDataCollector

TEST_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


@pytest.fixture
def helpers_path(monkeypatch):
    """submitit jobs unpickle the test helpers by module name: put them on the path."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TEST_DIR, os.environ.get("PYTHONPATH", "")]))


def _check_run(collector, policy, batch_frames: int, total: int) -> None:
    frames, rewards, ids = 0, [], []
    for i, batch in enumerate(collector):
        assert batch.numel() == batch_frames
        frames += batch.numel()
        ids.append(batch["collector", "traj_ids"].clone())
        rewards.append(batch["next", "reward"].sum().item())
        if i == 0:
            with torch.no_grad():
                policy.module.linear.bias.fill_(1.0)
            collector.update_policy_weights_()
    assert frames == total == collector.frames
    assert rewards[0] == 0.0 and rewards[-1] == batch_frames
    ids = torch.cat(ids)
    n = collector.num_workers
    per_worker = [set(ids[ids % n == w].tolist()) for w in range(n)]
    assert all(per_worker) and not per_worker[0] & per_worker[1]


@pytest.mark.parametrize("sync", [True, False])
@pytest.mark.slow
def test_mp(sync):
    policy = threshold_policy()
    collector = DistributedDataCollector(
        counting_env,
        policy,
        num_workers=2,
        sync=sync,
        launcher="mp",
        frames_per_batch=20,
        total_frames=120,
        timeout=60,
    )
    pids = list(collector.pids)
    try:
        _check_run(collector, policy, 20, 120)
    finally:
        collector.shutdown()
    assert _wait_gone(pids) == []


@pytest.mark.parametrize("sync", [True, False])
@pytest.mark.slow
def test_submitit_local(sync, helpers_path, tmp_path):
    pytest.importorskip("submitit")
    policy = threshold_policy()
    collector = DistributedDataCollector(
        counting_env,
        policy,
        num_workers=2,
        sync=sync,
        launcher="submitit",
        slurm_kwargs={"cluster": "local", "folder": str(tmp_path), "timeout_min": 5},
        frames_per_batch=20,
        total_frames=120,
        timeout=60,
    )
    pids = list(collector.pids)
    try:
        _check_run(collector, policy, 20, 120)
    finally:
        collector.shutdown()
    assert _wait_gone(pids) == []


@pytest.mark.parametrize("launcher", ["mp", "submitit"])
@pytest.mark.slow
def test_kill_worker(launcher, helpers_path, tmp_path):
    if launcher == "submitit":
        pytest.importorskip("submitit")
    collector = DistributedDataCollector(
        _slow_env,
        None,
        num_workers=2,
        sync=False,
        launcher=launcher,
        slurm_kwargs={"cluster": "local", "folder": str(tmp_path), "timeout_min": 5},
        frames_per_batch=10,
        total_frames=-1,
        timeout=60,
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


def test_bad_args():
    with pytest.raises(ValueError, match="launcher"):
        DistributedDataCollector(counting_env, None, frames_per_batch=4, launcher="slurm")
    with pytest.raises(ValueError, match="multiple of num_workers"):
        DistributedDataCollector(
            counting_env, None, num_workers=2, sync=True, frames_per_batch=5, launcher="mp"
        )
