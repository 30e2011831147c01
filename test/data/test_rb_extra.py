"""Replay-buffer additions: ConsumingSampler, sample units, remote buffers, VideoClipRef."""

from __future__ import annotations

import functools
import importlib.util
import pickle
import socket
import sys
import types

import pytest
import torch
from tensordict import TensorDict

import torchrl.data as data_pkg
from torchrl.data import (
    ConsumingSampler,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    RayReplayBuffer,
    RemoteTensorDictReplayBuffer,
    ReplayBuffer,
    SampleUnit,
    Sequence,
    TensorDictReplayBuffer,
    Transition,
    VideoClipRef,
)
from torchrl.data.replay_buffers import video as video_mod


# ------------------------------------------------------------------------------ ConsumingSampler
def test_consuming_sampler_documented_example():
    rb = ReplayBuffer(storage=ListStorage(10), sampler=ConsumingSampler(), batch_size=3)
    assert rb.extend([torch.tensor(i) for i in range(4)]).tolist() == [0, 1, 2, 3]
    sample = rb.sample()
    assert len(sample) == 3 and len(rb) == 1


def test_consuming_sampler_each_item_once_then_clear_error():
    rb = ReplayBuffer(storage=LazyTensorStorage(20), sampler=ConsumingSampler(), batch_size=4)
    rb.extend(torch.arange(10))
    seen = []
    while len(rb):
        seen += rb.sample().tolist()
    assert sorted(seen) == list(range(10))  # every item once, the last batch smaller
    assert rb.sampler.ran_out
    with pytest.raises(RuntimeError, match="consumed"):
        rb.sample()
    empty = ReplayBuffer(storage=LazyTensorStorage(5), sampler=ConsumingSampler(), batch_size=2)
    with pytest.raises(RuntimeError, match="empty"):
        empty.sample()


def test_consuming_sampler_max_sample_count():
    sampler = ConsumingSampler(max_sample_count=2)
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler, batch_size=3)
    rb.extend(torch.arange(3))
    first, second = rb.sample(), rb.sample()  # a batch holds each item at most once
    assert sorted(first.tolist()) == sorted(second.tolist()) == [0, 1, 2]
    assert len(rb) == 0 and not sampler.can_sample(rb.storage, 1)


def test_consuming_sampler_writes_reuse_consumed_slots():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(6), sampler=ConsumingSampler(), batch_size=4
    )
    rb.extend(TensorDict(obs=torch.arange(6), batch_size=[6]))
    consumed = rb.sample()["index"]
    kept = sorted(set(range(6)) - set(consumed.tolist()))
    new = TensorDict(obs=torch.arange(100, 106), batch_size=[6])
    index = rb.extend(new)
    # Consumed slots first (oldest consumed first), then the writer's cursor, never
    # overwriting the items just written.
    assert index[:4].tolist() == consumed.tolist()
    assert sorted(index.tolist()) == list(range(6)) and index[4:].tolist() == kept
    assert (new["index"] == index).all()
    stored = rb.storage.get(index)["obs"]
    assert stored.tolist() == list(range(100, 106))
    assert len(rb) == 6
    # A single add also goes to a consumed slot.
    slot = rb.sample(1)["index"].item()
    assert rb.add(TensorDict(obs=torch.tensor(7), batch_size=[])) == slot


def test_consuming_sampler_list_storage_partial_free():
    rb = ReplayBuffer(storage=ListStorage(10), sampler=ConsumingSampler(), batch_size=2)
    rb.extend([1, 2, 3, 4])
    taken = rb.sample()
    index = rb.extend([5, 6, 7])
    assert set(index[:2].tolist()) == {v - 1 for v in taken.tolist()}
    assert index[2].item() == 4 and len(rb) == 5


