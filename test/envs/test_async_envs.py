"""AsyncEnvPool (threading and multiprocessing backends): async sends and receives routed by
env index, the synchronous EnvBase contract, failures reported, workers stopped."""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
import os
import signal
import time
from functools import partial
from typing import Any

import pytest
import torch
from _envs import CountingEnv
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import (
    AsyncEnvPool,
    EnvBase,
    ProcessorAsyncEnvPool,
    SerialEnv,
    ThreadingAsyncEnvPool,
    check_env_specs,
)
from torchrl.envs.async_envs import AsyncEnvPool as AsyncEnvPoolFromModule

BACKENDS = ("threading", "multiprocessing")
_has_gym = importlib.util.find_spec("gymnasium") is not None


class TaggedEnv(EnvBase):
    """Observation ``[tag, count]``; reward ``action * tag``; done after ``max_steps`` steps.

    ``delay`` seconds of sleep per step (the GIL is released), ``fail_at`` raises a
    ``ValueError`` at that step, ``die_at`` ends the process (``os._exit(3)``) at that step.
    """

    def __init__(
        self,
        tag: int,
        delay: float = 0.0,
        max_steps: int = 100,
        fail_at: int | None = None,
        die_at: int | None = None,
    ) -> None:
        super().__init__()
        self.tag = tag
        self.delay = delay
        self.max_steps = max_steps
        self.fail_at = fail_at
        self.die_at = die_at
        self.count = 0
        self.seeds: list[int | None] = []
        self.observation_spec = Composite(observation=Unbounded(shape=(2,)))
        self.action_spec = Categorical(5, shape=(1,))

    def _obs(self) -> torch.Tensor:
        return torch.tensor([float(self.tag), float(self.count)])

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        self.count = 0
        return TensorDict(observation=self._obs())

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.count += 1
        if self.delay:
            time.sleep(self.delay)
        if self.fail_at == self.count:
            raise ValueError(f"env {self.tag} broke on purpose")
        if self.die_at == self.count:
            os._exit(3)
        done = torch.tensor([self.count >= self.max_steps])
        reward = tensordict["action"].float() * self.tag
        return TensorDict(observation=self._obs(), reward=reward, done=done)

    def _set_seed(self, seed: int | None) -> None:
        self.seeds.append(seed)


def _pool(backend: str, makers: Any, **kwargs: Any) -> AsyncEnvPool:
    return AsyncEnvPool(makers, backend=backend, **kwargs)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pids: list[int], limit: float = 5.0) -> list[int]:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


# ------------------------------------------------------------------------------ construction
def test_module_path_and_backend_dispatch() -> None:
    assert AsyncEnvPoolFromModule is AsyncEnvPool
    pool = AsyncEnvPool([partial(TaggedEnv, 0)], backend="threading")
    assert type(pool) is ThreadingAsyncEnvPool and isinstance(pool, AsyncEnvPool)
    assert pool.batch_size == torch.Size([1])
    pool.close()
    pool = AsyncEnvPool(partial(TaggedEnv, 0), backend="multiprocessing")
    assert type(pool) is ProcessorAsyncEnvPool
    pool.close()
    # a default-backend pool is threaded; a subclass keeps its own backend
    pool = AsyncEnvPool(TaggedEnv(0))
    assert type(pool) is ThreadingAsyncEnvPool
    pool.close()
    pool = ProcessorAsyncEnvPool([partial(TaggedEnv, 0)])
    assert pool.backend == "multiprocessing"
    pool.close()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="backend must be"):
        AsyncEnvPool([TaggedEnv(0)], backend="ray")
    with pytest.raises(NotImplementedError, match="asyncio"):
        AsyncEnvPool([TaggedEnv(0)], backend="asyncio")
    with pytest.raises(ValueError, match="belongs to ProcessorAsyncEnvPool"):
        ThreadingAsyncEnvPool([TaggedEnv(0)], backend="multiprocessing")
    with pytest.raises(ValueError, match="stack must be one of"):
        AsyncEnvPool([TaggedEnv(0)], stack="tight")
    with pytest.raises(TypeError, match=r"env_makers\[1\] is neither"):
        AsyncEnvPool([TaggedEnv(0), 3])
    with pytest.raises(ValueError, match="empty"):
        AsyncEnvPool([])
    with pytest.raises(ValueError, match="timeout"):
        AsyncEnvPool([TaggedEnv(0)], timeout=-1)
    with pytest.raises(ValueError, match="2 dicts for 1 env makers"):
        AsyncEnvPool([TaggedEnv], create_env_kwargs=[{"tag": 0}, {"tag": 1}])
    with pytest.raises(ValueError, match="differs between the envs"):
        AsyncEnvPool([TaggedEnv(0), CountingEnv()])


