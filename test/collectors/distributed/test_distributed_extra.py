"""DistributedCollector / DistributedSyncCollector, RPCCollector and submitit_delayed_launcher.

(This file sorts before the Ray tests: gloo groups made in this process after Ray started make
the fork-based collectors of later tests abort.)
"""

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
)
from torchrl.collectors.distributed.generic import merge_collector_kwargs


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
    assert merge_collector_kwargs("X", None, given) == {"max_frames_per_traj": 3}
    assert merge_collector_kwargs("X", [{"a": 1}, None], given) == [
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


# ------------------------------------------------------------------------------- RPCCollector
# torch RPC starts once per process (a second start after a shutdown hangs in torch's gloo
# set-up), so every scenario runs in a fresh interpreter.
_RPC_CHILD = """
import os
import sys
import torch
sys.path.insert(0, {test_dir!r})
from _collector_helpers import RaisingEnv, counting_env, threshold_policy
from torchrl.collectors import WorkerError
from torchrl.collectors.distributed import RPCCollector

if __name__ == "__main__":
    mode = sys.argv[1]
    if mode in ("sync", "async"):
        policy = threshold_policy()
        collector = RPCCollector(
            counting_env, policy, frames_per_batch=10, total_frames=40, num_workers=2,
            sync=mode == "sync", update_after_each_batch=True, timeout=60,
        )
        actions = []
        for i, batch in enumerate(collector):
            assert batch.numel() == 10, batch
            actions.append(batch["action"].float().mean().item())
            if i == 0:
                with torch.no_grad():
                    policy.module.linear.bias.fill_(1.0)
                collector.update_policy_weights_()
        collector.shutdown()
        assert actions[0] == 0.0 and actions[-1] == 1.0, actions
        try:
            RPCCollector(counting_env, None, frames_per_batch=10)
        except RuntimeError as err:
            assert "process of its own" in str(err)
        else:
            raise AssertionError("a second RPCCollector started")
    elif mode == "crash":
        collector = RPCCollector(
            RaisingEnv, None, frames_per_batch=4, num_workers=1, timeout=60,
            collector_kwargs={{"create_env_kwargs": {{"fail_at": 6}}}},
        )
        try:
            for _ in collector:
                pass
        except WorkerError as err:
            assert "worker 0 (rank 1" in str(err), err
        else:
            raise AssertionError("no WorkerError")
        finally:
            collector.shutdown()
    elif mode == "start":
        try:
            RPCCollector(
                counting_env, None, frames_per_batch=4, num_workers=1, timeout=60,
                collector_kwargs={{"create_env_kwargs": {{"bogus": 1}}}},
            )
        except WorkerError as err:
            assert "bogus" in str(err) and "starting" in str(err), err
        else:
            raise AssertionError("no WorkerError")
    elif mode == "orphan":
        collector = RPCCollector(counting_env, None, frames_per_batch=4, num_workers=2, timeout=60)
        print("PIDS", *collector.pids, flush=True)
        os._exit(0)  # no shutdown: the workers must notice and end by themselves
    print("CHILD-OK")
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async", "crash", "start"])
def test_rpc_collector(mode):
    import os
    import subprocess
    import sys

    test_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = _RPC_CHILD.format(test_dir=test_dir)
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", code, mode], capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0 and "CHILD-OK" in out.stdout, out.stderr[-3000:]
    assert time.monotonic() - start < 120


@pytest.mark.slow
def test_rpc_collector_workers_end_with_their_trainer():
    import os
    import subprocess
    import sys

    from _collector_helpers import pid_alive

    test_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = _RPC_CHILD.format(test_dir=test_dir)
    out = subprocess.run(
        [sys.executable, "-c", code, "orphan"], capture_output=True, text=True, timeout=180
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("PIDS")), None)
    assert line is not None, out.stderr[-3000:]
    pids = [int(p) for p in line.split()[1:]]
    assert len(pids) == 2
    deadline = time.monotonic() + 15
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(pid_alive(p) for p in pids)


def test_rpc_collector_bad_args():
    from torchrl.collectors.distributed import RPCCollector, RPCDataCollector

    assert RPCDataCollector is RPCCollector
    with pytest.raises(ValueError, match="launcher='submitit' is not supported"):
        RPCCollector(counting_env, frames_per_batch=10, launcher="submitit")
    with pytest.raises(ValueError, match="num_workers_per_collector"):
        RPCCollector(counting_env, frames_per_batch=10, num_workers_per_collector=2)
    with pytest.raises(TypeError, match="unexpected keyword"):
        RPCCollector(counting_env, frames_per_batch=10, max_frames=3)


# -------------------------------------------------------------------- submitit_delayed_launcher
_DELAYED_MAIN = """
from _collector_helpers import counting_env
from torchrl.collectors.distributed import DistributedCollector


def main(total):
    collector = DistributedCollector(
        counting_env, None, frames_per_batch=10, total_frames=total, num_workers=2,
        sync=True, launcher="submitit_delayed", timeout=60,
    )
    try:
        return [batch.numel() for batch in collector]
    finally:
        collector.shutdown()
"""


@pytest.mark.slow
def test_submitit_delayed_launcher_local(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    import os
    import sys

    from torchrl.collectors.distributed import submitit_delayed_launcher

    test_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    (tmp_path / "delayed_main.py").write_text(_DELAYED_MAIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    paths = [str(tmp_path), test_dir, os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    import delayed_main

    conf = {"cluster": "local", "timeout_min": 5}
    launcher = submitit_delayed_launcher(
        2, submitit_main_conf=conf, submitit_collection_conf=conf, folder=str(tmp_path), timeout=90
    )
    job = launcher(delayed_main.main)(30)
    try:
        assert job.result() == [10, 10, 10]
        # the collection jobs were told to stop and end by themselves
        assert [j.result() for j in launcher.collection_jobs] == [None, None]
    finally:
        for j in [job, *launcher.collection_jobs]:
            if not j.done():
                j.cancel(check=False)
    sys.modules.pop("delayed_main", None)


def test_submitit_delayed_launcher_bad_args(monkeypatch):
    from torchrl.collectors.distributed import submitit_delayed_launcher

    with pytest.raises(ValueError, match="num_jobs"):
        submitit_delayed_launcher(0)
    with pytest.raises(NotImplementedError, match="framework='rpc'"):
        submitit_delayed_launcher(2, framework="rpc")
    with pytest.raises(ValueError, match="backend"):
        submitit_delayed_launcher(2, backend="nccl")
    # outside the main job of the launcher, a delayed collector refuses to start
    monkeypatch.delenv("TORCHRL_DELAYED_FOLDER", raising=False)
    with pytest.raises(RuntimeError, match="main job of submitit_delayed_launcher"):
        DistributedCollector(
            counting_env, None, frames_per_batch=10, launcher="submitit_delayed", timeout=5
        )
