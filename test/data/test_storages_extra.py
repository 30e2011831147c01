"""Compressed and lazy-stack storages, ensembles, the staleness sampler, the immutable writer and
the storage checkpointers."""

import importlib.util
import warnings
from pathlib import Path

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from torchrl.data import (
    CompressedListStorage,
    CompressedListStorageCheckpointer,
    FlatStorageCheckpointer,
    H5StorageCheckpointer,
    ImmutableDatasetWriter,
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    ListStorageCheckpointer,
    NestedStorageCheckpointer,
    RandomSampler,
    ReplayBuffer,
    ReplayBufferEnsemble,
    RoundRobinWriter,
    SamplerEnsemble,
    StalenessAwareSampler,
    StorageCheckpointerBase,
    StorageEnsemble,
    StorageEnsembleCheckpointer,
    TensorDictReplayBuffer,
    TensorStorage,
    TensorStorageCheckpointer,
    WriterEnsemble,
)

_has_h5py = importlib.util.find_spec("h5py") is not None

pytestmark = pytest.mark.filterwarnings("ignore:zstd is not available")


def _ted(n_steps: int, done_at: tuple[int, ...] = (), start: float = 0.0) -> TensorDict:
    """TED transitions whose ("next", "obs") is the next root "obs" except at episode ends."""
    obs = torch.arange(n_steps, dtype=torch.float32)[:, None].repeat(1, 3) + start
    next_obs = torch.cat([obs[1:], obs[-1:] + 1])
    done = torch.zeros(n_steps, 1, dtype=torch.bool)
    for t in done_at:
        done[t] = True
        next_obs[t] = -1.0  # a terminal observation that is no one's root observation
    return TensorDict(
        {
            "obs": obs,
            "action": torch.randn(n_steps, 2),
            ("next", "obs"): next_obs,
            ("next", "reward"): torch.randn(n_steps, 1),
            ("next", "done"): done,
            ("next", "terminated"): done.clone(),
        },
        batch_size=[n_steps],
    )


def _with(storage, checkpointer):
    storage.checkpointer = checkpointer
    return storage


def _assert_td_equal(a, b):
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        assert torch.equal(a.get(key), b.get(key)), key


# -- CompressedListStorage -------------------------------------------------------------------------


def test_compressed_storage_round_trips_and_compresses():
    storage = CompressedListStorage(10)
    assert storage.codec_name in ("zstd", "zlib")
    data = TensorDict(
        {
            "pixels": torch.zeros(4, 3, 32, 32, dtype=torch.uint8),
            "flag": torch.tensor([True, False, True, False]),
            "h": torch.randn(4, 5).to(torch.bfloat16),
            ("next", "r"): torch.randn(4, 1),
        },
        batch_size=[4],
    )
    storage.set(torch.arange(4), data)
    assert len(storage) == 4
    assert storage.compressed_nbytes() < data["pixels"].numel() // 10
    out = storage.get(torch.tensor([2, 0]))
    assert isinstance(out, list) and len(out) == 2
    _assert_td_equal(out[0], data[2])
    _assert_td_equal(storage.get(1), data[1])


def test_compressed_storage_in_a_buffer_and_single_items():
    rb = ReplayBuffer(storage=CompressedListStorage(5), batch_size=3)
    rb.extend(torch.arange(8.0)[:, None].repeat(1, 4))
    assert len(rb) == 5
    sample = rb.sample()
    assert sample.shape == (3, 4)
    rb.add(torch.full((4,), 7.0))
    assert rb[rb.writer._cursor - 1].tolist() == [7.0] * 4


def test_compressed_storage_custom_functions_and_errors():
    calls = []

    def compress(t):
        calls.append("c")
        return t.contiguous().view(-1).view(torch.uint8).clone()

    def decompress(b):
        calls.append("d")
        return b  # raw bytes: the storage restores dtype and shape

    storage = CompressedListStorage(4, compression_fn=compress, decompression_fn=decompress)
    assert storage.codec_name == "custom"
    x = torch.randn(2, 3)
    storage.set(torch.arange(2), x)
    assert torch.equal(storage.get(1), x[1]) and "c" in calls and "d" in calls
    with pytest.raises(ValueError, match="both compression_fn and decompression_fn"):
        CompressedListStorage(4, compression_fn=compress)
    with pytest.raises(TypeError, match="tensors and TensorDicts"):
        CompressedListStorage(4).set(0, "text")
    bad = CompressedListStorage(4, compression_fn=lambda t: t, decompression_fn=lambda b: b)
    with pytest.raises(TypeError, match="uint8 tensor of compressed bytes"):
        bad.set(0, torch.zeros(2))


