"""Replay buffers under hostile or careless input: crafted dumps, foreign states, values that do
not fit the stored dtype, priority updates of unwritten slots. Each refused operation must leave
the buffer exactly as it was."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from _rb_helpers import transitions
from tensordict import TensorDict

from torchrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SliceSamplerWithoutReplacement,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)


class Payload:
    """Unpickling this object creates ``marker`` (as an attacker's code would run)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if hasattr(a, "batch_size") and hasattr(a, "keys"):  # TensorDicts
        return a.batch_size == b.batch_size and bool((a == b).all())
    return a == b


def _snapshot(rb: ReplayBuffer):
    state = rb.state_dict()
    # state_dict shares the storage tensors: clone what the buffer could still change.
    storage = state["storage"]
    if storage.get("storage") is not None:
        storage = dict(storage, storage=storage["storage"].clone())
    return dict(state, storage=storage), len(rb), rb.write_count


def _assert_unchanged(rb: ReplayBuffer, before) -> None:
    state, n, count = before
    after = _snapshot(rb)
    assert after[1] == n and after[2] == count
    assert _equal(after[0], state)


def _filled_prb(n: int = 8, size: int = 16, scratch=None) -> TensorDictPrioritizedReplayBuffer:
    storage = LazyMemmapStorage(size, scratch_dir=scratch) if scratch else LazyTensorStorage(size)
    rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=storage, batch_size=4)
    rb.extend(transitions(n))
    return rb


# -- crafted dumps -------------------------------------------------------------------------------


@pytest.mark.parametrize("part", ["sampler.pt", "writer.pt"])
def test_crafted_state_file_in_dump_is_refused(tmp_path, part):
    rb = _filled_prb()
    rb.dumps(tmp_path / "dump")
    marker = tmp_path / "pwned"
    torch.save({"cursor": Payload(marker)}, tmp_path / "dump" / part)
    other = _filled_prb(3)
    before = _snapshot(other)
    with pytest.raises(pickle.UnpicklingError, match=rf"{part}.*trusted=True"):
        other.loads(tmp_path / "dump")
    assert not marker.exists()
    _assert_unchanged(other, before)
    # The sampler's own loader is safe too.
    if part == "sampler.pt":
        with pytest.raises(pickle.UnpicklingError):
            other.sampler.loads(tmp_path / "dump")
        assert not marker.exists()
    # With the explicit opt-in the file is unpickled (and its code runs), with a warning.
    with pytest.warns(UserWarning, match="trusted=True"), pytest.raises((ValueError, TypeError)):
        other.loads(tmp_path / "dump", trusted=True)
    assert marker.exists()
    _assert_unchanged(other, before)


def test_crafted_list_storage_items_are_refused(tmp_path):
    rb = ReplayBuffer(storage=ListStorage(10))
    marker = tmp_path / "pwned"
    rb.extend(["a", Payload(marker), {"b": torch.ones(2)}])
    rb.dumps(tmp_path / "dump")
    assert not marker.exists()
    other = ReplayBuffer(storage=ListStorage(10))
    other.extend(["kept"])
    with pytest.raises(pickle.UnpicklingError, match=r"items.pt .*global io.open.*trusted=True"):
        other.loads(tmp_path / "dump")
    assert not marker.exists() and len(other) == 1 and other[0] == "kept"
    with pytest.warns(UserWarning, match="only load files you wrote"):
        other.loads(tmp_path / "dump", trusted=True)
    assert marker.exists() and len(other) == 3 and other[0] == "a"


def test_list_storage_of_tensordicts_loads_safely(tmp_path):
    rb = TensorDictReplayBuffer(storage=ListStorage(10), batch_size=2)
    rb.extend(transitions(4))
    rb.add(transitions(1, start=4)[0])
    rb.dumps(tmp_path / "dump")
    other = TensorDictReplayBuffer(storage=ListStorage(10), batch_size=2)
    other.loads(tmp_path / "dump")  # no trusted=True needed: tensors and plain containers
    assert [int(other[i]["step"]) for i in range(5)] == [0, 1, 2, 3, 4]
    assert other[2]["next", "observation"].tolist() == [3.0, 3.0, 3.0]