def test_consuming_sampler_state_and_errors():
    sampler = ConsumingSampler()
    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=sampler, batch_size=3)
    rb.extend(torch.arange(8))
    rb.sample()
    state = sampler.state_dict()
    other = ConsumingSampler()
    other.load_state_dict(state)
    assert torch.equal(other._live, sampler._live) and other._free == sampler._free
    with pytest.raises(ValueError, match="counts"):
        other.load_state_dict({"counts": torch.zeros(2), "live": torch.zeros(3), "free": []})
    with pytest.raises(ValueError, match=">= 1"):
        ConsumingSampler(0)
    with pytest.raises(TypeError, match="int"):
        ConsumingSampler(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefetch"):
        ReplayBuffer(sampler=ConsumingSampler(), prefetch=2, batch_size=2)
    rb.empty()
    assert len(rb) == 0
    rb2 = ReplayBuffer(storage=LazyTensorStorage(8, ndim=2), sampler=ConsumingSampler())
    rb2.extend(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="ndim=1"):
        rb2.sample(2)


def test_consuming_sampler_dumps_loads(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=ConsumingSampler(), batch_size=3)
    rb.extend(torch.arange(8))
    taken = rb.sample()
    rb.dumps(tmp_path)
    again = ReplayBuffer(storage=LazyTensorStorage(8), sampler=ConsumingSampler(), batch_size=5)
    again.loads(tmp_path)
    assert len(again) == 5
    rest = again.sample()
    assert sorted(rest.tolist() + taken.tolist()) == list(range(8))
    assert list(again.sampler._free)[:3] == taken.tolist()


# ------------------------------------------------------------------------------ sample units
def _episodes(n: int = 20, ends: tuple[int, ...] = (4, 11)) -> TensorDict:
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[list(ends)] = True
    return TensorDict(
        obs=torch.arange(n) + 1, next=TensorDict(done=done, batch_size=[n]), batch_size=[n]
    )


class _Fixed(RandomSampler):
    """Always draws the given anchors (to check windows exactly)."""

    def __init__(self, anchors: list[int]) -> None:
        self.anchors = torch.tensor(anchors)

    def sample(self, storage, batch_size):
        return self.anchors[:batch_size], {}


def _rb(anchors: list[int], unit: SampleUnit, storage=None) -> TensorDictReplayBuffer:
    rb = TensorDictReplayBuffer(
        storage=storage or LazyTensorStorage(20), sampler=_Fixed(anchors), sample_unit=unit
    )
    rb.extend(_episodes())
    return rb


def test_transition_is_the_default():
    a = ReplayBuffer(storage=LazyTensorStorage(10), generator=torch.Generator().manual_seed(0))
    b = ReplayBuffer(
        storage=LazyTensorStorage(10),
        sample_unit=Transition(),
        generator=torch.Generator().manual_seed(0),
    )
    for rb in (a, b):
        rb.extend(torch.arange(10))
    assert torch.equal(a.sample(4), b.sample(4))
    assert isinstance(a.sample_unit, Transition)
    with pytest.raises(TypeError, match="SampleUnit"):
        ReplayBuffer(sample_unit="seq")  # type: ignore[arg-type]


def test_custom_sample_unit_contract():
    class Pairs(SampleUnit):
        """Each anchor brings itself and its successor; postprocess tags the batch."""

        def expand(self, index, info, storage):
            index = torch.stack([index, (index + 1) % len(storage)], -1).reshape(-1)
            return index, {**info, "pair": torch.arange(index.numel()) // 2}

        def postprocess(self, data, info):
            data["pair"] = info["pair"]
            return data

    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10), sampler=_Fixed([3, 9]), sample_unit=Pairs()
    )
    rb.extend(TensorDict(obs=torch.arange(10), batch_size=[10]))
    batch, info = rb.sample(2, return_info=True)
    assert batch["obs"].tolist() == [3, 4, 9, 0] and batch["pair"].tolist() == [0, 0, 1, 1]
    assert info["index"].tolist() == [3, 4, 9, 0]  # the expanded index is the reported one
    with pytest.raises(TypeError):
        SampleUnit()  # type: ignore[abstract]


