"""Replay buffers and devices: where samples land, pinned memory, prefetching threads."""

from __future__ import annotations

import gc
import threading
import time

import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl.data.replay_buffers import (
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorStorage,
)

_has_cuda = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not _has_cuda, reason="needs CUDA")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]
PREFIX = "torchrl-rb-prefetch"


def steps(n: int, start: int = 0, device: str = "cpu") -> TensorDict:
    """``n`` transitions whose ``obs`` is their step number; an episode ends every 5 steps."""
    t = torch.arange(start, start + n)
    return TensorDict(
        {"obs": t.float().unsqueeze(-1), ("next", "done"): (t % 5 == 4).unsqueeze(-1)},
        batch_size=[n],
        device=device,
    )


def _plain(device: torch.device) -> torch.device:
    # "cuda" and "cuda:0" name the same device when 0 is the current one.
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def leaf_devices(data: TensorDictBase | torch.Tensor) -> set[torch.device]:
    """The devices of every tensor in ``data``, spelled with an index for CUDA."""
    if isinstance(data, torch.Tensor):
        return {_plain(data.device)}
    return {_plain(v.device) for v in data.values(True, True)}


def on(device: str) -> set[torch.device]:
    return {_plain(torch.device(device))}


def prefetch_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(PREFIX)}


# -- where samples land ---------------------------------------------------------------------------
def _storage(kind: str, device: str, tmp_path):
    if kind == "LazyTensorStorage":
        return LazyTensorStorage(50, device=device)
    if kind == "LazyMemmapStorage":
        return LazyMemmapStorage(50, scratch_dir=tmp_path / "mm", device=device)
    if kind == "TensorStorage":
        return TensorStorage(steps(50).zero_(), device=device)
    if kind == "LazyStackStorage":
        return LazyStackStorage(50, device=device)
    if kind == "ListStorage(device)":
        return ListStorage(50, device=device)
    return ListStorage(50)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "kind",
    [
        "LazyTensorStorage",
        "LazyMemmapStorage",
        "TensorStorage",
        "ListStorage",
        "ListStorage(device)",
        "LazyStackStorage",
    ],
)
@pytest.mark.parametrize("prefetch", [0, 2])
def test_samples_land_on_the_storage_device(kind, device, prefetch, tmp_path):
    storage = _storage(kind, device, tmp_path)
    rb = TensorDictReplayBuffer(storage=storage, batch_size=8, prefetch=prefetch)
    # A ListStorage keeps items where they are: give it data on the device.
    rb.extend(steps(50, device=device if kind == "ListStorage" else "cpu"))
    for _ in range(3):
        batch = rb.sample()
        assert leaf_devices(batch) == on(device), kind
        assert (batch["obs"].squeeze(-1).long() == batch["index"]).all()
    # Indexing reads the same place.
    assert leaf_devices(rb[torch.arange(3)]) == on(device)


def test_memmap_storage_stays_on_cpu_and_sends_samples_elsewhere(tmp_path):
    # "meta" exercises the transfer path without a GPU: the files stay on CPU.
    storage = LazyMemmapStorage(20, scratch_dir=tmp_path, device="meta")
    rb = TensorDictReplayBuffer(storage=storage, batch_size=4, pin_memory=True)
    rb.extend(steps(10))
    assert storage.device == torch.device("cpu")
    batch = rb.sample()
    assert leaf_devices(batch) == {torch.device("meta")}
    assert storage.get(torch.arange(3))["obs"].device == torch.device("meta")
    # The host copy is what the buffer reads under its lock (and pins before sending).
    host, device = storage._get_kept(torch.arange(3))
    assert host["obs"].device == torch.device("cpu") and device == torch.device("meta")
    assert host["obs"].squeeze(-1).tolist() == [0.0, 1.0, 2.0]


def test_list_storage_moves_items_to_its_device():
    storage = ListStorage(10, device="meta")
    rb = ReplayBuffer(storage=storage, batch_size=3)
    rb.extend(steps(4))
    rb.add(steps(1)[0])
    assert all(leaf_devices(item) == {torch.device("meta")} for item in storage._items)
    assert leaf_devices(rb.sample()) == {torch.device("meta")}
    # Objects without a device are kept as they are; restored items are moved too.
    objects = ListStorage(10, device="meta")
    objects.set(torch.arange(2), ["a", torch.zeros(1)])
    assert objects.get(0) == "a" and objects.get(1).device == torch.device("meta")
    restored = ListStorage(10, device="meta")
    restored.load_state_dict(ListStorage(10).state_dict() | {"items": [torch.ones(2)]})
    assert restored.get(0).device == torch.device("meta")


def test_lazy_tensor_storage_on_another_device_stores_there():
    storage = LazyTensorStorage(10, device="meta")
    rb = ReplayBuffer(storage=storage, batch_size=4, prefetch=1)
    rb.extend(steps(10))
    assert leaf_devices(storage._storage) == {torch.device("meta")}
    assert leaf_devices(rb.sample()) == {torch.device("meta")}