# ------------------------------------------------------------------------ synchronous contract
@pytest.mark.parametrize("backend", BACKENDS)
def test_sync_contract_matches_serial_env(backend: str) -> None:
    makers = [partial(CountingEnv, max_steps=2 + i) for i in range(3)]
    pool = _pool(backend, makers)
    serial = SerialEnv(3, makers)
    try:
        check_env_specs(pool)
        assert pool.batch_size == torch.Size([3])
        assert pool.full_action_spec == serial.full_action_spec
        torch.manual_seed(0)
        ours = pool.rollout(6, break_when_any_done=False)
        torch.manual_seed(0)
        theirs = serial.rollout(6, break_when_any_done=False)
        assert ours.batch_size == torch.Size([3, 6])
        for key in (("next", "observation"), ("next", "reward"), ("next", "done")):
            assert torch.equal(ours[key], theirs[key]), key
        assert "env_index" not in ours.keys(True)
    finally:
        pool.close()
        serial.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_batched_sub_envs(backend: str) -> None:
    maker = partial(CountingEnv, batch_size=[2], max_steps=torch.tensor([2, 3]))
    pool = _pool(backend, [maker] * 2)
    try:
        check_env_specs(pool)
        rollout = pool.rollout(4, break_when_any_done=False)
        assert rollout.batch_size == torch.Size([2, 2, 4])
        # each inner sub-env restarts when it is done (partial resets inside each sub-env)
        counts = rollout["next", "observation"][0, :, :, 0].tolist()
        assert counts == [[1.0, 2.0, 1.0, 2.0], [1.0, 2.0, 3.0, 1.0]]
        pool.async_reset_send(env_index=[1])
        roots = pool.async_reset_recv()
        # the env index covers the inner batch of a result
        assert roots["env_index"].tolist() == [[1, 1]]
        roots["action"] = torch.ones(1, 2, 1, dtype=torch.int64)
        pool.async_step_send(roots)
        out = pool.async_step_recv()
        assert out["next", "reward"].squeeze(-1).tolist() == [[1.0, 1.0]]
    finally:
        pool.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_reset_through_reset_mask(backend: str) -> None:
    pool = _pool(backend, [partial(TaggedEnv, i) for i in range(3)])
    try:
        td = pool.reset()
        td["action"] = torch.ones(3, 1, dtype=torch.int64)
        td = pool.step(td)["next"].exclude("reward")
        assert td["observation"][:, 1].tolist() == [1.0, 1.0, 1.0]
        td["_reset"] = torch.tensor([[True], [False], [True]])
        out = pool.reset(td)
        # the sub-env not reset keeps its observation; the others restart
        assert out["observation"][:, 1].tolist() == [0.0, 1.0, 0.0]
        assert "_reset" not in out.keys()
        td = out.clone()
        td["_reset"] = torch.zeros(3, 1, dtype=torch.bool)
        assert torch.equal(pool.reset(td)["observation"], out["observation"])
    finally:
        pool.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_seed_chains_like_serial_env(backend: str) -> None:
    makers = [partial(TaggedEnv, i) for i in range(2)]
    pool = _pool(backend, makers)
    serial = SerialEnv(2, makers)
    try:
        assert pool.set_seed(7) == serial.set_seed(7)
        if backend == "threading":
            first, second = (env.seeds for env in pool.envs)  # type: ignore[attr-defined]
            assert first == [7] and len(second) == 1 and second[0] != 7
    finally:
        pool.close()
        serial.close()