def test_sequence_windows_and_masks_pad():
    unit = Sequence(length=3, burn_in=2, bootstrap=1)  # episodes [0, 4], [5, 11], [12, 19]
    rb = _rb([6, 10, 17], unit)
    batch = rb.sample(3).unflatten(0, (3, 4 + 2))
    # anchor 6: burn-in 4, 5 -> 4 is in the previous episode (zero-filled, invalid)
    assert batch["obs"][0].tolist() == [0, 6, 7, 8, 9, 10]
    assert batch["validity_mask"][0].tolist() == [False, True, True, True, True, True]
    assert batch["learning_mask"][0].tolist() == [False, False, True, True, True, False]
    # anchor 10: the window runs past the episode end at 11
    assert batch["obs"][1].tolist() == [9, 10, 11, 12, 0, 0]
    assert batch["validity_mask"][1].tolist() == [True] * 4 + [False] * 2
    # anchor 17: the window runs past the stored range
    assert batch["obs"][2].tolist() == [16, 17, 18, 19, 20, 0]
    assert (batch["anchor_index"] == torch.tensor([6, 10, 17])[:, None]).all()
    assert batch["index"][1].tolist() == [8, 9, 10, 11, 11, 11]


def test_sequence_stop_and_include_reset():
    stop = _rb([10], Sequence(length=4, episode_boundary="stop")).sample(1)
    assert stop["obs"].tolist() == [11, 12, 12, 12]
    assert stop["validity_mask"].tolist() == [True, True, False, False]
    cross = _rb([10], Sequence(length=4, episode_boundary="include_reset")).sample(1)
    assert cross["obs"].tolist() == [11, 12, 13, 14]
    assert cross["validity_mask"].all()
    dilated = _rb([12], Sequence(length=3, dilation=3)).sample(1)
    assert dilated["obs"].tolist() == [13, 16, 19]


def test_sequence_without_done_key_and_weights():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10),
        sampler=PrioritizedSampler(10, alpha=1.0, beta=1.0),
        sample_unit=Sequence(length=2, done_key=None),
    )
    rb.extend(torch.arange(10))
    data, info = rb.sample(3, return_info=True)
    assert data.shape == (6,) and info["_weight"].shape == (6,)
    assert torch.equal(info["_weight"][0::2], info["_weight"][1::2])
    assert torch.equal(info["anchor_index"][0::2], info["anchor_index"][1::2])
    # A plain-tensor batch: invalid records (past the stored range) are zero-filled.
    valid = info["validity_mask"]
    assert (data[~valid] == 0).all()


def test_sequence_errors():
    with pytest.raises(ValueError, match="length"):
        Sequence(length=0)
    with pytest.raises(ValueError, match="episode_boundary"):
        Sequence(length=2, episode_boundary="wrap")  # type: ignore[arg-type]
    rb = ReplayBuffer(storage=ListStorage(10), sample_unit=Sequence(length=2))
    rb.extend([TensorDict(obs=torch.tensor(i), batch_size=[]) for i in range(3)])
    with pytest.raises(TypeError, match="TensorStorage"):
        rb.sample(1)


# ------------------------------------------------------------------------------ buffer parts as constructors
def test_buffer_parts_given_as_constructors():
    rb = ReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 7), sampler=RandomSampler, batch_size=2
    )
    assert isinstance(rb.storage, LazyTensorStorage) and rb.storage.max_size == 7
    with pytest.raises(TypeError, match="not a Storage"):
        ReplayBuffer(storage=lambda: 3)


# ------------------------------------------------------------------------------ remote buffers
def test_remote_td_buffer_local_calls():
    rb = RemoteTensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=3)
    assert isinstance(rb, TensorDictReplayBuffer)
    index = rb.extend(TensorDict(obs=torch.arange(5), batch_size=[5]))
    assert index.device.type == "cpu" and index.tolist() == [0, 1, 2, 3, 4]
    assert rb.add(TensorDict(obs=torch.tensor(9), batch_size=[])) == 5
    sample = rb.sample()
    assert (rb.storage.get(sample["index"])["obs"] == sample["obs"]).all()


