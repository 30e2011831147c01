"""Multi-process collectors: counts, trajectory ids, weights, failures and clean shutdown."""

from __future__ import annotations

import functools
import gc
import os
import signal
import sys
import threading
import time
from multiprocessing import resource_tracker

import numpy as np
import pytest
import torch
from _collector_helpers import RaisingEnv, SlowEnv, child_pids, counting_env, threshold_policy
from _envs import CountingEnv

from torchrl.collectors import (
    MultiAsyncCollector,
    MultiaSyncDataCollector,
    MultiSyncCollector,
    MultiSyncDataCollector,
    RemoteTraceback,
    WorkerError,
)
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.envs import PendulumEnv

TRAJ = ("collector", "traj_ids")
BOTH = [MultiSyncDataCollector, MultiaSyncDataCollector]


class _HangingEnv(CountingEnv):
    """A ``CountingEnv`` whose ``_step`` never returns from its ``hang_at``-th call."""

    def __init__(self, hang_at: int = 3) -> None:
        super().__init__()
        self.hang_at = hang_at
        self.steps = 0

    def _step(self, tensordict):
        self.steps += 1
        while self.steps >= self.hang_at:
            time.sleep(60)  # alive, but never answers
        return super()._step(tensordict)


class _OSErrorEnv(CountingEnv):
    def _step(self, tensordict):
        raise OSError(5, "simulator gone")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _shm_mappings() -> int:
    # shared memory this process maps (/dev/shm is shared with every other process on the box,
    # so its listing would see other jobs' files)
    with open("/proc/self/maps") as f:
        return sum("/dev/shm/" in line for line in f)


@pytest.fixture(autouse=True)
def _no_leftovers():
    """Every test leaves no process, thread, shared-memory file or descriptor behind."""
    # multiprocessing's resource tracker keeps a descriptor open for the life of the process
    # once a spawn context starts a worker: open it first so that it is not counted
    resource_tracker.ensure_running()
    gc.collect()
    before, threads, fds, shm = child_pids(), threading.active_count(), _open_fds(), _shm_mappings()
    yield
    deadline = time.monotonic() + 5
    while child_pids() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child_pids() - before == set(), "worker processes were left behind"
    assert threading.active_count() == threads, "threads were left behind"
    gc.collect()
    assert _shm_mappings() <= shm, "shared memory was left mapped"
    assert _open_fds() <= fds, "file descriptors (shared memory, pipes) were left open"


