"""AsyncBatchedCollector: rollout workers, a batched inference server, versions and faults."""

from __future__ import annotations

import functools
import os
import signal
import time

import pytest
import torch
from _collector_helpers import RaisingEnv, child_pids, counting_env, pid_alive
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from torchrl.collectors import AsyncBatchedCollector, WorkerError
from torchrl.envs import PendulumEnv
from torchrl.envs.utils import ExplorationType


def linear_policy(bias: float = 0.0) -> TensorDictModule:
    """A deterministic Pendulum policy: action = tanh(w . obs + b)."""
    net = nn.Sequential(nn.Linear(3, 1), nn.Tanh())
    with torch.no_grad():
        net[0].weight.fill_(0.3)
        net[0].bias.fill_(bias)
    return TensorDictModule(net, in_keys=["observation"], out_keys=["action"])


def count_policy(bias: float = 0.0) -> TensorDictModule:
    """A CountingEnv policy whose action is 1 when its bias is positive, else 0."""
    lin = nn.Linear(1, 1)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.fill_(bias)

    class Act(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = lin

        def forward(self, observation: torch.Tensor) -> torch.Tensor:
            return (self.lin(observation) > 0).long()

    return TensorDictModule(Act(), in_keys=["observation"], out_keys=["action"])


def per_env_observations(collector: AsyncBatchedCollector, steps: int) -> dict[int, torch.Tensor]:
    """The first ``steps`` observations of each env, in order, across batches."""
    seen: dict[int, list[torch.Tensor]] = {}
    for batch in collector:
        for row in range(batch.shape[0]):
            env = int(batch["collector", "env_index"][row, 0])
            seen.setdefault(env, []).append(batch["observation"][row])
        if all(sum(len(x) for x in v) >= steps for v in seen.values()) and len(seen) == 4:
            break
    return {k: torch.cat(v)[:steps] for k, v in seen.items()}


def test_batches_shapes_versions_and_env_index():
    collector = AsyncBatchedCollector(
        [PendulumEnv] * 4,
        policy=linear_policy(),
        frames_per_batch=32,
        total_frames=96,
        num_workers=2,
        num_splits=2,
        seed=0,
    )
    try:
        batches = list(collector)
        assert [tuple(b.shape) for b in batches] == [(4, 8)] * 3
        envs = set()
        for b in batches:
            assert b["policy_version"].dtype == torch.int64
            assert (b["policy_version"] == 0).all()
            # 4 groups of one env each, delivering in whatever order they finish
            index = b["collector", "env_index"]
            assert (index == index[:, :1]).all()
            envs.update(index[:, 0].tolist())
            assert ("collector", "traj_ids") in b.keys(True)
            assert ("next", "reward") in b.keys(True)
        assert envs == {0, 1, 2, 3}
        assert collector.frames == 96
        assert collector.last_policy_lag == {"min": 0.0, "mean": 0.0, "max": 0.0}
    finally:
        collector.shutdown()


def test_double_buffered_same_trajectories_as_single_buffered():
    kwargs = dict(
        policy=linear_policy(0.1),
        frames_per_batch=16,
        total_frames=-1,
        num_workers=1,
        exploration_type=ExplorationType.DETERMINISTIC,
        seed=3,
    )
    single = AsyncBatchedCollector([PendulumEnv] * 4, num_splits=1, **kwargs)
    try:
        one = per_env_observations(single, 12)
    finally:
        single.shutdown()
    double = AsyncBatchedCollector([PendulumEnv] * 4, num_splits=2, **kwargs)
    try:
        two = per_env_observations(double, 12)
    finally:
        double.shutdown()
    assert sorted(one) == sorted(two) == [0, 1, 2, 3]
    # equal up to float rounding: the server's matmul over 2 or 4 rows may round differently
    for env in one:
        torch.testing.assert_close(one[env], two[env], rtol=0, atol=1e-5)
    # different envs have different trajectories (the seeds differ per env)
    assert not torch.equal(one[0], one[1])


def test_server_batches_requests_from_several_groups():
    collector = AsyncBatchedCollector(
        [PendulumEnv] * 8,
        policy=linear_policy(),
        frames_per_batch=64,
        total_frames=64 * 6,
        num_workers=2,
        num_splits=2,
        seed=0,
    )
    try:
        for _ in collector:
            pass
        stats = collector.server_stats()
    finally:
        collector.shutdown()
    # a group sends 2 rows per request: a batch of more rows gathered several groups
    assert stats["max_batch_rows"] > 2, stats


def test_weight_update_changes_actions_and_versions():
    policy = count_policy(-1.0)
    collector = AsyncBatchedCollector(
        [functools.partial(counting_env, max_steps=1000)] * 2,
        policy=policy,
        frames_per_batch=8,
        num_workers=1,
        num_splits=2,
        max_policy_lag=0,
        seed=0,
    )
    try:
        it = iter(collector)
        first = next(it)
        assert (first["action"] == 0).all() and (first["policy_version"] == 0).all()
        with torch.no_grad():
            policy.module.lin.bias.fill_(1.0)
        collector.update_policy_weights_()
        assert collector.policy_version == 1
        # with max_policy_lag=0 only rows collected entirely with the new weights come out
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            batch = next(it)
            if batch.numel():
                break
        assert batch.numel() > 0
        assert (batch["policy_version"] == 1).all()
        assert (batch["action"] == 1).all()
        assert collector.last_policy_lag["max"] <= 1
    finally:
        collector.shutdown()


@pytest.mark.parametrize("backend", ["threading", "multiprocessing"])
def test_weight_update_without_waiting(backend):
    """update_policy_weights_(wait=False): the server applies every update, in order."""
    policy = count_policy(-1.0)
    collector = AsyncBatchedCollector(
        [functools.partial(counting_env, max_steps=1000)] * 2,
        policy=policy,
        frames_per_batch=8,
        num_workers=1,
        num_splits=2,
        policy_backend=backend,
        seed=0,
    )
    try:
        it = iter(collector)
        next(it)
        with torch.no_grad():
            policy.module.lin.bias.fill_(1.0)
        for _ in range(3):
            collector.update_policy_weights_(wait=False)
        deadline = time.monotonic() + 10
        while collector.policy_version < 3 and time.monotonic() < deadline:
            next(it)
        assert collector.policy_version == 3
        while time.monotonic() < deadline:
            batch = next(it)
            # steps stamped with a version after the first update were computed with bias 1
            new = batch["policy_version"] >= 1
            if new.any():
                break
        assert new.any() and (batch["action"][new] == 1).all()
        assert (batch["action"][~new] == 0).all()
    finally:
        collector.shutdown()


def test_worker_exception_is_raised_here():
    collector = AsyncBatchedCollector(
        [functools.partial(RaisingEnv, fail_at=5)] * 2,
        policy=count_policy(),
        frames_per_batch=4,
        num_workers=1,
        num_splits=2,
        seed=0,
    )
    start = time.monotonic()
    with pytest.raises(ValueError, match="boom"):
        for _ in collector:
            pass
    assert time.monotonic() - start < 10
    collector.shutdown()


def test_dead_worker_reported_and_nothing_left_behind():
    before = child_pids()
    collector = AsyncBatchedCollector(
        [functools.partial(counting_env, max_steps=1000)] * 4,
        policy=count_policy(),
        frames_per_batch=8,
        num_workers=2,
        num_splits=2,
        seed=0,
    )
    it = iter(collector)
    next(it)
    pids = [p.pid for p in collector._pool.procs]  # noqa: SLF001 - the test kills one
    os.kill(pids[0], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(WorkerError, match="died"):
        for _ in range(10_000):
            next(it)
    assert time.monotonic() - start < 10
    collector.shutdown()
    time.sleep(0.2)
    assert not any(pid_alive(p) for p in pids)
    assert child_pids() <= before


def test_replay_buffer_and_postproc():
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyTensorStorage(100, ndim=2))
    seen = []

    def post(td: TensorDict) -> TensorDict:
        seen.append(td.shape)
        return td

    collector = AsyncBatchedCollector(
        [PendulumEnv] * 2,
        policy=linear_policy(),
        frames_per_batch=8,
        total_frames=16,
        num_workers=1,
        postproc=post,
        replay_buffer=rb,
        seed=0,
    )
    try:
        assert list(collector) == [None, None]
    finally:
        collector.shutdown()
    assert len(seen) == 2 and len(rb) == 16  # frames


@pytest.mark.parametrize(
    ("kwargs", "err", "match"),
    [
        (dict(create_env_fn=PendulumEnv), TypeError, "list of env constructors"),
        (dict(create_env_fn=[PendulumEnv] * 3, num_workers=1, num_splits=2), ValueError, "evenly"),
        (dict(create_env_fn=[PendulumEnv] * 2, frames_per_batch=7), ValueError, "multiple"),
        (dict(create_env_fn=[PendulumEnv] * 2, num_splits=0), ValueError, "num_splits"),
        (
            dict(create_env_fn=[functools.partial(PendulumEnv, batch_size=[2])] * 2),
            ValueError,
            "empty batch size",
        ),
    ],
)
def test_bad_arguments(kwargs, err, match):
    kwargs = {"policy": linear_policy(), "frames_per_batch": 8, "num_workers": 1, **kwargs}
    before = child_pids()
    with pytest.raises(err, match=match):
        AsyncBatchedCollector(**kwargs)
    assert child_pids() <= before


def test_several_policies_each_with_its_envs():
    policies = [count_policy(-1.0), count_policy(1.0)]
    collector = AsyncBatchedCollector(
        [functools.partial(counting_env, max_steps=1000)] * 4,
        policy=policies,
        policy_map=[1, 1, 0, 0],
        frames_per_batch=8,
        total_frames=64,
        num_workers=1,
        num_splits=2,
        seed=0,
    )
    try:
        seen = set()
        for batch in collector:
            pid = collector.last_policy_id
            seen.add(pid)
            assert (batch["collector", "policy_id"] == pid).all()
            # policy 1 (action 1) runs envs 0-1, policy 0 (action 0) envs 2-3
            assert (batch["action"] == pid).all()
            expected = {0, 1} if pid == 1 else {2, 3}
            assert set(batch["collector", "env_index"][:, 0].tolist()) == expected
        assert seen == {0, 1}
        assert collector.policy_versions == [0, 0]
        with pytest.raises(ValueError, match="policy_id"):
            collector.update_policy_weights_(policies[0].state_dict())
        collector.update_policy_weights_(policy_id=1)
        assert collector.policy_versions == [0, 1]
    finally:
        collector.shutdown()


def test_policy_map_must_keep_groups_whole():
    with pytest.raises(ValueError, match="one group"):
        AsyncBatchedCollector(
            [PendulumEnv] * 4,
            policy=[linear_policy(), linear_policy()],
            policy_map=[0, 1, 0, 1],
            frames_per_batch=8,
            num_workers=1,
            num_splits=2,
        )


def test_dead_server_is_reported_within_seconds():
    before = child_pids()
    collector = AsyncBatchedCollector(
        [functools.partial(counting_env, max_steps=1000)] * 2,
        policy=count_policy(),
        frames_per_batch=4,
        num_workers=1,
        num_splits=2,
        seed=0,
    )
    it = iter(collector)
    next(it)
    collector._servers[0].shutdown()  # noqa: SLF001 - the server stops under the workers' feet
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="server"):
        for _ in range(100_000):
            next(it)
    assert time.monotonic() - start < 10
    collector.shutdown()
    time.sleep(0.2)
    assert child_pids() <= before


