import warnings

import numpy as np
import pytest
import torch
from _rb_helpers import consistent, transitions
from tensordict import TensorDict

from torchrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    TensorStorage,
)


class TestListStorage:
    def test_any_object(self):
        storage = ListStorage(max_size=4)
        storage.set(torch.arange(3), ["a", 1, {"x": 2}])
        assert len(storage) == 3
        assert storage.get(torch.tensor([2, 0])) == [{"x": 2}, "a"]
        storage.set(3, "d")
        assert storage.get(3) == "d"

    def test_tensordict_items_are_unbound(self):
        storage = ListStorage(max_size=10)
        storage.set(torch.arange(4), transitions(4))
        item = storage.get(2)
        assert item.batch_size == torch.Size([]) and item["step"] == 2

    def test_bad_index_changes_nothing(self):
        storage = ListStorage(max_size=3)
        storage.set(torch.arange(2), ["a", "b"])
        with pytest.raises(IndexError, match="must fill every slot"):
            ListStorage(max_size=10).set(torch.tensor([0, 4]), ["c", "d"])
        with pytest.raises(IndexError, match="out of range"):
            storage.set(torch.tensor([3]), ["c"])
        with pytest.raises(ValueError, match="2 indices but 1 items"):
            storage.set(torch.tensor([0, 1]), ["c"])
        assert storage.get(torch.arange(2)) == ["a", "b"]

    def test_unbounded(self):
        storage = ListStorage()
        storage.set(torch.arange(5), list(range(5)))
        assert len(storage) == 5

    def test_state_dict(self):
        storage = ListStorage(max_size=3)
        storage.set(torch.arange(2), ["a", "b"])
        other = ListStorage(max_size=3)
        other.load_state_dict(storage.state_dict())
        assert other.get(torch.arange(2)) == ["a", "b"]

    def test_check_index(self):
        storage = ListStorage(max_size=3)
        storage.set(torch.arange(2), ["a", "b"])
        assert storage[-1] == "b"
        with pytest.raises(IndexError, match="out of range for 2 stored"):
            storage[2]


class TestLazyTensorStorage:
    def test_allocates_from_first_batch(self):
        storage = LazyTensorStorage(10)
        assert not storage.initialized and len(storage) == 0
        storage.set(torch.arange(4), transitions(4))
        assert storage.initialized and len(storage) == 4
        out = storage.get(torch.tensor([3, 1]))
        assert out.batch_size == torch.Size([2])
        assert out["next", "reward"].shape == torch.Size([2, 1])
        assert out["step"].tolist() == [3, 1]
        assert consistent(out)

    def test_memory_is_exact(self):
        from torchrl.data.replay_buffers.storages import storage_nbytes

        storage = LazyTensorStorage(100)
        data = transitions(1)
        storage.set(torch.arange(1), data)
        per_item = sum(v.element_size() * v[0].numel() for v in data.values(True, True))
        assert storage_nbytes(storage) == 100 * per_item

    def test_plain_tensor(self):
        storage = LazyTensorStorage(5)
        storage.set(slice(0, 3), torch.arange(6.0).view(3, 2))
        assert storage.get(torch.tensor([2])).tolist() == [[4.0, 5.0]]
        assert storage.get(1).tolist() == [2.0, 3.0]

    def test_nested_batch_dims_kept(self):
        data = TensorDict(
            {"agents": TensorDict({"obs": torch.ones(4, 3, 2)}, [4, 3]), "x": torch.ones(4)},
            [4],
        )
        storage = LazyTensorStorage(8)
        storage.set(torch.arange(4), data)
        out = storage.get(torch.tensor([0, 1]))
        assert out["agents"].batch_size == torch.Size([2, 3])

    def test_single_item_first(self):
        storage = LazyTensorStorage(5)
        storage.set(0, transitions(1)[0])
        assert storage.get(0)["observation"].shape == torch.Size([3])

    @pytest.mark.parametrize(
        "bad, error, match",
        [
            (lambda td: td.exclude("action"), KeyError, "missing 'action'; unexpected none"),
            (lambda td: td.set("extra", torch.zeros(3)), KeyError, "unexpected 'extra'"),
            (
                lambda td: td.set("observation", torch.zeros(3, 4)),
                ValueError,
                "'observation' has shape \\(3, 4\\)",
            ),
            (lambda td: td.set("step", torch.zeros(3)), TypeError, "cannot be stored"),
        ],
    )
    def test_bad_layout_changes_nothing(self, bad, error, match):
        storage = LazyTensorStorage(10)
        storage.set(torch.arange(3), transitions(3))
        before = storage.get(torch.arange(3)).clone()
        with pytest.raises(error, match=match):
            storage.set(torch.arange(3, 6), bad(transitions(3, start=100)))
        assert len(storage) == 3
        assert (storage.get(torch.arange(3)) == before).all()

    def test_dtype_cast(self):
        storage = LazyTensorStorage(4)
        storage.set(torch.arange(2), transitions(2))
        data = transitions(2, start=5)
        data["next", "reward"] = data["next", "reward"].double()
        storage.set(torch.arange(2), data)
        assert storage.get(torch.arange(2))["next", "reward"].dtype == torch.float32

    def test_slot_out_of_range(self):
        storage = LazyTensorStorage(4)
        with pytest.raises(IndexError, match=r"slot indices must be in \[0, 4\)"):
            storage.set(torch.tensor([3, 4]), transitions(2))

    def test_ndim2(self):
        storage = LazyTensorStorage(12, ndim=2)
        data = transitions(8).reshape(2, 4)
        storage.set(torch.arange(4), data)
        assert storage.shape == torch.Size([2, 4]) and storage.slots == 6 and len(storage) == 8
        out = storage.get((torch.tensor([1, 0]), torch.tensor([2, 3])))
        assert out["step"].tolist() == [6, 3]
        flat = storage._index_to_flat((torch.tensor([1]), torch.tensor([2])))
        assert flat.tolist() == [8]
        assert [t.tolist() for t in storage._flat_to_index(flat)] == [[1], [2]]
        dense = storage._dense_to_index(torch.arange(8))
        items = set(zip(dense[0].tolist(), dense[1].tolist()))
        assert items == {(e, t) for e in range(2) for t in range(4)}
        with pytest.raises(IndexError, match="along dim 1"):
            storage[(torch.tensor([0]), torch.tensor([4]))]
        with pytest.raises(ValueError, match="no time slot fits"):
            LazyTensorStorage(3, ndim=2).set(
                torch.arange(4), data.reshape(8, 1)[:, 0].reshape(4, 2)
            )

    def test_state_dict_roundtrip(self):
        storage = LazyTensorStorage(10)
        storage.set(torch.arange(4), transitions(4))
        other = LazyTensorStorage(10)
        other.load_state_dict(storage.state_dict())
        assert len(other) == 4
        assert (other.get(torch.arange(4)) == storage.get(torch.arange(4))).all()

    def test_empty_keeps_memory(self):
        storage = LazyTensorStorage(10)
        storage.set(torch.arange(4), transitions(4))
        storage._empty()
        assert len(storage) == 0 and storage.initialized


