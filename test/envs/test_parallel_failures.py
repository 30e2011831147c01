"""ParallelEnv under failure: a worker raising, a worker killed, cleanup, no busy-waiting.

Must show 3: the parent raises a clear error within 10 s and no child process remains.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import time
from functools import partial

import pytest
import torch
from _envs import CountingEnv

from torchrl.envs import ParallelEnv

LIMIT_S = 10.0


def _children() -> set[int]:
    """Pids of this process's live (non-zombie) children, read from /proc."""
    me = os.getpid()
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            out.add(int(entry))
    return out


def _no_children_left(before: set[int], timeout: float = 5.0) -> bool:
    import multiprocessing

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not multiprocessing.active_children() and _children() <= before:
            return True
        time.sleep(0.05)
    return False


class FailingEnv(CountingEnv):
    """Raises in ``_step`` after ``fail_after`` steps."""

    def __init__(self, fail_after: int = 3, **kwargs):
        super().__init__(max_steps=1000, **kwargs)
        self.fail_after = fail_after
        self.steps = 0

    def _step(self, tensordict):
        self.steps += 1
        if self.steps > self.fail_after:
            raise ValueError(f"simulated failure at step {self.steps}")
        return super()._step(tensordict)


class SlowEnv(CountingEnv):
    """Sleeps in ``_step``: the parent waits meanwhile."""

    def _step(self, tensordict):
        time.sleep(0.3)
        return super()._step(tensordict)


def _only_in_worker(parent: int):
    if os.getpid() != parent:
        raise RuntimeError("cannot build the env in a worker")
    return CountingEnv()


@pytest.fixture
def before():
    return _children()


def test_worker_exception(before):
    env = ParallelEnv(2, [partial(FailingEnv, fail_after=1000), FailingEnv])
    env.reset()
    start = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        env.rollout(20)
    assert time.monotonic() - start < LIMIT_S
    message = str(info.value)
    assert re.search(r"ParallelEnv worker 1 \(pid \d+\) raised ValueError during step", message)
    assert "simulated failure at step 4" in message
    assert "Traceback" in message and "in _step" in message  # the worker's traceback
    assert env.is_closed and env.worker_pids == []
    assert _no_children_left(before)
    env.close()  # still idempotent


def test_worker_killed_mid_rollout(before):
    env = ParallelEnv(3, CountingEnv, {"max_steps": 1000})
    env.reset()
    victim = env.worker_pids[1]

    def kill_at_step_3(env_, td, count=[0]):  # noqa: B006 (a counter)
        count[0] += 1
        if count[0] == 3:
            os.kill(victim, signal.SIGKILL)

    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"worker 1 \(pid \d+\) was killed by SIGKILL"):
        env.rollout(100, callback=kill_at_step_3)
    assert time.monotonic() - start < LIMIT_S
    assert env.is_closed
    assert _no_children_left(before)
    # the env is usable again: new workers
    assert env.rollout(3).batch_size == torch.Size([3, 3])
    env.close()
    assert _no_children_left(before)


def test_worker_killed_while_idle(before):
    env = ParallelEnv(2, CountingEnv)
    env.reset()
    os.kill(env.worker_pids[0], signal.SIGKILL)
    time.sleep(0.1)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="worker 0"):
        env.rand_step(env.reset())
    assert time.monotonic() - start < LIMIT_S
    assert _no_children_left(before)


def test_construction_failure_in_worker(before):
    env = ParallelEnv(2, partial(_only_in_worker, os.getpid()))
    with pytest.raises(
        RuntimeError, match=r"worker [01] \(pid \d+\) raised RuntimeError during start"
    ):
        env.reset()
    assert _no_children_left(before)


def test_garbage_collection(before):
    env = ParallelEnv(2, CountingEnv)
    env.reset()
    pids = set(env.worker_pids)
    assert pids <= _children()
    del env
    gc.collect()
    assert _no_children_left(before)


def _shared_mappings() -> list[str]:
    """This process's mappings of shared-memory segments (torch's live in /dev/shm)."""
    with open("/proc/self/maps") as f:
        return [line for line in f.read().splitlines() if "/dev/shm/" in line]


def test_no_busy_wait_and_no_shm_left(before):
    mapped = len(_shared_mappings())
    env = ParallelEnv(2, SlowEnv, {"max_steps": 100})
    td = env.rand_action(env.reset())
    assert len(_shared_mappings()) > mapped  # the buffers
    cpu, wall = time.process_time(), time.monotonic()
    for _ in range(2):
        env.step(td)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    assert wall >= 0.55  # the workers slept in parallel, 0.3 s per step
    assert cpu < 0.1 * wall  # the parent slept too
    env.close()
    assert _no_children_left(before)
    gc.collect()
    assert len(_shared_mappings()) == mapped


def test_interrupt_leaves_no_workers(before):
    env = ParallelEnv(2, SlowEnv)
    env.reset()

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(KeyboardInterrupt):
            env.rand_step(env.reset())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert env.is_closed
    assert _no_children_left(before)


class HangingEnv(CountingEnv):
    """In a worker (not in the test's process), never returns from ``_step`` or ``_reset``."""

    def __init__(self, hang_in: str, test_pid: int, **kwargs):
        super().__init__(**kwargs)
        self.hang_in = hang_in
        self.test_pid = test_pid  # the env built in the test's process reads the specs

    def _hang(self, where: str) -> None:
        if where == self.hang_in and os.getpid() != self.test_pid:
            time.sleep(120)

    def _reset(self, tensordict, **kwargs):
        self._hang("reset")
        return super()._reset(tensordict, **kwargs)

    def _step(self, tensordict):
        self._hang("step")
        return super()._step(tensordict)


@pytest.mark.parametrize("hang_in", ["step", "reset"])
def test_hung_worker_times_out(before, hang_in):
    env = ParallelEnv(2, [CountingEnv, partial(HangingEnv, hang_in, os.getpid())], timeout=0.5)
    env.start()
    hung = env.worker_pids[1]
    start = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        env.reset() if hang_in == "reset" else env.rand_step(env.rand_action(env.fake_tensordict()))
    elapsed = time.monotonic() - start
    assert 0.5 <= elapsed < 3.0  # the timeout, then the shutdown
    message = str(info.value)
    assert re.search(rf"ParallelEnv worker 1 \(pid \d+\) sent no answer to {hang_in}", message)
    assert "worker 0" not in message and "timeout=0.5 s" in message
    assert f"pid {hung}" in message
    assert env.is_closed and env.worker_pids == []
    start = time.monotonic()
    env.close()  # no hang
    assert time.monotonic() - start < 0.5
    assert _no_children_left(before)


def test_timeout_covers_the_start(before):
    env = ParallelEnv(1, CountingEnv, timeout=0.5)
    env._create_env_fn = [partial(time.sleep, 120)]  # the worker never builds its env
    with pytest.raises(TimeoutError, match=r"worker 0 \(pid \d+\) sent no answer to start"):
        env.reset()
    assert _no_children_left(before)


def test_timeout_does_not_fire_on_slow_steps(before):
    # 0.3 s per step: the rollout takes longer than the timeout, which bounds each command
    env = ParallelEnv(2, SlowEnv, timeout=1.0)
    assert env.rollout(4).batch_size == torch.Size([2, 4])
    env.close()
    env = ParallelEnv(2, SlowEnv, timeout=None)
    assert env.rollout(1).batch_size == torch.Size([2, 1])
    env.close()
    assert _no_children_left(before)


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), "1", True])
def test_bad_timeout(bad):
    with pytest.raises(ValueError, match="timeout"):
        ParallelEnv(2, CountingEnv, timeout=bad)