def test_compressed_checkpointer_round_trip_without_pickle(tmp_path):
    storage = CompressedListStorage(6)
    assert isinstance(storage.checkpointer, CompressedListStorageCheckpointer)
    data = TensorDict({"a": torch.arange(12.0).reshape(4, 3), "b": torch.arange(4)}, [4])
    rb = ReplayBuffer(storage=storage)
    rb.extend(data)
    rb.dumps(tmp_path / "rb")
    files = {p.name for p in (tmp_path / "rb" / "storage").iterdir()}
    assert files == {"data.bin", "metadata.json"}
    other = ReplayBuffer(storage=CompressedListStorage(6))
    other.loads(tmp_path / "rb")
    assert len(other) == 4
    _assert_td_equal(other[torch.arange(4)], data)
    # A storage with another codec cannot read the bytes: refused before anything changes.
    custom = CompressedListStorage(6, compression_fn=lambda t: t, decompression_fn=lambda b: b)
    with pytest.raises(ValueError, match="compressed with"):
        custom.loads(tmp_path / "rb" / "storage")
    assert len(custom) == 0


# -- LazyStackStorage ------------------------------------------------------------------------------


def test_lazy_stack_storage_heterogeneous_items():
    rb = ReplayBuffer(storage=LazyStackStorage(10), batch_size=4)
    episodes = [TensorDict(obs=torch.randn(n, 2), batch_size=[n]) for n in (3, 5, 4)]
    for ep in episodes:
        rb.add(ep)
    sample = rb.storage.get(torch.tensor([0, 1]))
    assert isinstance(sample, LazyStackedTensorDict)
    assert sample[0]["obs"].shape == (3, 2) and sample[1]["obs"].shape == (5, 2)
    out = rb.sample()
    assert isinstance(out, LazyStackedTensorDict) and out.batch_size[0] == 4


def test_lazy_stack_storage_stack_dim_and_tensors():
    storage = LazyStackStorage(4, stack_dim=1)
    storage.set(torch.arange(2), [TensorDict(x=torch.zeros(3), batch_size=[3])] * 2)
    assert storage.get(torch.tensor([0, 1])).batch_size == (3, 2)
    tensors = LazyStackStorage(4)
    tensors.set(torch.arange(2), [torch.zeros(2), torch.zeros(3)])
    with pytest.raises(RuntimeError, match="equal shapes"):
        tensors.get(torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="stack_dim"):
        LazyStackStorage(4, stack_dim="0")


# -- ensembles -------------------------------------------------------------------------------------


def test_storage_ensemble_reads_and_refuses_writes():
    ensemble = StorageEnsemble(ListStorage(4), ListStorage(4), transforms=[None, str.upper])
    ensemble[0].set(0, "a")
    ensemble[1].set(0, "b")
    assert len(ensemble) == 2 and ensemble.max_size == 8
    assert ensemble.get((1, 0)) == (1, "B")
    assert ensemble.get([(0, 0), (1, 0)]) == [(0, "a"), (1, "B")]
    with pytest.raises(RuntimeError, match="cannot be written"):
        ensemble.set(0, "c")
    with pytest.raises(IndexError, match="buffer id 2"):
        ensemble.get((2, 0))
    with pytest.raises(ValueError, match="one per storage"):
        StorageEnsemble(ListStorage(4), transforms=[None, None])
    with pytest.raises(TypeError, match="not a Storage"):
        StorageEnsemble(ListStorage(4), "x")


def test_storage_ensemble_checkpointer(tmp_path):
    ensemble = StorageEnsemble(LazyTensorStorage(4), ListStorage(3))
    assert isinstance(ensemble.checkpointer, StorageEnsembleCheckpointer)
    ensemble[0].set(torch.arange(2), torch.arange(2.0))
    ensemble[1].set(0, torch.ones(1))
    ensemble.dumps(tmp_path / "e")
    other = StorageEnsemble(LazyTensorStorage(4), ListStorage(3))
    other.loads(tmp_path / "e")
    assert len(other[0]) == 2 and torch.equal(other[1].get(0), torch.ones(1))
    mismatch = StorageEnsemble(LazyTensorStorage(4))
    with pytest.raises(ValueError, match="does not match"):
        mismatch.loads(tmp_path / "e")
    # Member states are checked before any member changes: the second one does not fit.
    small = StorageEnsemble(LazyTensorStorage(4), ListStorage(1))
    small[1].set(0, torch.zeros(1))
    small[1].set(0, torch.zeros(1))
    before = len(small[0])
    with pytest.raises(ValueError):
        small.loads(tmp_path / "e")
    assert len(small[0]) == before


