import pytest
import torch
from _rb_helpers import transitions
from tensordict import TensorDict

from torchrl.data.replay_buffers import (
    LazyTensorStorage,
    ListStorage,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictRoundRobinWriter,
)


def _writer(cls, storage):
    writer = cls()
    writer.register_storage(storage)
    return writer


class TestRoundRobinWriter:
    def test_wraps(self):
        writer = _writer(RoundRobinWriter, LazyTensorStorage(5))
        assert writer.extend(transitions(3)).tolist() == [0, 1, 2]
        assert writer.extend(transitions(4, start=3)).tolist() == [3, 4, 0, 1]
        assert writer.storage.get(torch.arange(5))["step"].tolist() == [5, 6, 2, 3, 4]
        assert writer._write_count == 7 and writer._cursor == 2

    def test_more_items_than_slots_keeps_the_last(self):
        writer = _writer(RoundRobinWriter, LazyTensorStorage(4))
        writer.extend(transitions(1))
        index = writer.extend(transitions(10, start=1))
        assert sorted(index.tolist()) == [0, 1, 2, 3]
        stored = writer.storage.get(torch.arange(4))["step"].tolist()
        assert sorted(stored) == [7, 8, 9, 10]
        # The cursor is where it would be after writing all 11 items one by one.
        assert writer._cursor == 11 % 4 and stored[(writer._cursor - 1) % 4] == 10

    def test_add(self):
        writer = _writer(RoundRobinWriter, ListStorage(2))
        assert [writer.add(x) for x in "abc"] == [0, 1, 0]
        assert writer.storage.get(torch.arange(2)) == ["c", "b"]

    def test_failed_write_keeps_cursor(self):
        writer = _writer(RoundRobinWriter, LazyTensorStorage(5))
        writer.extend(transitions(2))
        with pytest.raises(KeyError):
            writer.extend(transitions(2).exclude("action"))
        assert writer._cursor == 2 and writer._write_count == 2

    def test_ndim2(self):
        writer = _writer(RoundRobinWriter, LazyTensorStorage(8, ndim=2))
        rows, cols = writer.extend(transitions(6).reshape(2, 3))
        assert rows.tolist() == [[0, 0, 0], [1, 1, 1]] and cols.tolist() == [[0, 1, 2]] * 2
        rows, cols = writer.extend(transitions(4).reshape(2, 2))
        assert cols.tolist() == [[3, 0]] * 2
        rows, cols = writer.add(transitions(2))  # one time step of both rows
        assert cols.reshape(-1).tolist() == [1, 1]

    def test_state_dict(self):
        writer = _writer(RoundRobinWriter, LazyTensorStorage(5))
        writer.extend(transitions(3))
        other = _writer(RoundRobinWriter, LazyTensorStorage(5))
        other.load_state_dict(writer.state_dict())
        assert other._cursor == 3 and other._write_count == 3


class TestTensorDictRoundRobinWriter:
    def test_writes_index_into_input(self):
        writer = _writer(TensorDictRoundRobinWriter, LazyTensorStorage(4))
        data = transitions(6)
        writer.extend(data)
        # As if written one by one: items 4 and 5 overwrote items 0 and 1.
        assert data["index"].tolist() == [-1, -1, 2, 3, 0, 1]
        # The index itself is never stored, and re-extending a batch holding one works.
        assert "index" not in writer.storage._layout
        again = data[2:4]
        writer.extend(again)
        assert again["index"].tolist() == [2, 3]

    def test_ndim2_index(self):
        writer = _writer(TensorDictRoundRobinWriter, LazyTensorStorage(8, ndim=2))
        data = transitions(6).reshape(2, 3)
        writer.extend(data)
        assert data["index"].shape == torch.Size([2, 3, 2])
        assert data["index"][1, 2].tolist() == [1, 2]
        item = transitions(2)
        writer.add(item)
        assert item["index"].tolist() == [[0, 3], [1, 3]]

    def test_rejects_non_tensordict(self):
        writer = _writer(TensorDictRoundRobinWriter, LazyTensorStorage(4))
        with pytest.raises(TypeError, match="writes TensorDicts"):
            writer.extend(torch.zeros(3))


class TestTensorDictMaxValueWriter:
    @staticmethod
    def _data(values):
        return TensorDict({"r": torch.tensor(values, dtype=torch.float32)}, [len(values)])

    def test_keeps_the_best(self):
        writer = TensorDictMaxValueWriter(rank_key="r")
        writer.register_storage(LazyTensorStorage(3))
        writer.extend(self._data([1.0, 5.0]))
        data = self._data([3.0, 0.5, 7.0, 2.0])
        index = writer.extend(data)
        stored = writer.storage.get(torch.arange(3))["r"].tolist()
        assert sorted(stored) == [3.0, 5.0, 7.0]
        assert data["index"][[1, 3]].tolist() == [-1, -1] and index.numel() == 2
        # Ties go to what is already stored.
        writer.extend(self._data([3.0]))
        assert sorted(writer.storage.get(torch.arange(3))["r"].tolist()) == [3.0, 5.0, 7.0]

    def test_matches_sequential_heap(self):
        torch.manual_seed(0)
        writer = TensorDictMaxValueWriter(rank_key="r")
        writer.register_storage(LazyTensorStorage(10))
        everything = []
        for _ in range(8):
            values = torch.randn(7).tolist()
            everything += values
            writer.extend(self._data(values))
        stored = sorted(writer.storage.get(torch.arange(10))["r"].tolist())
        assert stored == pytest.approx(sorted(everything)[-10:])

    def test_reduction_and_default_key(self):
        writer = TensorDictMaxValueWriter(reduction="max")
        writer.register_storage(LazyTensorStorage(1))
        data = TensorDict({("next", "reward"): torch.tensor([[1.0, 9.0], [5.0, 5.0]])}, [2])
        writer.extend(data)
        assert writer.storage.get(torch.arange(1))["next", "reward"].tolist() == [[1.0, 9.0]]
        assert writer.add(TensorDict({("next", "reward"): torch.tensor([0.0, 0.0])}, [])) is None

    def test_errors(self):
        writer = TensorDictMaxValueWriter(rank_key="r")
        writer.register_storage(LazyTensorStorage(3))
        with pytest.raises(KeyError, match="no rank entry 'r'"):
            writer.extend(TensorDict({"x": torch.zeros(2)}, [2]))
        with pytest.raises(ValueError, match="contains NaN"):
            writer.extend(self._data([float("nan")]))
        with pytest.raises(ValueError, match="ndim=1"):
            TensorDictMaxValueWriter().register_storage(LazyTensorStorage(4, ndim=2))
        assert len(writer.storage) == 0

    def test_resume_from_storage(self):
        storage = LazyTensorStorage(3)
        first = TensorDictMaxValueWriter(rank_key="r")
        first.register_storage(storage)
        first.extend(self._data([4.0, 6.0, 8.0]))
        second = TensorDictMaxValueWriter(rank_key="r")
        second.register_storage(storage)
        second._resume()
        second.extend(self._data([5.0]))
        assert sorted(storage.get(torch.arange(3))["r"].tolist()) == [5.0, 6.0, 8.0]
