"""Stateful property test of the replay buffers against a pure-Python reference model.

Hypothesis drives random sequences of extend / add / sample / update_priority / state_dict +
load_state_dict / dumps + loads, refused loads of foreign states and refused writes of values
that overflow the stored dtype, on a ListStorage, a LazyTensorStorage or a LazyMemmapStorage with
a random, without-replacement or prioritized sampler. After every step the buffer must agree
with the model: a ring of ``capacity`` slots with a write cursor, a write count, and one priority
per written slot (new items get the largest priority set so far, 1 before any update).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from tensordict import TensorDict

from torchrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
)

BETA = 0.5


class ReplayBufferMachine(RuleBasedStateMachine):
    """A buffer and its model, stepped together."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="rb_stateful_"))
        self.next_id = 0
        self.dumps = 0

    def teardown(self) -> None:
        self.rb = None
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- construction ---------------------------------------------------------------------------
    @initialize(
        # The memory-mapped storage writes files: drawn less often than the in-memory ones.
        kind=st.sampled_from(["list", "lazy", "list", "lazy", "memmap"]),
        sampler=st.sampled_from(["random", "without", "prioritized"]),
        capacity=st.integers(1, 6),
    )
    def build(self, kind: str, sampler: str, capacity: int) -> None:
        self.kind, self.sampler_kind, self.capacity = kind, sampler, capacity
        # A seeded generator: hypothesis replays a failing sequence and must see the same draws.
        self.generator = torch.Generator().manual_seed(0)
        self.rb = self.make()
        # The model.
        self.slots: list[int | None] = [None] * capacity
        self.cursor = 0
        self.filled = 0
        self.write_count = 0
        self.priority = np.zeros(capacity)
        self.max_priority: float | None = None
        self.epoch_seen: set[int] = set()
        self.epoch_len = -1

    def make(self, capacity: int | None = None) -> ReplayBuffer:
        capacity = capacity or self.capacity
        if self.kind == "list":
            storage = ListStorage(capacity)
        elif self.kind == "lazy":
            storage = LazyTensorStorage(capacity)
        else:
            storage = LazyMemmapStorage(capacity)
        if self.sampler_kind == "random":
            sampler = RandomSampler()
        elif self.sampler_kind == "without":
            sampler = SamplerWithoutReplacement()
        else:
            sampler = PrioritizedSampler(capacity, alpha=1.0, beta=BETA, eps=0.0)
        return ReplayBuffer(storage=storage, sampler=sampler, generator=self.generator)

    def batch(self, n: int) -> TensorDict:
        ids = torch.arange(self.next_id, self.next_id + n)
        self.next_id += n
        return TensorDict(
            {"id": ids, "x": ids.float()[:, None] * 0.5, "u": (ids % 256).to(torch.uint8)}, [n]
        )

    # -- model ----------------------------------------------------------------------------------
    def model_write(self, ids: list[int]) -> list[int]:
        """Round-robin writes of ``ids``; returns the slot of each kept item."""
        n = len(ids)
        skip = max(n - self.capacity, 0)
        start = (self.cursor + skip) % self.capacity
        where = []
        for j, item in enumerate(ids[skip:]):
            slot = (start + j) % self.capacity
            self.slots[slot] = item
            where.append(slot)
        default = 1.0 if self.max_priority is None else self.max_priority
        self.priority[where] = default
        self.filled = min(self.capacity, self.filled + len(where))
        self.cursor = (self.cursor + n) % self.capacity
        self.write_count += n
        return where

    # -- rules ------------------------------------------------------------------------------------
    @rule(n=st.integers(0, 8))
    def extend(self, n: int) -> None:
        data = self.batch(n)
        index = self.rb.extend(data)
        where = self.model_write(data["id"].tolist())
        assert torch.as_tensor(index).tolist() == where

    @rule()
    def add(self) -> None:
        data = self.batch(1)[0]
        index = self.rb.add(data)
        assert [int(index)] == self.model_write([int(data["id"])])

    @rule(batch_size=st.integers(1, 5))
    def sample(self, batch_size: int) -> None:
        if self.filled == 0:
            with pytest.raises(RuntimeError, match="empty"):
                self.rb.sample(batch_size)
            return
        if self.sampler_kind == "prioritized" and not self.priority[: self.filled].any():
            with pytest.raises(RuntimeError, match="priority 0"):
                self.rb.sample(batch_size)
            return
        data, info = self.rb.sample(batch_size, return_info=True)
        index = torch.as_tensor(info["index"]).tolist()
        assert all(0 <= i < self.filled for i in index)
        assert data["id"].tolist() == [self.slots[i] for i in index]
        assert torch.equal(data["x"], data["id"].float()[:, None] * 0.5)
        if self.sampler_kind == "without":
            if self.epoch_len != self.filled or len(self.epoch_seen) >= self.filled:
                self.epoch_seen, self.epoch_len = set(), self.filled
            expected = min(batch_size, self.filled - len(self.epoch_seen))
            assert len(index) == expected and len(set(index)) == expected
            assert not self.epoch_seen & set(index)
            self.epoch_seen |= set(index)
        else:
            assert len(index) == batch_size
        if self.sampler_kind == "prioritized":
            p = self.priority[index]
            assert (p > 0).all()
            p_min = self.priority[: self.filled][self.priority[: self.filled] > 0].min()
            np.testing.assert_allclose(info["_weight"].numpy(), (p / p_min) ** -BETA, rtol=1e-4)

    @precondition(lambda self: self.sampler_kind == "prioritized")
    @rule(
        index=st.lists(st.integers(0, 7), min_size=1, max_size=4),
        priority=st.one_of(
            st.floats(0.0, 10.0, width=32),
            st.sampled_from([-1.0, float("nan"), float("inf")]),
        ),
        level=st.sampled_from(["buffer", "sampler"]),
    )
    def update_priority(self, index: list[int], priority: float, level: str) -> None:
        target = self.rb if level == "buffer" else self.rb.sampler
        if any(i >= self.filled for i in index):
            with pytest.raises(IndexError):
                target.update_priority(index, priority)
            return
        if not (np.isfinite(priority) and priority >= 0):
            with pytest.raises(ValueError, match="finite and non-negative"):
                target.update_priority(index, priority)
            return
        target.update_priority(index, priority)
        stored = float(np.float32(priority))
        self.priority[index] = stored
        if self.max_priority is None or stored > self.max_priority:
            self.max_priority = stored

    @rule()
    def state_round_trip(self) -> None:
        fresh = self.make()
        fresh.load_state_dict(self.rb.state_dict())
        self.rb = fresh

    @precondition(lambda self: self.dumps < 2)
    @rule()
    def dumps_loads(self) -> None:
        self.dumps += 1
        path = self.tmp / f"dump{self.dumps}"
        self.rb.dumps(path)
        fresh = self.make()
        fresh.loads(path)
        self.rb = fresh

    @rule(extra=st.integers(1, 3), n=st.integers(1, 8))
    def foreign_state_is_refused(self, extra: int, n: int) -> None:
        other = self.make(self.capacity + extra)
        other.extend(self.batch(n))
        with pytest.raises(ValueError):
            self.rb.load_state_dict(other.state_dict())

    @precondition(lambda self: self.kind != "list")
    @rule(n=st.integers(1, 4), bad=st.sampled_from([256, 300, -1, 2**40]))
    def overflowing_extend_is_refused(self, n: int, bad: int) -> None:
        data = self.batch(n)
        self.next_id -= n  # nothing is written: the ids are free again
        u = data["u"].long()
        u[-1] = bad
        data["u"] = u
        if self.filled == 0 and self.kind != "list" and not self.rb.storage.initialized:
            return  # the first write sets the stored dtype (int64 here): nothing overflows
        with pytest.raises(ValueError, match=f"'u'.*{bad}.*torch.uint8"):
            self.rb.extend(data)

    # -- invariants -------------------------------------------------------------------------------
    @invariant()
    def matches_model(self) -> None:
        if not hasattr(self, "rb") or self.rb is None:
            return
        rb = self.rb
        assert len(rb) == self.filled
        assert rb.write_count == self.write_count
        assert rb.writer.state_dict()["cursor"] == self.cursor
        if self.filled:
            stored = rb[:]
            assert stored["id"].tolist() == self.slots[: self.filled]
            assert stored["u"].tolist() == [i % 256 for i in self.slots[: self.filled]]
        if self.sampler_kind == "prioritized":
            values = rb.sampler.state_dict()["sum_tree"]["values"].double().numpy()
            np.testing.assert_allclose(values, self.priority, rtol=1e-6)


FAST = settings(
    max_examples=200,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# A warning (e.g. torn slots reported after a clean dump) is a failure.
@pytest.mark.filterwarnings("error::UserWarning")
def test_replay_buffer_matches_model():
    run_state_machine_as_test(ReplayBufferMachine, settings=FAST)


@pytest.mark.slow
@pytest.mark.filterwarnings("error::UserWarning")
def test_replay_buffer_matches_model_long():
    run_state_machine_as_test(
        ReplayBufferMachine,
        settings=settings(FAST, max_examples=5000, stateful_step_count=30),
    )