def test_sampler_ensemble_choices_and_errors():
    sampler = SamplerEnsemble(RandomSampler(), RandomSampler(), p=[0.0, 2.0], num_buffer_sampled=3)
    assert sampler.p.tolist() == [0.0, 1.0]
    assert sampler.choose(6) == [(1, 2)] * 3
    with pytest.raises(ValueError, match="split evenly"):
        sampler.choose(5)
    with pytest.raises(ValueError, match="cannot take p"):
        SamplerEnsemble(RandomSampler(), p=[1.0], sample_from_all=True)
    with pytest.raises(ValueError, match="2 weights for 1"):
        SamplerEnsemble(RandomSampler(), p=[1.0, 1.0])
    with pytest.raises(ValueError, match="finite weights"):
        SamplerEnsemble(RandomSampler(), RandomSampler(), p=[-1.0, 1.0])
    with pytest.raises(TypeError, match="StorageEnsemble"):
        sampler.sample(ListStorage(3), 3)


def test_writers_that_refuse():
    rb = ReplayBuffer(storage=TensorStorage(torch.arange(4.0)), writer=ImmutableDatasetWriter())
    assert len(rb) == 4 and rb.sample(2).shape == (2,)
    with pytest.raises(RuntimeError, match="immutable dataset"):
        rb.extend(torch.zeros(2))
    with pytest.raises(RuntimeError, match="immutable dataset"):
        rb.add(torch.zeros(()))
    ensemble = WriterEnsemble(RoundRobinWriter(), RoundRobinWriter())
    assert len(ensemble) == 2
    with pytest.raises(RuntimeError, match=r"rb_ensemble\[i\]\.extend"):
        ensemble.extend(torch.zeros(2))
    with pytest.raises(TypeError, match="not a Writer"):
        WriterEnsemble(object())


def _members():
    rb0 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb1 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb0.extend(TensorDict(x=torch.zeros(4), batch_size=[4]))
    rb1.extend(TensorDict(x=torch.ones(6), batch_size=[6]))
    return rb0, rb1


def test_replay_buffer_ensemble_sample_from_all():
    rb0, rb1 = _members()
    rbe = ReplayBufferEnsemble(rb0, rb1, batch_size=6, sample_from_all=True)
    assert len(rbe) == 10 and rbe[1] is rb1
    sample, info = rbe.sample(return_info=True)
    assert isinstance(sample, LazyStackedTensorDict) and sample.batch_size == (2, 3)
    assert sample["index", "buffer_ids"].tolist() == [[0] * 3, [1] * 3]
    assert sample["x"][0].eq(0).all() and sample["x"][1].eq(1).all()
    assert (sample["index", "index"][0] < 4).all()
    assert info["buffer_ids"].tolist() == [0, 1]
    # The index points at the sampled items in the member buffers.
    assert torch.equal(rb1[sample["index", "index"][1]]["x"], sample["x"][1])


def test_replay_buffer_ensemble_weights_and_writes():
    rb0, rb1 = _members()
    rbe = ReplayBufferEnsemble(rb0, rb1, p=[0.0, 1.0], num_buffer_sampled=2, batch_size=4)
    for _ in range(3):
        assert rbe.sample()["index", "buffer_ids"].eq(1).all()
    with pytest.raises(RuntimeError, match="extend one of its members"):
        rbe.extend(TensorDict(x=torch.zeros(2), batch_size=[2]))
    with pytest.raises(RuntimeError, match="update priorities on the member"):
        rbe.update_priority(torch.tensor([0]), 1.0)
    rbe[0].extend(TensorDict(x=torch.zeros(2), batch_size=[2]))
    assert len(rbe) == 12 and rbe.write_count == 12
    with pytest.raises(NotImplementedError, match="shared=True"):
        ReplayBufferEnsemble(rb0, shared=True)
    with pytest.raises(ValueError, match="not both"):
        ReplayBufferEnsemble(rb0, storages=StorageEnsemble(ListStorage(2)))