@pytest.mark.parametrize("how", ["type", "pickle"])
def test_crafted_memmap_metadata_is_refused(tmp_path, how):
    rb = _filled_prb()
    rb.dumps(tmp_path / "dump")
    data = tmp_path / "dump" / "storage" / "data"
    marker = tmp_path / "pwned"
    if how == "type":
        # tensordict imports the class a meta.json names.
        meta = json.loads((data / "meta.json").read_text())
        meta["_type"] = "<class 'antigravity.Thing'>"
        (data / "meta.json").write_text(json.dumps(meta))
    else:
        with open(data / "other.pickle", "wb") as f:
            pickle.dump(Payload(marker), f)
    for loader in (
        lambda: _filled_prb(3).loads(tmp_path / "dump"),
        lambda: LazyMemmapStorage(16, scratch_dir=tmp_path / "s").loads(tmp_path / "dump/storage"),
        lambda: LazyMemmapStorage.open(tmp_path / "dump" / "storage"),
        lambda: LazyTensorStorage(16).loads(tmp_path / "dump" / "storage"),
    ):
        with pytest.raises(ValueError, match="trusted=True"):
            loader()
    assert not marker.exists()


def test_memmap_buffer_refused_load_keeps_its_files(tmp_path):
    rb = _filled_prb(6, scratch=tmp_path / "live")
    rb.dumps(tmp_path / "dump")
    torch.save({"x": Payload(tmp_path / "pwned")}, tmp_path / "dump" / "writer.pt")
    other = _filled_prb(3, scratch=tmp_path / "other")
    before = _snapshot(other)
    with pytest.raises(pickle.UnpicklingError):
        other.loads(tmp_path / "dump")
    _assert_unchanged(other, before)
    assert other.storage.scratch_dir == tmp_path / "other"
    other.extend(transitions(2, start=100))
    assert other[:]["step"].tolist() == [0, 1, 2, 100, 101]


# -- states of another size or another buffer ----------------------------------------------------


def test_lazy_storage_refuses_smaller_state_and_stays_lazy():
    small = LazyTensorStorage(10)
    small.set(torch.arange(10), transitions(10))
    big = LazyTensorStorage(20)
    with pytest.raises(ValueError, match=r"batch shape \(10,\) does not fit .* \(20,\)"):
        big.load_state_dict(small.state_dict())
    assert not big.initialized and len(big) == 0
    rb = ReplayBuffer(storage=big)
    rb.extend(transitions(15))  # allocates 20 slots, as if the load never happened
    assert len(rb) == 15 and rb.storage.get(torch.tensor([14]))["step"].tolist() == [14]


def test_list_storage_refuses_state_of_other_size():
    small = ReplayBuffer(storage=ListStorage(10))
    small.extend(list(range(12)))  # full, write position 2
    big = ReplayBuffer(storage=ListStorage(20))
    big.extend(["x", "y"])
    before = _snapshot(big)
    with pytest.raises(ValueError, match="max_size=10 .* max_size=20"):
        big.storage.load_state_dict(small.storage.state_dict())
    with pytest.raises(ValueError, match="max_size=10"):
        big.load_state_dict(small.state_dict())
    _assert_unchanged(big, before)
    # A state from a storage of the same size loads and the buffer continues after it.
    same = ReplayBuffer(storage=ListStorage(20))
    same.load_state_dict(big.state_dict())
    same.extend(["z"])
    assert [same[i] for i in range(3)] == ["x", "y", "z"]