@pytest.mark.parametrize("device", DEVICES)
def test_slice_sampler_on_device(device, tmp_path):
    rb = ReplayBuffer(
        storage=LazyMemmapStorage(40, scratch_dir=tmp_path, device=device),
        sampler=SliceSampler(slice_len=5),
        batch_size=10,
        prefetch=1,
    )
    rb.extend(steps(40))
    batch = rb.sample()
    assert leaf_devices(batch) == on(device)
    obs = batch["obs"].reshape(2, 5).cpu()
    assert (obs[:, 0] % 5 == 0).all() and (obs.diff(dim=1) == 1).all()


# -- pinned memory ----------------------------------------------------------------------------------
def test_pin_memory_without_cuda_does_nothing():
    if _has_cuda:
        pytest.skip("checks the CPU-only behaviour")
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4, pin_memory=True, prefetch=1)
    ref = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
    rb.extend(steps(10))
    ref.extend(steps(10))
    torch.manual_seed(0)
    batch = rb.sample()
    torch.manual_seed(0)
    assert (batch == ref.sample()).all()
    assert not batch["obs"].is_pinned()


@needs_cuda
@pytest.mark.parametrize("prefetch", [0, 2])
def test_pin_memory_pins_cpu_batches(prefetch):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(20), batch_size=4, pin_memory=True, prefetch=prefetch
    )
    rb.extend(steps(20))
    batch = rb.sample()
    assert all(v.is_pinned() for v in batch.values(True, True))
    moved = batch.to("cuda", non_blocking=True)
    torch.cuda.current_stream().synchronize()
    assert (moved["obs"].squeeze(-1).long() == moved["index"]).all()


@needs_cuda
@pytest.mark.parametrize("prefetch", [0, 2])
def test_pinned_batch_moved_by_a_transform(prefetch):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(20),
        batch_size=4,
        pin_memory=True,
        prefetch=prefetch,
        transform=lambda td: td.to("cuda", non_blocking=True),
    )
    rb.extend(steps(20))
    for _ in range(4):
        batch = rb.sample()
        assert leaf_devices(batch) == on("cuda")
        assert (batch["obs"].squeeze(-1).long() == batch["index"]).all()


@needs_cuda
@pytest.mark.parametrize("prefetch", [0, 2])
def test_memmap_to_cuda_from_pinned_memory(prefetch, tmp_path):
    rb = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(20, scratch_dir=tmp_path, device="cuda"),
        batch_size=4,
        pin_memory=True,
        prefetch=prefetch,
    )
    rb.extend(steps(20))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # the caller's stream waits for the prefetch copies
        for _ in range(4):
            batch = rb.sample()
            assert batch.device.type == "cuda"
            assert (batch["obs"].squeeze(-1).long() == batch["index"]).all()


@needs_cuda
def test_pin_memory_with_a_cuda_storage_is_harmless():
    rb = ReplayBuffer(storage=LazyTensorStorage(10, device="cuda"), batch_size=4, pin_memory=True)
    rb.extend(steps(10))
    assert rb.sample()["obs"].is_cuda


# -- prefetching returns the batches sampling would ------------------------------------------------
def _sampler(name: str):
    if name == "random":
        return RandomSampler()
    if name == "without_replacement":
        return SamplerWithoutReplacement()
    if name == "prioritized":
        return PrioritizedSampler(60, alpha=0.8, beta=0.5)
    return SliceSampler(slice_len=4)


def _filled(name: str, prefetch: int, generator: torch.Generator | None) -> ReplayBuffer:
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(60),
        sampler=_sampler(name),
        batch_size=8,
        prefetch=prefetch,
        generator=generator,
    )
    rb.extend(steps(60))
    if name == "prioritized":
        rb.update_priority(torch.arange(60), torch.linspace(0.1, 3.0, 60))
    return rb


@pytest.mark.parametrize("name", ["random", "without_replacement", "prioritized", "slice"])
@pytest.mark.parametrize("seeding", ["global", "generator"])
def test_prefetch_returns_the_same_batches(name, seeding):
    batches = {}
    for prefetch in (0, 3):
        if seeding == "global":
            torch.manual_seed(7)
            rb = _filled(name, prefetch, None)
        else:
            rb = _filled(name, prefetch, torch.Generator().manual_seed(7))
        out = []
        for _ in range(12):
            if seeding == "generator":
                torch.rand(5)  # the caller's own draws do not touch the buffer's generator
            out.append(rb.sample().clone())
        batches[prefetch] = out
        del rb
    for plain, ahead in zip(batches[0], batches[3]):
        assert set(plain.keys(True, True)) == set(ahead.keys(True, True))
        assert (plain == ahead).all()