def test_replay_buffer_ensemble_from_components_and_plain_data():
    storages = StorageEnsemble(ListStorage(5), ListStorage(5))
    samplers = SamplerEnsemble(RandomSampler(), RandomSampler(), sample_from_all=True)
    rbe = ReplayBufferEnsemble(storages=storages, samplers=samplers, batch_size=4)
    rbe[0].extend(torch.zeros(3, 2))
    rbe[1].extend(torch.ones(3, 2))
    parts = rbe.sample()
    assert isinstance(parts, list) and len(parts) == 2
    assert parts[0].eq(0).all() and parts[1].eq(1).all() and parts[0].shape == (2, 2)
    collated = ReplayBufferEnsemble(
        storages=storages,
        samplers=SamplerEnsemble(RandomSampler(), RandomSampler(), sample_from_all=True),
        batch_size=4,
        collate_fn=torch.cat,
    )
    assert collated.sample().shape == (4, 2)
    with pytest.raises(ValueError, match="one of each per member"):
        ReplayBufferEnsemble(storages=storages, samplers=SamplerEnsemble(RandomSampler()))


def test_replay_buffer_ensemble_heterogeneous_keys_and_transform():
    rb0 = TensorDictReplayBuffer(storage=LazyTensorStorage(5))
    rb1 = TensorDictReplayBuffer(storage=LazyTensorStorage(5))
    rb0.extend(TensorDict(a=torch.zeros(3), batch_size=[3]))
    rb1.extend(TensorDict(b=torch.ones(3, 2), batch_size=[3]))
    rbe = ReplayBufferEnsemble(
        rb0,
        rb1,
        sample_from_all=True,
        batch_size=2,
        transform=lambda td: td.set("seen", torch.ones(td.batch_size)),
    )
    sample = rbe.sample()
    assert sample[0]["a"].shape == (1,) and sample[1]["b"].shape == (1, 2)
    assert sample.get("seen").eq(1).all()


def test_replay_buffer_ensemble_state_and_files(tmp_path):
    rb0, rb1 = _members()
    rbe = ReplayBufferEnsemble(rb0, rb1, sample_from_all=True, batch_size=2)
    state = rbe.state_dict()
    rbe.dumps(tmp_path / "rbe")
    fresh = ReplayBufferEnsemble(
        TensorDictReplayBuffer(storage=LazyTensorStorage(10)),
        TensorDictReplayBuffer(storage=LazyTensorStorage(10)),
        sample_from_all=True,
        batch_size=2,
    )
    fresh.load_state_dict(state)
    assert [len(rb) for rb in fresh.rbs] == [4, 6]
    files = ReplayBufferEnsemble(
        TensorDictReplayBuffer(storage=LazyTensorStorage(10)),
        TensorDictReplayBuffer(storage=LazyTensorStorage(10)),
        sample_from_all=True,
        batch_size=2,
    )
    files.loads(tmp_path / "rbe")
    assert [len(rb) for rb in files.rbs] == [4, 6]
    assert files.sample()["x"][1].eq(1).all()
    # A member that cannot take its state: nothing changes, not even the first member.
    small = ReplayBufferEnsemble(
        TensorDictReplayBuffer(storage=LazyTensorStorage(10)),
        TensorDictReplayBuffer(storage=LazyTensorStorage(3)),
        sample_from_all=True,
    )
    with pytest.raises(ValueError):
        small.load_state_dict(state)
    with pytest.raises(ValueError):
        small.loads(tmp_path / "rbe")
    assert [len(rb) for rb in small.rbs] == [0, 0]


# -- StalenessAwareSampler -----------------------------------------------------------------------


def test_staleness_sampler_gates_and_weights():
    sampler = StalenessAwareSampler(max_staleness=2)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), sampler=sampler)
    rb.extend(TensorDict(policy_version=torch.tensor([0, 1, 2, 3, 4]), batch_size=[5]))
    sampler.consumer_version = 4
    assert sampler.staleness(rb.storage).tolist() == [4, 3, 2, 1, 0]
    torch.manual_seed(0)
    versions = rb.sample(3000)["policy_version"]
    assert set(versions.tolist()) == {2, 3, 4}
    counts = torch.bincount(versions, minlength=5).double()
    # Weights 1/3, 1/2, 1 for staleness 2, 1, 0.
    assert counts[4] / counts[2] == pytest.approx(3.0, rel=0.2)
    sampler.consumer_version = 10
    with pytest.raises(RuntimeError, match="max_staleness=2"):
        rb.sample(2)
    assert sampler.state_dict() == {"consumer_version": 10}
    other = StalenessAwareSampler()
    other.load_state_dict({"consumer_version": 3})
    assert other.consumer_version == 3
    with pytest.raises(ValueError, match="consumer_version"):
        other.load_state_dict({"consumer_version": "x"})