# ------------------------------------------------------------------------------- async API
@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_sends_routed_by_env_index(backend: str) -> None:
    pool = _pool(backend, [partial(TaggedEnv, i) for i in range(4)])
    try:
        pool.async_reset_send(env_index=[3, 1])
        roots = pool.async_reset_recv(min_get=2)
        assert sorted(roots["env_index"].tolist()) == [1, 3]
        assert roots["observation"][:, 0].tolist() == roots["env_index"].float().tolist()
        assert pool.busy == []
        # each row's action reaches its own env: reward = action * tag
        roots["action"] = torch.where(roots["env_index"] == 3, 2, 4).unsqueeze(-1)
        pool.async_step_send(roots)
        assert sorted(pool.busy) == [1, 3]
        out = pool.async_step_recv(min_get=2)
        for row in out.unbind(0):
            i = int(row["env_index"])
            assert row["next", "observation"].tolist() == [float(i), 1.0]
            assert row["next", "reward"].item() == (2 if i == 3 else 4) * i
            assert int(row["action"]) == (2 if i == 3 else 4)
        # a sub-env not yet reset can be reset on its own, others stay idle
        pool.async_reset_send(TensorDict(env_index=torch.tensor([0]), batch_size=[1]))
        assert pool.async_reset_recv()["env_index"].tolist() == [0]
    finally:
        pool.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_recv_returns_fast_envs_first(backend: str) -> None:
    pool = _pool(backend, [partial(TaggedEnv, 0, delay=0.4), partial(TaggedEnv, 1)])
    try:
        roots = (pool.async_reset_send(), pool.async_reset_recv(2))[1]
        roots["action"] = torch.zeros(2, 1, dtype=torch.int64)
        pool.async_step_send(roots)
        first = pool.async_step_recv(min_get=1)
        assert first["env_index"].tolist() == [1]
        assert pool.busy == [0]
        second = pool.async_step_recv()
        assert second["env_index"].tolist() == [0]
        assert second["next", "observation"].tolist() == [[0.0, 1.0]]
    finally:
        pool.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_step_and_maybe_reset_async(backend: str) -> None:
    pool = _pool(backend, [partial(TaggedEnv, i, max_steps=2) for i in range(2)])
    try:
        pool.async_reset_send()
        td = pool.async_reset_recv(2)
        for t in range(3):
            td["action"] = torch.ones(2, 1, dtype=torch.int64)
            pool.async_step_and_maybe_reset_send(td)
            steps, td = pool.async_step_and_maybe_reset_recv(2)
            assert torch.equal(steps["env_index"], td["env_index"])
            counts = td["observation"][:, 1].tolist()
            # done at the 2nd step: the next input comes from a reset
            assert counts == ([1.0, 1.0] if t != 1 else [0.0, 0.0])
            assert steps["next", "done"].all().item() == (t == 1)
    finally:
        pool.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_misuse_is_reported(backend: str) -> None:
    pool = _pool(backend, [partial(TaggedEnv, i) for i in range(2)])
    try:
        pool.async_reset_send(env_index=[0])
        with pytest.raises(RuntimeError, match="sub-env 0 has a reset in flight"):
            pool.async_reset_send(env_index=[0])
        with pytest.raises(RuntimeError, match="waiting would never end"):
            pool.async_reset_recv(min_get=2)
        with pytest.raises(RuntimeError, match=r"sub-envs \[0\] have asynchronous commands"):
            pool.reset()
        pool.async_reset_recv()
        with pytest.raises(IndexError, match="env_index 5 is out of range"):
            pool.async_reset_send(env_index=[5])
        with pytest.raises(ValueError, match="names a sub-env twice"):
            pool.async_reset_send(env_index=[1, 1])
        with pytest.raises(ValueError, match="one row per sub-env"):
            pool.async_step_send(TensorDict(action=torch.zeros(3, 1), batch_size=[3]))
        with pytest.raises(TypeError, match="expected a TensorDict"):
            pool.async_step_send({"action": torch.zeros(2, 1)})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="min_get must be at least 1"):
            pool.async_step_recv(min_get=0)
    finally:
        pool.close()


def test_lazy_stack() -> None:
    pool = AsyncEnvPool([partial(TaggedEnv, i) for i in range(2)], stack="lazy")
    try:
        pool.async_reset_send()
        out = pool.async_reset_recv(2)
        assert isinstance(out, LazyStackedTensorDict)
        assert out.batch_size == torch.Size([2])
    finally:
        pool.close()


# --------------------------------------------------------------------------------- failures
@pytest.mark.parametrize("backend", BACKENDS)
def test_env_error_reported_and_pool_shut_down(backend: str) -> None:
    pool = _pool(backend, [partial(TaggedEnv, 0), partial(TaggedEnv, 1, fail_at=1)])
    pids = pool.worker_pids if backend == "multiprocessing" else []  # type: ignore[attr-defined]
    pool.reset()
    pool.async_step_send(TensorDict(action=torch.zeros(2, 1, dtype=torch.int64), batch_size=[2]))
    with pytest.raises(RuntimeError, match="sub-env 1 .*raised ValueError during step") as info:
        pool.async_step_recv(2)
    assert "broke on purpose" in str(info.value)
    if backend == "multiprocessing":
        assert "Traceback" in str(info.value)
        assert _wait_gone(pids) == []
    else:
        assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(RuntimeError, match="shut down after a failure"):
        pool.reset()
    pool.close()


class _FailsInWorker(TaggedEnv):
    """Builds in the test process (to read the specs), raises when built in a worker."""

    def __init__(self, parent_pid: int) -> None:
        if os.getpid() != parent_pid:
            raise OSError("no simulator license in this process")
        super().__init__(0)