def _rpc_round_trip(port: int) -> None:
    """Child side of the RPC test: a group of one worker, calls through an RRef."""
    import os
    import warnings

    from torch.distributed import rpc

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    warnings.filterwarnings("ignore", "You are using a Backend")
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://127.0.0.1:{port}", _transports=["shm"], _channels=["basic"]
    )
    rpc.init_rpc("owner", rank=0, world_size=1, rpc_backend_options=options)
    try:
        rref = rpc.remote(
            "owner",
            RemoteTensorDictReplayBuffer,
            kwargs={"storage": LazyTensorStorage(10), "batch_size": 4},
        )
        index = rref.rpc_sync().extend(TensorDict(obs=torch.arange(6.0), batch_size=[6]))
        assert index.tolist() == list(range(6))
        assert rref.rpc_sync().__len__() == 6
        sample = rref.rpc_sync().sample()
        assert sample.shape == (4,) and (sample["obs"] == sample["index"].float()).all()
        assert len(rref.local_value()) == 6
    finally:
        rpc.shutdown()


def test_remote_td_buffer_over_rpc():
    """A real RPC group (loopback, shared-memory transport), in a forked child: torch keeps RPC
    state for the life of a process, and later tests fork workers that form groups of their own.
    """
    pytest.importorskip("torch.distributed.rpc")
    import multiprocessing

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    child = multiprocessing.get_context("fork").Process(target=_rpc_round_trip, args=(port,))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        pytest.fail("the RPC child hung")
    assert child.exitcode == 0, f"the RPC child failed (exit code {child.exitcode})"


def test_ray_replay_buffer_paths():
    from torchrl.collectors.distributed import RayReplayBuffer as from_collectors
    from torchrl.data.replay_buffers import RayReplayBuffer as from_rb

    assert RayReplayBuffer is from_collectors is from_rb


@pytest.mark.slow
def test_ray_replay_buffer_with_constructors(monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    rb = RayReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 20),
        sampler=ConsumingSampler,
        batch_size=4,
    )
    try:
        rb.extend(TensorDict(obs=torch.arange(6), batch_size=[6]))
        assert rb.sample().shape == (4,)
        assert len(rb) == 2
    finally:
        rb.shutdown()
        if started:
            ray.shutdown()


# ------------------------------------------------------------------------------ VideoClipRef
def test_video_ref_lazy_indexing_and_sources():
    ref = VideoClipRef("clip.mp4", frame_index=torch.arange(100), batch_size=[100])
    part = ref[50:60]
    assert isinstance(part, VideoClipRef) and part.shape == (10,)
    assert part.frame_index.tolist() == list(range(50, 60)) and part.source == "clip.mp4"
    again = pickle.loads(pickle.dumps(part))
    assert again.sources == ("clip.mp4",) and torch.equal(again.frame_index, part.frame_index)
    multi = VideoClipRef.from_files(["a.mp4", "b.mp4"], [torch.arange(3), torch.tensor([5, 9])])
    assert multi.file_id.tolist() == [0, 0, 0, 1, 1] and multi[3:].source == "b.mp4"
    with pytest.raises(ValueError, match="2 files"):
        _ = multi.source
    with pytest.raises(ValueError, match="file_id"):
        VideoClipRef(
            ("a",),
            frame_index=torch.zeros(2, dtype=torch.long),
            file_id=torch.tensor([0, 1]),
            batch_size=[2],
        )
    with pytest.raises(ValueError, match="frame_index"):
        VideoClipRef("a.mp4", batch_size=[])
    with pytest.raises(TypeError, match="int tensor"):
        VideoClipRef("a.mp4", frame_index=torch.zeros(2), batch_size=[2])
    with pytest.raises(ValueError, match="2 sources"):
        VideoClipRef.from_files(["a", "b"], [torch.arange(2)])


@pytest.mark.skipif(importlib.util.find_spec("torchcodec") is not None, reason="torchcodec found")
def test_video_ref_decode_without_torchcodec_names_the_extra():
    ref = VideoClipRef("clip.mp4", frame_index=torch.arange(3), batch_size=[3])
    with pytest.raises(ImportError, match=r"torchrl\[video\]"):
        ref.decode()