def test_aliases():
    assert MultiSyncCollector is MultiSyncDataCollector
    assert MultiAsyncCollector is MultiaSyncDataCollector


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"frames_per_batch": 0}, "frames_per_batch"),
        ({"frames_per_batch": 4, "use_buffers": False}, "use_buffers"),
        ({"frames_per_batch": 4, "storing_device": "meta"}, "storing_device"),
        ({"frames_per_batch": 4, "preemptive_threshold": 1.5}, "preemptive_threshold"),
        ({"frames_per_batch": 4, "preemptive_threshold": 0.5, "cat_results": "stack"}, "stack"),
        ({"frames_per_batch": 4, "cat_results": "concat"}, "cat_results"),
        ({"frames_per_batch": 4, "timeout": 0}, "timeout"),
        ({"frames_per_batch": 4, "init_random_frames": -1}, "init_random_frames .* got -1"),
        ({"frames_per_batch": 4, "max_frames_per_traj": 0}, "max_frames_per_traj .* got 0"),
        ({"frames_per_batch": 4, "total_frames": -5}, "total_frames .* got -5"),
        ({"frames_per_batch": 4.0}, "frames_per_batch .* got 4.0"),
        ({"frames_per_batch": 4, "num_sub_threads": 0}, "num_sub_threads"),
    ],
)
def test_bad_arguments_fail_before_starting_workers(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MultiSyncDataCollector([counting_env] * 2, **kwargs)


def test_numpy_integer_counts():
    with MultiSyncDataCollector(
        counting_env,
        num_workers=np.int64(2),
        frames_per_batch=np.int64(8),
        total_frames=np.int64(16),
        init_random_frames=np.int64(8),
    ) as collector:
        assert [b.numel() for b in collector] == [8, 8]
        assert type(collector.total_frames) is int


def test_needs_num_workers_or_a_list():
    with pytest.raises(ValueError, match="num_workers"):
        MultiaSyncDataCollector(counting_env, frames_per_batch=4)


class TestSync:
    def test_frames_and_traj_ids(self):
        env_fn = functools.partial(counting_env, 2, 5)
        with MultiSyncDataCollector(
            [env_fn, env_fn], frames_per_batch=12, total_frames=48
        ) as collector:
            batches = list(collector)
        assert len(batches) == 4
        assert all(b.batch_size == torch.Size([2, 2, 3]) for b in batches)
        assert collector.frames == 48
        data = torch.cat(batches, -1)  # [worker, env, time]
        ids = data[TRAJ].reshape(4, -1)
        sets = [set(row.tolist()) for row in ids]
        assert all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1 :])
        obs = data["observation"].reshape(4, -1)
        changes = torch.cat([torch.ones(4, 1, dtype=torch.bool), ids[:, 1:] != ids[:, :-1]], 1)
        assert torch.equal(changes, obs == 0)

    def test_cat_results_and_num_workers(self):
        with MultiSyncDataCollector(
            counting_env, num_workers=2, frames_per_batch=8, total_frames=8, cat_results=-1
        ) as collector:
            (batch,) = list(collector)
        assert batch.batch_size == torch.Size([8])

    def test_weights_update_reaches_workers(self):
        policy = threshold_policy()
        with MultiSyncDataCollector(
            [counting_env] * 2, policy, frames_per_batch=8, total_frames=-1
        ) as collector:
            it = iter(collector)
            assert next(it)["action"].sum() == 0
            with torch.no_grad():
                policy.module.linear.bias.fill_(1.0)
            assert next(it)["action"].sum() == 0  # not pushed yet
            collector.update_policy_weights_()
            assert (next(it)["action"] == 1).all()

    def test_update_at_each_batch(self):
        policy = threshold_policy()
        with MultiSyncDataCollector(
            [counting_env] * 2, policy, frames_per_batch=8, update_at_each_batch=True
        ) as collector:
            assert collector.next()["action"].sum() == 0
            with torch.no_grad():
                policy.module.linear.bias.fill_(1.0)
            assert (collector.next()["action"] == 1).all()

    def test_worker_options_and_controls(self):
        env_fn = functools.partial(counting_env, 0, 100)
        with MultiSyncDataCollector(
            [env_fn] * 2, frames_per_batch=8, max_frames_per_traj=3, init_random_frames=8
        ) as collector:
            batch = collector.next()
            assert batch["observation"][0].squeeze(-1).tolist() == [0, 1, 2, 0]
            assert batch["next", "truncated"][1].squeeze(-1).tolist() == [0, 0, 1, 0]
            collector.reset()
            assert collector.next()["observation"][:, 0].sum() == 0
            state = collector.state_dict()
            collector.load_state_dict(state)
            assert collector.frames == 16

    def test_seeded_runs_are_deterministic(self):
        def run(seed):
            torch.manual_seed(seed)
            with MultiSyncDataCollector(
                [PendulumEnv] * 2, frames_per_batch=20, total_frames=40
            ) as collector:
                collector.set_seed(seed)
                return torch.cat(list(collector), -1)

        a, b, c = run(0), run(0), run(1)
        assert (a == b).all()
        assert not torch.equal(a["action"], c["action"])
        # workers do not share a random stream
        assert not torch.equal(a["action"][0], a["action"][1])

    def test_preemptive_threshold(self):
        slow = functools.partial(SlowEnv, 0.05, max_steps=1000)
        with MultiSyncDataCollector(
            [counting_env, slow], frames_per_batch=40, total_frames=-1, preemptive_threshold=0.5
        ) as collector:
            start = time.monotonic()
            batch = collector.next()
            elapsed = time.monotonic() - start
        # the fast worker's 20 steps, and only a few of the slow one's
        assert 20 < batch.numel() < 30
        assert elapsed < 0.05 * 20 / 2

    def test_replay_buffer_and_state_dict(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(1000))
        with MultiSyncDataCollector(
            [counting_env] * 2, frames_per_batch=10, total_frames=30, replay_buffer=rb
        ) as collector:
            assert list(collector) == [None] * 3
            state = collector.state_dict()
        assert len(rb) == 30
        assert state["frames"] == 30 and state["worker0"]["frames"] == 15


class TestAsync:
    def test_frames_and_traj_ids(self):
        with MultiaSyncDataCollector(
            [counting_env] * 2, frames_per_batch=6, total_frames=60
        ) as collector:
            batches = list(collector)
        assert len(batches) == 10 and all(b.batch_size == torch.Size([6]) for b in batches)
        ids = [set(b[TRAJ].tolist()) for b in batches]
        parity = [{i % 2 for i in s} for s in ids]
        assert all(len(p) == 1 for p in parity)  # one worker per batch
        by_worker = [set().union(*(s for s, p in zip(ids, parity) if p == {w})) for w in (0, 1)]
        assert not by_worker[0] & by_worker[1]

    def test_weights_update_reaches_workers(self):
        policy = threshold_policy()
        with MultiaSyncDataCollector(
            [counting_env] * 2, policy, frames_per_batch=4, total_frames=-1
        ) as collector:
            it = iter(collector)
            assert next(it)["action"].sum() == 0
            with torch.no_grad():
                policy.module.linear.bias.fill_(1.0)
            collector.update_policy_weights_()
            # A worker holds at most two batches begun before the update (its two buffers):
            # the third batch from each worker is collected with the new weights only.
            per_worker: dict[int, list] = {0: [], 1: []}
            while min(len(b) for b in per_worker.values()) < 3:
                batch = next(it)
                per_worker[int(batch[TRAJ][0]) % 2].append(batch)
            assert all((b[2]["action"] == 1).all() for b in per_worker.values())

    def test_shutdown_during_background_collection(self, caplog):
        rb = ReplayBuffer(storage=LazyTensorStorage(10_000))
        collector = MultiaSyncDataCollector(
            [counting_env] * 2, frames_per_batch=10, replay_buffer=rb
        )
        collector.start()
        while len(rb) < 20:
            time.sleep(0.01)
        collector.shutdown()
        assert not collector.is_running()
        assert "failed" not in caplog.text

    def test_background_collection(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10_000))
        collector = MultiaSyncDataCollector(
            [counting_env] * 2, frames_per_batch=10, total_frames=-1, replay_buffer=rb
        )
        collector.start()
        deadline = time.monotonic() + 10
        while len(rb) < 100 and time.monotonic() < deadline:
            time.sleep(0.01)
        collector.async_shutdown(timeout=10)
        assert len(rb) >= 100