def test_worker_start_failure_reported() -> None:
    with pytest.raises(RuntimeError, match="raised OSError during start: no simulator") as info:
        ProcessorAsyncEnvPool([partial(TaggedEnv, 1), partial(_FailsInWorker, os.getpid())])
    assert "sub-env 1" in str(info.value)


def test_dead_worker_reported() -> None:
    pool = ProcessorAsyncEnvPool([partial(TaggedEnv, 0), partial(TaggedEnv, 1, die_at=1)])
    pids = pool.worker_pids
    pool.reset()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"sub-env 1 \(pid \d+\) died \(exit code 3\)"):
        pool.rollout(3)
    assert time.monotonic() - start < 5
    assert _wait_gone(pids) == []
    assert pool.worker_pids == []


def test_killed_worker_reported() -> None:
    pool = ProcessorAsyncEnvPool([partial(TaggedEnv, 0), partial(TaggedEnv, 1, delay=5.0)])
    pids = pool.worker_pids
    td = pool.reset()
    td["action"] = torch.zeros(2, 1, dtype=torch.int64)
    pool.async_step_send(td)
    os.kill(pids[1], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"sub-env 1 .*killed by SIGKILL"):
        pool.async_step_recv(2)
    assert time.monotonic() - start < 5
    assert _wait_gone(pids) == []


def test_threading_timeout() -> None:
    pool = ThreadingAsyncEnvPool([partial(TaggedEnv, 0, delay=0.5)], timeout=0.1)
    td = pool.reset()
    td["action"] = torch.zeros(1, 1, dtype=torch.int64)
    pool.async_step_send(td)
    with pytest.raises(TimeoutError, match="timeout=0.1"):
        pool.async_step_recv()
    pool.close()


def test_process_timeout_stops_workers() -> None:
    pool = ProcessorAsyncEnvPool([partial(TaggedEnv, 0, delay=30.0)], timeout=0.2)
    pids = pool.worker_pids
    td = pool.reset()
    td["action"] = torch.zeros(1, 1, dtype=torch.int64)
    pool.async_step_send(td)
    with pytest.raises(TimeoutError, match="hung env"):
        pool.async_step_recv()
    assert _wait_gone(pids) == []


# ---------------------------------------------------------------------------------- cleanup
def test_close_stops_workers() -> None:
    pool = ProcessorAsyncEnvPool([partial(TaggedEnv, i) for i in range(2)])
    pids = pool.worker_pids
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    pool.rollout(2)
    pool.close()
    pool.close()  # idempotent
    assert pool.is_closed and pool.worker_pids == []
    assert _wait_gone(pids) == []
    with pytest.raises(RuntimeError, match="closed"):
        pool.async_reset_send()


def test_threading_close_closes_envs() -> None:
    envs = [TaggedEnv(0), TaggedEnv(1)]
    pool = ThreadingAsyncEnvPool(envs)
    pool.rollout(2)
    pool.close()
    assert all(env.is_closed for env in envs)


def _orphan_parent(conn: Any) -> None:
    pool = ProcessorAsyncEnvPool([partial(TaggedEnv, i) for i in range(2)])
    conn.send(pool.worker_pids)
    time.sleep(60)


def test_workers_exit_with_their_parent() -> None:
    ctx = mp.get_context("fork")
    here, there = ctx.Pipe()
    parent = ctx.Process(target=_orphan_parent, args=(there,))
    parent.start()
    try:
        assert here.poll(20), "the pool's parent did not report its workers"
        pids = here.recv()
        assert all(_alive(p) for p in pids)
        os.kill(parent.pid, signal.SIGKILL)  # type: ignore[arg-type]
        parent.join(5)
        assert _wait_gone(pids) == []
    finally:
        if parent.exitcode is None:
            parent.kill()
            parent.join()


# ------------------------------------------------------------------------------ gymnasium
@pytest.mark.skipif(not _has_gym, reason="gymnasium is not installed")
@pytest.mark.parametrize("backend", BACKENDS)
def test_gym_cartpole(backend: str) -> None:
    from torchrl.envs import GymEnv

    pool = _pool(backend, partial(GymEnv, "CartPole-v1"), stack="dense")
    pool2 = _pool(backend, [partial(GymEnv, "CartPole-v1")] * 2)
    try:
        check_env_specs(pool2)
        rollout = pool2.rollout(5, break_when_any_done=False)
        assert rollout["next", "observation"].shape == torch.Size([2, 5, 4])
        pool.async_reset_send()
        td = pool.async_reset_recv()
        td["action"] = pool.action_spec_unbatched.rand((1,))
        pool.async_step_send(td)
        out = pool.async_step_recv()
        assert out["next", "observation"].shape == torch.Size([1, 4])
    finally:
        pool.close()
        pool2.close()