def test_video_ref_decode_groups_files_and_ranges(monkeypatch):
    """decode() against a stand-in decoder: frame f of file k has all pixels 10 * k + f."""
    calls: list[tuple[str, int, int]] = []

    class FakeDecoder:
        def __init__(self, path, stream_index=None):
            self.path, self.k = path, int(path[-5])

        def get_frames_in_range(self, start, stop):
            calls.append((self.path, start, stop))
            frames = torch.arange(start, stop, dtype=torch.uint8) + 10 * self.k
            return types.SimpleNamespace(data=frames[:, None, None, None].expand(-1, 3, 2, 2))

    decoders = types.ModuleType("torchcodec.decoders")
    decoders.VideoDecoder = FakeDecoder  # type: ignore[attr-defined]
    package = types.ModuleType("torchcodec")
    package.decoders = decoders  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchcodec", package)
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", decoders)
    video_mod.clear_video_decoder_cache()
    ref = VideoClipRef.from_files(
        ["v0.mp4", "v1.mp4"], [torch.tensor([3, 1, 2, 7]), torch.tensor([0, 1])]
    )
    out = ref.decode(dtype=torch.float32)
    assert out.shape == (6, 3, 2, 2) and out.dtype == torch.float32
    assert out[:, 0, 0, 0].tolist() == [3, 1, 2, 7, 10, 11]
    assert sorted(calls) == [("v0.mp4", 1, 4), ("v0.mp4", 7, 8), ("v1.mp4", 0, 2)]
    grid = ref[:4].reshape(2, 2).decode()
    assert grid.shape == (2, 2, 3, 2, 2) and grid.dtype == torch.uint8
    assert len(video_mod._DECODERS) == 2  # decoders reused from the per-process cache
    stacked = torch.stack([ref[0], ref[4]])  # e.g. collated from a ListStorage buffer
    assert stacked.decode()[:, 0, 0, 0].tolist() == [3, 10]
    video_mod.set_video_decoder_cache_size(0)
    assert not video_mod._DECODERS
    video_mod.set_video_decoder_cache_size(8)
    with pytest.raises(ValueError, match="cache size"):
        video_mod.set_video_decoder_cache_size(-1)


def test_video_ref_in_a_list_storage_buffer():
    ref = VideoClipRef("clip.mp4", frame_index=torch.arange(10), batch_size=[10])
    rb = ReplayBuffer(storage=ListStorage(20), batch_size=4)
    rb.extend([ref[i] for i in range(10)])
    sample = rb.sample()
    assert isinstance(sample, VideoClipRef) and sample.shape == (4,)
    assert sample.source == "clip.mp4"
    stacked = torch.stack(
        [ref[1], VideoClipRef("b.mp4", frame_index=torch.tensor(4), batch_size=[])]
    )
    paths, file_id, frames = stacked._addresses()
    assert paths == ("clip.mp4", "b.mp4") and file_id.tolist() == [0, 1]
    assert frames.tolist() == [1, 4]


# ------------------------------------------------------------------------------ paths and numbers
def test_documented_paths_resolve():
    from torchrl.data.replay_buffers import samplers

    assert data_pkg.PrioritizedSliceSampler is samplers.PrioritizedSliceSampler
    assert data_pkg.ConsumingSampler is samplers.ConsumingSampler
    from torchrl.data.replay_buffers.sample_units import Sequence as seq

    assert seq is Sequence


@pytest.mark.parametrize("numbers", [range(5), [0, 1, 2, 3, 4]])
def test_lazy_tensor_storage_stores_python_ints_as_a_tensor(numbers):
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=3)
    rb.extend(numbers)
    stored = rb.storage.get(torch.arange(5))
    assert isinstance(stored, torch.Tensor) and stored.dtype == torch.int64
    assert stored.tolist() == [0, 1, 2, 3, 4]
