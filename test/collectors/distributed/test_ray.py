"""RayCollector on a local Ray instance (one per session, see conftest.py)."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest
import torch

pytest.importorskip("ray")

from _collector_helpers import SlowEnv, counting_env, threshold_policy  # noqa: E402
from _collector_helpers import pid_alive as _alive

from torchrl.collectors import WorkerError  # noqa: E402
from torchrl.collectors.distributed import RayCollector  # noqa: E402
from torchrl.collectors.distributed.utils import start_local_ray  # noqa: E402

# A partial of a helper class: actors import it by name (test modules are not importable).
_slow_env = functools.partial(SlowEnv, delay=0.05, max_steps=5)


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


# ----------------------------------------------------------------------- network exposure
class _FakeRay:
    def __init__(self) -> None:
        self.config = None

    def init(self, **config) -> None:
        self.config = config


def test_local_ray_start_warns_without_authentication(monkeypatch):
    """Ray's servers listen on every interface: starting one without its token auth warns."""
    fake = _FakeRay()
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.warns(UserWarning, match="RayCollector: starting Ray with RAY_AUTH_MODE=disabled"):
        start_local_ray(fake, {"num_cpus": 1}, "RayCollector")
    assert fake.config == {"include_dashboard": False, "num_cpus": 1}
    # Joining a cluster starts nothing here; with token auth (the default) nothing to say.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        start_local_ray(fake, {"address": "auto"}, "RayCollector")
        monkeypatch.delenv("RAY_AUTH_MODE")
        start_local_ray(fake, {"include_dashboard": True}, "RayReplayBuffer")
    assert fake.config == {"include_dashboard": True}


_RAY_AUTH = """
import json, os, sys
import grpc, ray, torch
from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
from tensordict import TensorDict
from torchrl.collectors.distributed import RayReplayBuffer
from torchrl.data import LazyTensorStorage
rb = RayReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
rb.extend(TensorDict(obs=torch.arange(4.0), batch_size=[4]))
port = int(ray.get_runtime_context().gcs_address.rsplit(":", 1)[1])
codes = {}
for address in ("127.0.0.1", "127.0.0.2"):
    stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(grpc.insecure_channel(f"{address}:{port}"))
    try:
        stub.GetAllNodeInfo(gcs_service_pb2.GetAllNodeInfoRequest(), timeout=10)
        codes[address] = "OK"
    except grpc.RpcError as err:
        codes[address] = err.code().name
print("RESULT", json.dumps({"len": len(rb), "codes": codes}), flush=True)
rb.shutdown()
ray.shutdown()
"""


@pytest.mark.slow
def test_local_ray_refuses_unauthenticated_clients(tmp_path):
    """A Ray instance started by RayReplayBuffer (RAY_AUTH_MODE unset) answers no request
    without its token, from this or another interface (Ray listens on all of them)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    env["HOME"] = str(tmp_path)  # Ray writes its token to ~/.ray/auth_token
    proc = subprocess.run(
        [sys.executable, "-c", _RAY_AUTH],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT"))
    result = json.loads(line.split(" ", 1)[1])
    assert result["len"] == 4
    assert result["codes"] == {"127.0.0.1": "UNAUTHENTICATED", "127.0.0.2": "UNAUTHENTICATED"}
