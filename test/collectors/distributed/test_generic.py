"""DistributedDataCollector with the mp launcher and submitit's local executor (gloo)."""

from __future__ import annotations

import functools
import json
import os
import pickle
import signal
import socket
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from _collector_helpers import SlowEnv, counting_env, threshold_policy
from _collector_helpers import pid_alive as _alive
from _net_helpers import listening, reachable_from_other_interface

from torchrl.collectors import WorkerError
from torchrl.collectors.distributed import DistributedDataCollector
from torchrl.collectors.distributed.generic import _decode_layout
from torchrl.collectors.distributed.utils import listening_store

TEST_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_slow_env = functools.partial(SlowEnv, delay=0.05, max_steps=5)


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


# ----------------------------------------------------------------------- network exposure
class _Forged:
    """Unpickling it creates ``path``: proof that a payload was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


class _IdleWorker:
    """Stands for a launched worker process that has not written anything yet."""

    pid = None
    exitcode = None

    def is_alive(self) -> bool:
        return True

    def join(self, timeout=None) -> None:
        pass

    def kill(self) -> None:
        pass


def test_probe_tells_bound_from_all_interfaces():
    """The emulation of another interface: 127.0.0.2 reaches a 0.0.0.0 socket only."""
    for address, expected in (("0.0.0.0", True), ("127.0.0.1", False)):
        with socket.socket() as server:
            server.bind((address, 0))
            server.listen(1)
            port = server.getsockname()[1]
            assert (address, port) in listening(os.getpid())
            assert reachable_from_other_interface(port) is expected


def test_store_listens_on_requested_address_only():
    store = listening_store("127.0.0.1", 0, 2, timedelta(seconds=5))
    port = store.port
    assert ("127.0.0.1", port) in listening(os.getpid())
    assert not reachable_from_other_interface(port)
    client = dist.TCPStore("127.0.0.1", port, 2, timeout=timedelta(seconds=5))
    client.set("k", b"v")
    assert store.get("k") == b"v"


@pytest.mark.parametrize("entry", ["layout1", "error1"])
def test_unsigned_store_entry_is_refused_not_unpickled(entry, tmp_path, monkeypatch):
    """A local process that writes a worker's entry first (without the key) is refused."""
    marker = tmp_path / "unpickled"
    payload = pickle.dumps(_Forged(str(marker)))

    def launch(self, args, slurm_kwargs):
        port = args[0][3]
        attacker = dist.TCPStore("127.0.0.1", port, 2, timeout=timedelta(seconds=5))
        attacker.set(entry, payload)
        self._workers.append(_IdleWorker())

    monkeypatch.setattr(DistributedDataCollector, "_launch", launch)
    with pytest.raises(RuntimeError, match=f"{entry!r}.*not signed with this run's key"):
        DistributedDataCollector(
            counting_env, None, num_workers=1, launcher="mp", frames_per_batch=4, timeout=10
        )
    assert not marker.exists()


def test_layout_is_checked_field_by_field():
    good = {"batch_size": [4], "leaves": [[["obs"], [4, 3], "float32"]], "pid": 1}
    layout = _decode_layout(json.dumps(good).encode(), "who")
    assert layout["leaves"] == [(("obs",), (4, 3), torch.float32)]
    bad = dict(good, leaves=[[["obs"], [4], "nn"]])
    with pytest.raises(RuntimeError, match="malformed batch layout.*unknown dtype 'nn'"):
        _decode_layout(json.dumps(bad).encode(), "who")
    with pytest.raises(RuntimeError, match="malformed batch layout"):
        _decode_layout(b"\x80\x04not json", "who")


def test_mp_listeners_bound_to_requested_address():
    """Store and gloo devices of trainer and worker listen on ``host`` only; data flows.

    ``host="127.0.0.3"``: neither the wildcard address nor what the host name resolves to
    (gloo's default device) would pass.
    """
    before = listening(os.getpid())
    policy = threshold_policy()
    collector = DistributedDataCollector(
        counting_env,
        policy,
        num_workers=1,
        sync=True,
        launcher="mp",
        frames_per_batch=10,
        total_frames=20,
        timeout=60,
        host="127.0.0.3",
    )
    pids = list(collector.pids)
    try:
        ours = listening(os.getpid()) - before
        workers = set().union(*(listening(pid) for pid in pids))
        # The store plus at least one gloo listener here, a gloo listener in the worker.
        assert len(ours) >= 2 and workers
        assert {address for address, _ in ours | workers} == {"127.0.0.3"}
        assert not [p for _, p in ours | workers if reachable_from_other_interface(p)]
        batches = []
        for batch in collector:
            batches.append(batch.numel())
            collector.update_policy_weights_()
        assert batches == [10, 10]
    finally:
        collector.shutdown()
    assert _wait_gone(pids) == []


# ------------------------------------------------------------------ worker processes' lifetime
def _no_env():
    raise ValueError("no env here")


class _ThreadWorker:
    """Runs ``_run_worker`` in a thread of this process, standing for a launched worker."""

    pid = None
    exitcode = 1

    def __init__(self, args) -> None:
        import threading

        from torchrl.collectors.distributed.generic import _run_worker

        self.raised: list[BaseException] = []

        def target() -> None:
            try:
                _run_worker(*args)
            except BaseException as err:  # noqa: BLE001 - looked at by the test
                self.raised.append(err)

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def is_alive(self) -> bool:
        return self.thread.is_alive()

    def join(self, timeout=None) -> None:
        self.thread.join(timeout)

    def kill(self) -> None:
        pass


def test_worker_error_names_rank_and_pid(monkeypatch):
    """A worker failing at start: its own error and the trainer's both name rank and pid."""
    workers: list[_ThreadWorker] = []

    def launch(self, args, slurm_kwargs):
        for a in args:
            workers.append(_ThreadWorker(a))
            self._workers.append(workers[-1])

    monkeypatch.setattr(DistributedDataCollector, "_launch", launch)
    with pytest.raises(WorkerError) as info:
        DistributedDataCollector(
            _no_env, None, num_workers=1, launcher="mp", frames_per_batch=4, timeout=20
        )
    pid = os.getpid()  # the "worker" is a thread of this process
    message = str(info.value)
    assert f"worker 0 (rank 1, pid {pid}) died while starting" in message
    assert f"DistributedDataCollector worker rank 1 (pid {pid}) failed" in message
    assert "ValueError: no env here" in message
    workers[0].join(10)
    (raised,) = workers[0].raised
    assert f"worker rank 1 (pid {pid}) failed: ValueError('no env here')" in str(raised)


@pytest.mark.slow
def test_mp_worker_error_names_rank_and_pid_and_leaves_no_temp_dir(tmp_path, monkeypatch):
    """A spawned worker failing at start; its temp dir is removed by shutdown."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    with pytest.raises(WorkerError, match=r"worker 0 \(rank 1, pid \d+\) died while starting"):
        DistributedDataCollector(
            _no_env, None, num_workers=1, launcher="mp", frames_per_batch=4, timeout=60
        )
    assert os.listdir(tmp_path) == []