def test_staleness_sampler_custom_weights_ndim2_and_errors():
    sampler = StalenessAwareSampler(
        staleness_weight_fn=lambda s: (s == 0).double(), version_key="v"
    )
    storage = LazyTensorStorage(12, ndim=2)
    rb = TensorDictReplayBuffer(storage=storage, sampler=sampler)
    v = torch.tensor([[0, 1, 2], [2, 1, 0]])
    rb.extend(TensorDict(v=v, row=torch.tensor([[0] * 3, [1] * 3]), batch_size=[2, 3]))
    sampler.consumer_version = 2
    sample = rb.sample(20)
    assert sample["v"].eq(2).all() and set(sample["row"].tolist()) == {0, 1}
    bad = StalenessAwareSampler(staleness_weight_fn=lambda s: -torch.ones(len(s)), version_key="v")
    with pytest.raises(ValueError, match="finite weights >= 0"):
        bad.sample(storage, 2)
    with pytest.raises(ValueError, match="max_staleness"):
        StalenessAwareSampler(max_staleness=-3)
    missing = StalenessAwareSampler(version_key="nope")
    with pytest.raises(KeyError, match="nope"):
        missing.sample(storage, 2)


# -- checkpointers ---------------------------------------------------------------------------------


def test_default_checkpointers_and_validation():
    assert isinstance(ListStorage(2).checkpointer, ListStorageCheckpointer)
    assert isinstance(LazyTensorStorage(2).checkpointer, TensorStorageCheckpointer)
    assert isinstance(LazyMemmapStorage(2).checkpointer, TensorStorageCheckpointer)
    storage = ListStorage(2)
    with pytest.raises(TypeError, match="StorageCheckpointerBase"):
        storage.checkpointer = "json"
    storage.checkpointer = TensorStorageCheckpointer()
    with pytest.raises(TypeError, match="saves tensor storages, got a ListStorage"):
        storage.dumps("/tmp/never-written")


def test_tensor_checkpointer_hooks(tmp_path):
    storage = LazyTensorStorage(4)
    storage.set(torch.arange(2), TensorDict(x=torch.tensor([1.0, 2.0]), batch_size=[2]))
    seen = []
    checkpointer = TensorStorageCheckpointer()
    checkpointer.register_save_hook(lambda td, path: td.apply(lambda v: v * 10))
    checkpointer.register_load_hook(lambda td, path: seen.append(Path(path)) or td)
    storage.checkpointer = checkpointer
    storage.dumps(tmp_path / "s")
    other = LazyTensorStorage(4)
    other.checkpointer = checkpointer
    other.loads(tmp_path / "s")
    assert other.get(torch.arange(2))["x"].tolist() == [10.0, 20.0]
    assert seen == [tmp_path / "s"]
    assert storage.get(torch.arange(2))["x"].tolist() == [1.0, 2.0]  # the live data is untouched
    mm = LazyMemmapStorage(4)
    mm.checkpointer = checkpointer
    with pytest.raises(NotImplementedError, match="maps saved files in place"):
        mm.loads(tmp_path / "s")
    with pytest.raises(TypeError, match="callable"):
        checkpointer.register_save_hook(3)


def test_buffer_hooks_reach_the_storage_checkpointer(tmp_path):
    """``rb.register_save_hook``/``register_load_hook`` (TorchRL's spelling) go to the storage's
    checkpointer, so the hooks run on ``rb.dumps``/``rb.loads``."""
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    rb.extend(TensorDict(x=torch.tensor([1.0, 2.0]), batch_size=[2]))
    rb.register_save_hook(lambda td, path: td.apply(lambda v: v + 100))
    seen = []
    other = ReplayBuffer(storage=LazyTensorStorage(4))
    other.register_load_hook(lambda td, path: seen.append(path) or td)
    rb.dumps(tmp_path / "rb")
    other.loads(tmp_path / "rb")
    assert other[:2]["x"].tolist() == [101.0, 102.0] and len(seen) == 1
    with pytest.raises(TypeError, match="callable"):
        rb.register_load_hook(None)