def test_list_storage_legacy_state_with_foreign_cursor(tmp_path):
    storage = ListStorage(20)
    with pytest.raises(ValueError, match="write position 25"):
        storage.load_state_dict({"items": list(range(10)), "cursor": 25})
    assert len(storage) == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: ReplayBuffer(storage=LazyTensorStorage(16)),
        lambda: ReplayBuffer(storage=LazyTensorStorage(16), sampler=SamplerWithoutReplacement()),
        lambda: TensorDictPrioritizedReplayBuffer(
            alpha=0.7, beta=0.5, storage=LazyTensorStorage(16)
        ),
        lambda: TensorDictReplayBuffer(
            storage=LazyTensorStorage(16), writer=TensorDictMaxValueWriter(rank_key="step")
        ),
        lambda: TensorDictReplayBuffer(
            storage=LazyTensorStorage(16), sampler=SliceSamplerWithoutReplacement(slice_len=2)
        ),
        lambda: TensorDictReplayBuffer(
            storage=LazyTensorStorage(16),
            sampler=PrioritizedSliceSampler(16, alpha=0.5, beta=0.5, slice_len=2),
        ),
    ],
)
def test_buffer_refuses_mixed_states_and_changes_nothing(make):
    source = make()
    source.extend(transitions(5))
    target = make()
    target.extend(transitions(9, start=50))
    if isinstance(target.sampler, (SamplerWithoutReplacement, SliceSamplerWithoutReplacement)):
        target.sample(4)  # a sampler state with an epoch in progress
    before = _snapshot(target)
    # The storage of one buffer with the writer (and sampler) of another.
    mixed = dict(target.state_dict(), storage=source.state_dict()["storage"])
    with pytest.raises(ValueError, match="do not belong together"):
        target.load_state_dict(mixed)
    _assert_unchanged(target, before)
    # A sampler or writer state with out-of-range content is refused alone too.
    broken_writer = dict(target.state_dict()["writer"], cursor=99)
    with pytest.raises(ValueError, match="cursor 99"):
        target.load_state_dict(dict(target.state_dict(), writer=broken_writer))
    with pytest.raises(ValueError, match="cursor 99"):
        target.writer.load_state_dict(broken_writer)
    _assert_unchanged(target, before)
    # The buffer's own state loads into a fresh buffer and gives the same content.
    fresh = make()
    fresh.load_state_dict(target.state_dict())
    assert fresh[:]["step"].tolist() == target[:]["step"].tolist()
    fresh.extend(transitions(1, start=99))
    assert 99 in fresh[:]["step"].tolist()


def test_prioritized_state_checked_against_written_items():
    rb = _filled_prb(8)
    state = rb.sampler.state_dict()
    bigger = PrioritizedSampler(32, alpha=0.7, beta=0.5)
    with pytest.raises(ValueError, match="capacity 16, this sampler has 32"):
        bigger.load_state_dict(state)
    bad = dict(state, written=torch.zeros(16, dtype=torch.bool))
    with pytest.raises(ValueError, match="priority to slot 0, never written"):
        rb.sampler.load_state_dict(bad)
    nan = dict(state, sum_tree=dict(state["sum_tree"], values=torch.full((16,), float("nan"))))
    with pytest.raises(ValueError, match="finite"):
        rb.sampler.load_state_dict(nan)
    assert torch.equal(rb.sampler.state_dict()["sum_tree"]["values"], state["sum_tree"]["values"])


def test_memmap_loads_of_other_size_changes_nothing(tmp_path):
    rb = ReplayBuffer(storage=LazyMemmapStorage(10, scratch_dir=tmp_path / "a"))
    rb.extend(transitions(10))
    rb.dumps(tmp_path / "dump")
    other = ReplayBuffer(storage=LazyMemmapStorage(20, scratch_dir=tmp_path / "b"))
    other.extend(transitions(3, start=7))
    before = _snapshot(other)
    with pytest.raises(ValueError, match="max_size=10, not 20"):
        other.loads(tmp_path / "dump")
    _assert_unchanged(other, before)
    other.extend(transitions(1, start=40))
    assert other[:]["step"].tolist() == [7, 8, 9, 40]


# -- values that do not fit the stored dtype -----------------------------------------------------


def _typed_buffer() -> ReplayBuffer:
    rb = ReplayBuffer(storage=LazyTensorStorage(8))
    rb.extend(
        TensorDict(
            {
                "pixels": torch.zeros(2, 3, dtype=torch.uint8),
                "count": torch.zeros(2, dtype=torch.int32),
                "obs": torch.zeros(2, dtype=torch.float32),
                "half": torch.zeros(2, dtype=torch.float16),
            },
            [2],
        )
    )
    return rb


def _batch(**entries) -> TensorDict:
    base = {
        "pixels": torch.zeros(2, 3, dtype=torch.uint8),
        "count": torch.zeros(2, dtype=torch.int32),
        "obs": torch.zeros(2, dtype=torch.float32),
        "half": torch.zeros(2, dtype=torch.float16),
    }
    base.update(entries)
    return TensorDict(base, [2])