class TestTensorStorage:
    def test_wraps_existing(self):
        data = transitions(6)
        storage = TensorStorage(data)
        assert len(storage) == 6 and storage.max_size == 6
        assert storage.get(torch.tensor([5]))["step"].tolist() == [5]
        storage.set(torch.tensor([0]), transitions(1, start=50))
        assert data["step"][0] == 50  # no copy: the wrapped TensorDict is the storage

    def test_size_mismatch(self):
        with pytest.raises(ValueError, match="max_size=3 but the storage holds 6"):
            TensorStorage(transitions(6), max_size=3)


class TestLazyMemmapStorage:
    def test_files_and_reopen(self, tmp_path):
        storage = LazyMemmapStorage(10, scratch_dir=tmp_path)
        storage.set(torch.arange(4), transitions(4))
        assert (tmp_path / "storage.json").exists()
        reopened = LazyMemmapStorage.open(tmp_path)
        assert len(reopened) == 4
        out = reopened.get(torch.arange(4))
        assert out["step"].tolist() == [0, 1, 2, 3] and consistent(out)
        # Mapped, not copied: the reopened storage reads what the first one writes.
        storage.set(torch.tensor([1]), transitions(1, start=42))
        assert reopened.get(torch.tensor([1]))["step"].tolist() == [42]

    def test_existing_dir_refused(self, tmp_path):
        LazyMemmapStorage(10, scratch_dir=tmp_path).set(torch.arange(2), transitions(2))
        with pytest.raises(FileExistsError, match="LazyMemmapStorage.open"):
            LazyMemmapStorage(10, scratch_dir=tmp_path)
        storage = LazyMemmapStorage(10, scratch_dir=tmp_path, existsok=True)
        storage.set(torch.arange(3), transitions(3, start=7))
        assert LazyMemmapStorage.open(tmp_path).get(torch.tensor([0]))["step"].tolist() == [7]

    def test_temp_dir_removed(self):
        storage = LazyMemmapStorage(10)
        storage.set(torch.arange(2), transitions(2))
        path = storage.scratch_dir
        assert path.exists()
        del storage
        import gc

        gc.collect()
        assert not path.exists()

    def test_plain_tensor_and_ndim2(self, tmp_path):
        storage = LazyMemmapStorage(8, scratch_dir=tmp_path / "a", ndim=2)
        storage.set(torch.arange(3), torch.arange(6.0).view(2, 3))
        reopened = LazyMemmapStorage.open(tmp_path / "a")
        assert reopened.ndim == 2 and reopened.shape == torch.Size([2, 3])
        assert reopened.get((torch.tensor([1]), torch.tensor([2]))).tolist() == [5.0]

    def test_torn_slots_reported(self, tmp_path):
        storage = LazyMemmapStorage(4, scratch_dir=tmp_path)
        storage.set(torch.arange(4), transitions(4))
        # Simulate a kill in the middle of overwriting slots 1 and 2.
        storage._dirty[[1, 2]] = 1
        storage._dirty.flush()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reopened = LazyMemmapStorage.open(tmp_path)
        assert reopened.torn_slots.tolist() == [1, 2]
        assert reopened._cursor == 1
        assert any("mix of old and new" in str(w.message) for w in caught)
        reopened.set(torch.tensor([1, 2]), transitions(2, start=9))
        assert reopened.torn_slots.numel() == 0
        assert not np.asarray(reopened._dirty).any()

    def test_header_tracks_writes(self, tmp_path):
        storage = LazyMemmapStorage(4, scratch_dir=tmp_path)
        storage.set(torch.arange(3), transitions(3))
        header = np.fromfile(tmp_path / "header.bin", dtype=np.int64)
        assert header[1] == 3 and header[2] == 3

    def test_device_of_samples(self, tmp_path):
        storage = LazyMemmapStorage(4, scratch_dir=tmp_path, device="cpu")
        storage.set(torch.arange(2), transitions(2))
        assert storage.get(torch.arange(2)).device == torch.device("cpu")