def test_custom_checkpointer_with_loads_only(tmp_path):
    class JsonLen(StorageCheckpointerBase):
        def dumps(self, storage, path):
            Path(path).mkdir(parents=True, exist_ok=True)
            (Path(path) / "n.txt").write_text(str(len(storage)))

        def loads(self, storage, path, *, trusted=False):
            n = int((Path(path) / "n.txt").read_text())
            storage.set(torch.arange(n), [0] * n)

    rb = ReplayBuffer(storage=_with(ListStorage(5), JsonLen()))
    rb.extend([1, 2, 3])
    rb.dumps(tmp_path / "rb")
    other = ReplayBuffer(storage=_with(ListStorage(5), JsonLen()))
    other.loads(tmp_path / "rb")
    assert len(other) == 3 and other[0] == 0


@pytest.mark.parametrize("cls", [FlatStorageCheckpointer, NestedStorageCheckpointer])
def test_ted_checkpointers_round_trip_and_save_space(tmp_path, cls):
    data = torch.cat([_ted(6, done_at=(2, 5)), _ted(4, done_at=(3,), start=100.0)])
    storage = LazyTensorStorage(16)
    rb = TensorDictReplayBuffer(storage=storage)
    rb.extend(data)
    storage.checkpointer = cls()
    rb.dumps(tmp_path / "compact")
    plain = LazyTensorStorage(16)
    plain.set(torch.arange(10), data)
    plain.dumps(tmp_path / "plain")

    def size(p):
        return sum(f.stat().st_size for f in p.rglob("*.memmap"))

    assert size(tmp_path / "compact") < size(tmp_path / "plain")
    other = TensorDictReplayBuffer(storage=LazyTensorStorage(16))
    other.storage.checkpointer = cls()
    other.loads(tmp_path / "compact")
    assert len(other) == 10
    _assert_td_equal(other[torch.arange(10)].exclude("index"), data.exclude("index"))
    if cls is NestedStorageCheckpointer:
        import json

        episodes = json.loads((tmp_path / "compact" / "storage" / "episodes.json").read_text())
        assert episodes["row_start_stop"] == [[0, 0, 3], [0, 3, 6], [0, 6, 10]]


def test_flat_checkpointer_wrapped_ring_and_ndim2(tmp_path):
    storage = LazyTensorStorage(6)
    rb = TensorDictReplayBuffer(storage=storage)
    rb.extend(_ted(8))  # wraps: slots hold steps 6, 7, 2, 3, 4, 5
    storage.checkpointer = FlatStorageCheckpointer()
    storage.dumps(tmp_path / "ring")
    other = _with(LazyTensorStorage(6), FlatStorageCheckpointer())
    other.loads(tmp_path / "ring")
    _assert_td_equal(other.get(torch.arange(6)), storage.get(torch.arange(6)))
    assert other._cursor == storage._cursor

    two = _with(LazyTensorStorage(20, ndim=2), FlatStorageCheckpointer())
    batch = torch.stack([_ted(5, done_at=(1,)), _ted(5, start=50.0)])
    two.set(torch.arange(5), batch)
    two.dumps(tmp_path / "two")
    back = _with(LazyTensorStorage(20, ndim=2), FlatStorageCheckpointer())
    back.loads(tmp_path / "two")
    assert back.shape == (2, 5)
    rows, steps = torch.arange(2)[:, None].expand(2, 5), torch.arange(5).expand(2, 5)
    _assert_td_equal(back.get((rows, steps)), batch)


def test_flat_checkpointer_refuses_what_it_would_lose(tmp_path):
    data = _ted(4)
    data["next", "obs"][1] += 1  # no longer the next root observation, and no episode end
    storage = _with(LazyTensorStorage(4), FlatStorageCheckpointer())
    storage.set(torch.arange(4), data)
    with pytest.raises(ValueError, match="TensorStorageCheckpointer"):
        storage.dumps(tmp_path / "x")
    assert not (tmp_path / "x").exists()
    plain = _with(LazyTensorStorage(4), FlatStorageCheckpointer())
    plain.set(torch.arange(4), torch.zeros(4))
    with pytest.raises(TypeError, match="plain tensors"):
        plain.dumps(tmp_path / "y")
    flat = _with(LazyTensorStorage(4), FlatStorageCheckpointer())
    flat.set(torch.arange(2), _ted(2))
    flat.dumps(tmp_path / "z")
    with pytest.raises(ValueError, match="was not written by NestedStorageCheckpointer"):
        _with(LazyTensorStorage(4), NestedStorageCheckpointer()).loads(tmp_path / "z")