def test_prefetch_neither_loses_nor_reorders_an_epoch():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(40),
        sampler=SamplerWithoutReplacement(),
        batch_size=8,
        prefetch=3,
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(steps(40))
    for _ in range(3):
        epoch = torch.cat([b["index"] for b in rb])
        assert sorted(epoch.tolist()) == list(range(40))


def test_prefetched_batches_see_the_items_as_drawn():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=4, prefetch=2)
    rb.extend(steps(10))
    assert (rb.sample()["obs"] < 10).all()
    rb.extend(steps(10, start=100))  # overwrites every slot
    # The next two batches were drawn before the write: they hold the old items...
    for _ in range(2):
        batch = rb.sample()
        assert (batch["obs"].squeeze(-1).long() == batch["index"]).all()
    # ...and the following ones the new items.
    for _ in range(3):
        batch = rb.sample()
        assert (batch["obs"].squeeze(-1).long() == batch["index"] + 100).all()


def test_a_write_reads_the_drawn_batches_first():
    # A prefetch thread has not read its batch yet (the lock is held here): the write reads it
    # before changing the storage.
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=4, prefetch=1)
    rb.extend(steps(10))
    rb.sample()
    rb._drain()
    assert rb._executor is not None
    with rb._lock:
        future, drawn = rb._queue(rb._executor, 4)
        assert drawn
        assert len(rb._unread) == 1
        rb.extend(steps(10, start=100))
        assert rb._unread == []
    batch = future.result(timeout=30)[0]
    assert (batch["obs"].squeeze(-1).long() == batch["index"]).all()


def test_prefetch_with_priority_updates_and_weights():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(30), batch_size=6, prefetch=2
    )
    rb.extend(steps(30))
    for i in range(5):
        batch = rb.sample()
        assert (batch["obs"].squeeze(-1).long() == batch["index"]).all()
        assert batch["_weight"].shape == (6,) and (batch["_weight"] > 0).all()
        batch["td_error"] = batch["obs"].squeeze(-1) + 1.0
        rb.update_tensordict_priority(batch)
        rb.extend(steps(3, start=3 * i))  # the writer's next slots: 3i, 3i+1, 3i+2


def test_prefetch_with_a_list_storage_and_another_batch_size():
    rb = ReplayBuffer(storage=ListStorage(20), batch_size=4, prefetch=2)
    rb.extend(torch.arange(20.0))
    assert rb.sample().shape == (4,)
    assert rb.sample(7).shape == (7,)  # another size is sampled now, not prefetched


def test_a_failed_read_reaches_the_caller():
    class Broken(LazyTensorStorage):
        fail = False

        def get(self, index):
            if self.fail:
                raise OSError("disk gone")
            return super().get(index)

    storage = Broken(10)
    rb = ReplayBuffer(storage=storage, batch_size=2, prefetch=2)
    rb.extend(steps(10))
    rb.sample()
    rb._drain()
    storage.fail = True
    with pytest.raises(OSError, match="disk gone"):
        rb.sample()
    storage.fail = False
    assert rb.sample().shape == (2,)


# -- threads stop -----------------------------------------------------------------------------------
def _join(threads: set[threading.Thread], timeout: float = 20.0) -> None:
    """Waits for ``threads`` to end, collecting garbage meanwhile (a buffer still referenced by
    a batch being sampled becomes garbage once that batch is done)."""
    deadline = time.monotonic() + timeout
    alive = set(threads)
    while alive and time.monotonic() < deadline:
        gc.collect()
        for thread in list(alive):
            thread.join(timeout=0.05)
        alive = {t for t in alive if t.is_alive()}
    assert not alive, f"{len(alive)} prefetch thread(s) still running"


def test_no_threads_without_prefetch():
    before = prefetch_threads()
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
    rb.extend(steps(10))
    rb.sample()
    assert prefetch_threads() == before


def test_threads_stop_when_the_buffer_is_deleted():
    before = prefetch_threads()
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, prefetch=3)
    rb.extend(steps(10))
    for _ in range(4):
        rb.sample()
    started = prefetch_threads() - before
    assert 1 <= len(started) <= 3
    del rb
    gc.collect()
    _join(started)


def test_threads_stop_when_the_buffer_is_emptied_and_restart():
    before = prefetch_threads()
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, prefetch=2)
    rb.extend(steps(10))
    rb.sample()
    started = prefetch_threads() - before
    assert started
    rb.empty()
    _join(started)
    assert len(rb) == 0
    rb.extend(steps(10, start=50))
    assert (rb.sample()["obs"] >= 50).all()  # new threads, new items
    restarted = prefetch_threads() - before
    assert restarted and not restarted & started
    rb.empty()
    _join(restarted)


def test_many_buffers_leave_no_threads():
    before = prefetch_threads()
    for _ in range(10):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, prefetch=2)
        rb.extend(steps(10))
        rb.sample()
        del rb
    gc.collect()
    _join(prefetch_threads() - before)