def test_server_process_backend_updates_weights_and_reports_its_death():
    before = child_pids()
    policy = count_policy(-1.0)
    collector = AsyncBatchedCollector(
        [functools.partial(counting_env, max_steps=1000)] * 4,
        policy=policy,
        frames_per_batch=8,
        num_workers=1,
        num_splits=2,
        policy_backend="multiprocessing",
        max_policy_lag=0,
        seed=0,
    )
    it = iter(collector)
    assert (next(it)["action"] == 0).all()
    with torch.no_grad():
        policy.module.lin.bias.fill_(1.0)
    collector.update_policy_weights_()
    assert collector.policy_version == 1
    deadline = time.monotonic() + 10
    batch = next(it)
    while not batch.numel() and time.monotonic() < deadline:
        batch = next(it)
    assert (batch["action"] == 1).all() and (batch["policy_version"] == 1).all()
    server_pid = collector._servers[0].pid  # noqa: SLF001 - the test kills it
    os.kill(server_pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="server"):
        for _ in range(100_000):
            next(it)
    assert time.monotonic() - start < 10
    collector.shutdown()
    time.sleep(0.2)
    assert child_pids() <= before


@pytest.mark.parametrize(
    ("scheme", "backend"),
    [
        ("SharedMemWeightSyncScheme", "threading"),
        ("SharedMemWeightSyncScheme", "multiprocessing"),
    ],
)
def test_weights_travel_through_a_weight_sync_scheme(scheme, backend):
    from torchrl import weight_update

    policy = count_policy(-1.0)
    collector = AsyncBatchedCollector(
        [functools.partial(counting_env, max_steps=1000)] * 2,
        policy=policy,
        frames_per_batch=4,
        num_workers=1,
        num_splits=2,
        policy_backend=backend,
        weight_sync_schemes={"policy": getattr(weight_update, scheme)()},
        seed=0,
    )
    try:
        it = iter(collector)
        assert (next(it)["action"] == 0).all()
        with torch.no_grad():
            policy.module.lin.bias.fill_(1.0)
        collector.update_policy_weights_()
        # the server takes the weights between two batches: wait for new-version data
        deadline = time.monotonic() + 10
        batch = next(it)
        while not (batch["policy_version"] == 1).all() and time.monotonic() < deadline:
            batch = next(it)
        assert (batch["policy_version"] == 1).all() and (batch["action"] == 1).all()
        while collector.policy_version != 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # a server process mirrors its version every 50 ms
        assert collector.policy_version == 1
    finally:
        collector.shutdown()