def test_ted_checkpointer_empty_storage(tmp_path):
    empty = _with(LazyTensorStorage(4), FlatStorageCheckpointer())
    empty.dumps(tmp_path / "e")
    other = _with(LazyTensorStorage(4), FlatStorageCheckpointer())
    other.loads(tmp_path / "e")
    assert len(other) == 0


@pytest.mark.skipif(_has_h5py, reason="checks the error raised when h5py is missing")
def test_h5_checkpointer_needs_h5py():
    with pytest.raises(ImportError, match=r'pip install "torchrl\[h5py\]"'):
        H5StorageCheckpointer()


@pytest.mark.skipif(not _has_h5py, reason="h5py is not installed")
def test_h5_checkpointer_round_trip(tmp_path):
    data = _ted(6, done_at=(2,))
    storage = _with(LazyTensorStorage(8), H5StorageCheckpointer())
    storage.set(torch.arange(6), data)
    storage.dumps(tmp_path / "h")
    assert (tmp_path / "h" / "checkpoint.h5").exists()
    storage.checkpointer = H5StorageCheckpointer(h5_kwargs={"compression": "gzip"})
    storage.dumps(tmp_path / "file.h5")
    for path in (tmp_path / "h", tmp_path / "file.h5"):
        other = _with(LazyTensorStorage(8), H5StorageCheckpointer())
        other.loads(path)
        _assert_td_equal(other.get(torch.arange(6)), data)


def test_ray_start_helper_has_one_definition():
    from torchrl._utils import start_local_ray
    from torchrl.collectors.distributed.utils import start_local_ray as from_collectors
    from torchrl.data.replay_buffers.ray_buffer import start_local_ray as from_data
    from torchrl.record.loggers import ray_logger
    from torchrl.services import ray_service
    from torchrl.trainers.pbt import backends

    for module in (
        from_collectors,
        from_data,
        ray_logger.start_local_ray,
        ray_service.start_local_ray,
        backends.start_local_ray,
    ):
        assert module is start_local_ray

    class FakeRay:
        def init(self, **config):
            self.config = config

    ray = FakeRay()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import os

        old = os.environ.get("RAY_AUTH_MODE")
        os.environ["RAY_AUTH_MODE"] = "disabled"
        try:
            start_local_ray(ray, {"num_cpus": 1}, "test")
        finally:
            if old is None:
                del os.environ["RAY_AUTH_MODE"]
            else:
                os.environ["RAY_AUTH_MODE"] = old
    assert ray.config == {"include_dashboard": False, "num_cpus": 1}
    assert any("RAY_AUTH_MODE=disabled" in str(w.message) for w in caught)


def test_checkpointer_without_loads_and_storage_without_checkpointer(tmp_path):
    class DumpOnly(StorageCheckpointerBase):
        def dumps(self, storage, path):
            Path(path).mkdir(parents=True, exist_ok=True)

    storage = ListStorage(2)
    storage.checkpointer = DumpOnly()
    storage.dumps(tmp_path / "d")
    with pytest.raises(NotImplementedError, match="neither loads nor prepare_load"):
        storage.loads(tmp_path / "d")
    storage.checkpointer = None
    with pytest.raises(NotImplementedError, match="has no checkpointer"):
        storage.dumps(tmp_path / "d")


def test_flat_checkpointer_loads_into_a_memmap_storage(tmp_path):
    data = _ted(5, done_at=(4,))
    source = _with(LazyTensorStorage(8), FlatStorageCheckpointer())
    source.set(torch.arange(5), data)
    source.dumps(tmp_path / "flat")
    target = _with(LazyMemmapStorage(8, scratch_dir=tmp_path / "mm"), FlatStorageCheckpointer())
    target.loads(tmp_path / "flat")
    _assert_td_equal(target.get(torch.arange(5)), data)
    assert (tmp_path / "mm" / "storage.json").exists()