@pytest.mark.parametrize(
    "entries, match",
    [
        ({"pixels": torch.tensor([[1, 2, 300]] * 2)}, r"'pixels'.*300.*torch.int64.*torch.uint8"),
        ({"pixels": torch.tensor([[1, -1, 3]] * 2)}, r"'pixels'.*-1.*range \[0, 255\]"),
        ({"count": torch.tensor([2**40, 0])}, r"'count'.*1099511627776.*torch.int32"),
        ({"obs": torch.tensor([1e39, 0.0], dtype=torch.float64)}, r"'obs'.*1e\+39.*float32"),
        ({"half": torch.tensor([70000, 1])}, r"'half'.*70000.*float16"),
    ],
)
def test_value_overflowing_stored_dtype_is_refused(entries, match):
    rb = _typed_buffer()
    before = _snapshot(rb)
    with pytest.raises(ValueError, match=match):
        rb.extend(_batch(**entries))
    _assert_unchanged(rb, before)
    with pytest.raises(ValueError, match="nothing was written"):
        rb[0] = _batch(**entries)[0]
    _assert_unchanged(rb, before)


def test_values_that_fit_are_cast():
    rb = _typed_buffer()
    rb.extend(
        _batch(
            pixels=torch.tensor([[0, 255, 7]] * 2),
            count=torch.tensor([-(2**31), 2**31 - 1]),
            obs=torch.tensor([float("inf"), float("nan")], dtype=torch.float64),
            half=torch.tensor([65504, -3]),
        )
    )
    got = rb[2:4]
    assert got["pixels"][0].tolist() == [0, 255, 7] and got["count"].tolist() == [
        -(2**31),
        2**31 - 1,
    ]
    assert got["obs"][0] == float("inf") and torch.isnan(got["obs"][1])


def test_state_load_with_overflowing_values_is_refused():
    rb = _typed_buffer()
    state = rb.state_dict()
    data = state["storage"]["storage"].clone()
    data["pixels"] = data["pixels"].long()
    data["pixels"][0, 0] = 999
    fresh = _typed_buffer()
    before = _snapshot(fresh)
    with pytest.raises(ValueError, match="999"):
        fresh.load_state_dict(dict(state, storage=dict(state["storage"], storage=data)))
    _assert_unchanged(fresh, before)


# -- priorities of unwritten slots ---------------------------------------------------------------


def test_sampler_priority_update_beyond_written_items():
    rb = _filled_prb(8, size=16)
    before = _snapshot(rb)
    with pytest.raises(IndexError, match=r"index 12 names no written item: 8 item\(s\).*\[0, 8\)"):
        rb.sampler.update_priority([12], 1000.0)
    with pytest.raises(IndexError, match="index 8 names no written item"):
        rb.sampler.update_priority(torch.tensor([3, 8]), torch.tensor([1.0, 2.0]))
    _assert_unchanged(rb, before)
    rb.sampler.update_priority([7], 1000.0)  # written: accepted
    index = rb.sample(64, return_info=True)[1]["index"]
    assert (index < 8).all()
    # Once written, the slot takes priorities.
    rb.extend(transitions(5, start=8))
    rb.sampler.update_priority([12], 3.0)


def test_sampler_learns_written_items_from_a_reopened_storage(tmp_path):
    rb = _filled_prb(5, scratch=tmp_path / "s")
    del rb
    storage = LazyMemmapStorage.open(tmp_path / "s")
    sampler = PrioritizedSampler(16, alpha=1.0, beta=1.0)
    ReplayBuffer(storage=storage, sampler=sampler)
    sampler.update_priority([4], 2.0)
    with pytest.raises(IndexError, match="index 5"):
        sampler.update_priority([5], 2.0)
    sampler._empty()
    with pytest.raises(IndexError, match="index 0 names no written item: 0 item"):
        sampler.update_priority([0], 2.0)


def test_random_sampler_state_still_loads():
    rb = ReplayBuffer(storage=LazyTensorStorage(4), sampler=RandomSampler())
    rb.extend(torch.arange(3.0))
    other = ReplayBuffer(storage=LazyTensorStorage(4), sampler=RandomSampler())
    other.load_state_dict(rb.state_dict())
    assert other[:].tolist() == [0.0, 1.0, 2.0]


def test_memmap_state_load_leaves_no_torn_slots(tmp_path):
    source = ReplayBuffer(storage=LazyTensorStorage(4))
    source.extend(transitions(2))
    rb = ReplayBuffer(storage=LazyMemmapStorage(4, scratch_dir=tmp_path / "live"))
    rb.load_state_dict(source.state_dict())
    rb.dumps(tmp_path / "dump")
    reopened = LazyMemmapStorage.open(tmp_path / "dump" / "storage")
    assert reopened.torn_slots.numel() == 0 and len(reopened) == 2