def test_weight_sync_scheme_names_are_checked():
    from torchrl.weight_update import SharedMemWeightSyncScheme

    with pytest.raises(KeyError, match="policy_0"):
        AsyncBatchedCollector(
            [PendulumEnv] * 4,
            policy=[linear_policy(), linear_policy()],
            weight_sync_schemes={"policy": SharedMemWeightSyncScheme()},
            frames_per_batch=8,
            num_workers=1,
            num_splits=2,
        )


def _learner(conn, backend: str) -> None:
    """A learner process: builds a collector, reports its processes' pids, then idles."""
    collector = AsyncBatchedCollector(
        [functools.partial(counting_env, max_steps=1000)] * 2,
        policy=count_policy(),
        frames_per_batch=4,
        num_workers=2,
        num_splits=1,
        policy_backend=backend,
        seed=0,
    )
    next(iter(collector))
    pids = [p.pid for p in collector._pool.procs]  # noqa: SLF001
    if backend == "multiprocessing":
        pids.append(collector._servers[0].pid)  # noqa: SLF001
    conn.send(pids)
    time.sleep(120)


@pytest.mark.parametrize("backend", ["threading", "multiprocessing"])
def test_dead_learner_leaves_no_process(backend):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    learner = ctx.Process(target=_learner, args=(sender, backend))
    learner.start()
    assert receiver.poll(60), "the learner did not report its processes"
    pids = receiver.recv()
    assert all(pid_alive(p) for p in pids)
    os.kill(learner.pid, signal.SIGKILL)
    learner.join()
    start = time.monotonic()
    while any(pid_alive(p) for p in pids) and time.monotonic() - start < 10:
        time.sleep(0.01)
    left = [p for p in pids if pid_alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still alive {time.monotonic() - start:.1f} s after the learner died"
    assert time.monotonic() - start < 3