@pytest.mark.parametrize("cls", BOTH)
class TestFailures:
    def test_env_exception_surfaces_with_traceback(self, cls):
        env_fn = functools.partial(RaisingEnv, 3)
        start = time.monotonic()
        collector = cls([counting_env, env_fn], frames_per_batch=10, total_frames=-1)
        with pytest.raises(ValueError, match="boom at step 3") as info:
            for _ in collector:
                pass
        assert time.monotonic() - start < 10
        assert isinstance(info.value.__cause__, RemoteTraceback)
        assert "_step" in str(info.value.__cause__)
        collector.shutdown()

    def test_worker_errors_name_the_worker_and_its_pid(self, cls):
        collector = cls([counting_env, functools.partial(RaisingEnv, 3)], frames_per_batch=10)
        pid = collector._procs[1].pid
        with pytest.raises(ValueError) as info:
            for _ in collector:
                pass
        who = f"collector worker 1 (pid {pid})"
        assert str(info.value) == f"{who}: boom at step 3"
        assert who in str(info.value.__cause__)  # the worker's traceback says it too

    @pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes: Python 3.11")
    def test_errors_with_structured_arguments_get_a_note(self, cls):
        collector = cls([counting_env, _OSErrorEnv], frames_per_batch=10)
        pid = collector._procs[1].pid
        with pytest.raises(OSError) as info:
            for _ in collector:
                pass
        assert info.value.errno == 5 and info.value.strerror == "simulator gone"  # untouched
        assert info.value.__notes__ == [f"raised in collector worker 1 (pid {pid})"]

    def test_policy_exception_surfaces_with_traceback(self, cls):
        def policy(td):
            raise ZeroDivisionError("bad policy")

        collector = cls([counting_env] * 2, policy, frames_per_batch=10, trust_policy=True)
        with pytest.raises(ZeroDivisionError, match="bad policy") as info:
            collector.next()
        assert "in policy" in str(info.value.__cause__)
        collector.shutdown()

    def test_env_constructor_exception(self, cls):
        def broken():
            raise OSError("no simulator")

        with pytest.raises(OSError, match="no simulator"):
            cls([counting_env, broken], frames_per_batch=10)

    def test_sigkilled_worker_is_detected(self, cls):
        slow = functools.partial(SlowEnv, 0.001, max_steps=1000)
        collector = cls([slow, slow], frames_per_batch=20, total_frames=-1)
        it = iter(collector)
        next(it)
        temp_dirs = list(collector._temp_dirs)
        # the socket that sent the batch buffers (an async worker may deliver its first later)
        for _ in range(200):
            if os.listdir(temp_dirs[1]):
                break
            next(it)
        assert os.listdir(temp_dirs[1])
        os.kill(collector._procs[1].pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerError, match=r"worker 1 \(pid \d+\) .* SIGKILL"):
            for _ in range(1000):
                next(it)
        assert time.monotonic() - start < 10
        collector.shutdown()
        # the killed worker could not remove its multiprocessing temp dir: the parent did
        assert not any(os.path.exists(d) for d in temp_dirs)

    def test_hung_worker_times_out(self, cls):
        collector = cls([counting_env, _HangingEnv], frames_per_batch=10, timeout=1.0)
        hung = collector._procs[1]
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"worker 1 \(pid \d+\) is alive but sent nothing"):
            for _ in collector:
                pass
        assert time.monotonic() - start < 4.0
        assert not hung.is_alive()  # stopped at once; the fixture checks no child is left
        collector.shutdown()

    def test_shutdown_is_idempotent_and_complete(self, cls):
        collector = cls([counting_env] * 2, frames_per_batch=10, total_frames=-1)
        collector.next()
        procs = list(collector._procs)
        collector.shutdown()
        collector.shutdown()
        assert all(not p.is_alive() for p in procs)
        with pytest.raises(RuntimeError):
            collector.next()


@pytest.mark.slow
def test_spawn_start_method():
    with MultiSyncDataCollector(
        [counting_env] * 2,
        threshold_policy(),
        frames_per_batch=8,
        total_frames=16,
        mp_start_method="spawn",
    ) as collector:
        assert [b.numel() for b in collector] == [8, 8]
