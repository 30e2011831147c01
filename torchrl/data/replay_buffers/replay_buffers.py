"""Replay buffers: a storage, a sampler and a writer composed behind one object."""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

from torchrl._keys import INDEX, MASK, PRIORITY, WEIGHT
from torchrl._types import IndexLike, NestedKey
from torchrl.data.replay_buffers.sample_units import SampleUnit, Transition
from torchrl.data.replay_buffers.samplers import (
    ConsumingSampler,
    PrioritizedSampler,
    RandomSampler,
    Sampler,
)
from torchrl.data.replay_buffers.storages import (
    Index,
    ListStorage,
    Storage,
    TensorStorage,
    numbers_as_tensor,
)
from torchrl.data.replay_buffers.utils import (
    FORMAT_VERSION,
    atomic_torch_save,
    atomic_write_json,
    check_format_version,
    default_collate,
    identity,
    nested_key_str,
    read_json,
    safe_torch_load,
)
from torchrl.data.replay_buffers.writers import (
    RoundRobinWriter,
    TensorDictRoundRobinWriter,
    Writer,
)
from torchrl.data.trajectory_views import TrajectoryView, ViewBuilder

__all__ = [
    "PrioritizedReplayBuffer",
    "RemoteTensorDictReplayBuffer",
    "ReplayBuffer",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
]


class _BufferTransforms(torch.nn.Module):
    """The transforms of a buffer: forward runs on samples, ``inv`` on data being written.

    An entry added with ``invert=True`` runs its forward on written data instead. Entries that
    have an ``inv`` method (env transforms) run it on written data, last entry first.
    """

    def __init__(self) -> None:
        super().__init__()
        self._entries: list[tuple[Callable[[Any], Any], bool]] = []

    def insert(self, index: int, transform: Callable[[Any], Any], invert: bool) -> None:
        if not callable(transform):
            raise TypeError(f"a transform must be callable, got {type(transform).__name__}")
        self._entries.insert(index, (transform, invert))
        self._register()

    def _register(self) -> None:
        for name in list(self._modules):
            del self._modules[name]
        for i, (transform, _) in enumerate(self._entries):
            if isinstance(transform, torch.nn.Module):
                self.add_module(str(i), transform)

    def forward(self, data: Any) -> Any:
        for transform, invert in self._entries:
            if not invert:
                data = transform(data)
        return data

    def inv(self, data: Any) -> Any:
        for transform, invert in reversed(self._entries):
            if invert:
                data = transform(data)
            else:
                inverse = getattr(transform, "inv", None)
                if callable(inverse):
                    data = inverse(data)
        return data

    @property
    def acts_on_write(self) -> bool:
        return any(
            invert or callable(getattr(transform, "inv", None))
            for transform, invert in self._entries
        )

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, index: int) -> Callable[[Any], Any]:
        return self._entries[index][0]

    def __iter__(self) -> Iterator[Callable[[Any], Any]]:
        return iter(t for t, _ in self._entries)

    def extra_repr(self) -> str:
        return ", ".join(
            f"{getattr(t, '__name__', type(t).__name__)}{' (on write)' if inv else ''}"
            for t, inv in self._entries
        )


def _shutdown(executor: ThreadPoolExecutor, futures: deque[Future]) -> None:
    for future in futures:
        future.cancel()
    executor.shutdown(wait=False, cancel_futures=True)


class _Pending:
    """A prefetched batch: drawn (index and info) in order, read and finished in a thread."""

    __slots__ = ("device", "error", "future", "index", "info", "items", "ran_out", "read")

    def __init__(self, index: Index, info: dict[NestedKey, Any], ran_out: bool) -> None:
        self.index = index
        self.info = info
        self.ran_out = ran_out
        self.read = False
        self.items: Any = None
        self.device: torch.device | None = None
        self.error: Exception | None = None
        self.future: Future | None = None


class _Ready:
    """A CUDA event recorded after a batch's last kernel, on the current stream of its device."""

    __slots__ = ("device", "event", "stream")

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.current_stream(device)
        self.event = torch.cuda.Event()
        self.event.record(self.stream)

    def wait(self, data: Any) -> None:
        """Makes the caller's current stream wait for the batch ``data`` (the caller's thread)."""
        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(self.event)
        if stream != self.stream:
            # The batch was allocated on another stream: its memory must not be reused before
            # the kernels queued here on the caller's stream are done with it.
            leaves = data.values(True, True) if isinstance(data, TensorDictBase) else [data]
            for leaf in leaves:
                if isinstance(leaf, torch.Tensor) and leaf.is_cuda:
                    leaf.record_stream(stream)


def _ready_event(data: Any) -> _Ready | None:
    """An event marking ``data`` ready when it lies on a CUDA device (``None`` otherwise)."""
    device = getattr(data, "device", None)
    if isinstance(device, torch.device) and device.type == "cuda":
        return _Ready(device)
    return None


def _pinned(data: Any) -> Any:
    """``data`` with its CPU tensors in pinned memory (tensors and TensorDicts; others as is)."""
    if isinstance(data, torch.Tensor):
        return data.pin_memory() if data.device.type == "cpu" else data
    if isinstance(data, TensorDictBase):
        if data.device is not None:
            return data.pin_memory() if data.device.type == "cpu" else data
        return data.apply(lambda t: t.pin_memory() if t.device.type == "cpu" else t)
    return data


class ReplayBuffer:
    """A replay buffer: writes go through a writer into a storage, samples come from a sampler.

    Every part is replaceable: see ``storages``, ``samplers`` and ``writers``. ``extend``,
    ``sample`` and ``update_priority`` hold a lock, so threads may write and sample concurrently.
    Invalid data (keys or shapes differing from the stored layout, bad priorities, out-of-range
    indices) raises before anything is written. Samples come out on the storage's device
    (``LazyTensorStorage(n, device=...)``; ``LazyMemmapStorage(n, device=...)`` reads on CPU
    and sends them there; a ``ListStorage`` keeps items where they were).

    With ``prefetch=N``, N batches of ``batch_size`` are sampled ahead by N threads. Their
    indices are drawn in order by the caller, so that a seeded sampler returns the same batches
    as without prefetching, as long as nothing else draws from its generator in between (give
    the buffer its own ``generator`` to be safe). A prefetched batch holds the items as they were
    when it was drawn, up to N calls earlier: writes and priority updates made since then show
    from the following batches on. See :meth:`sample`.

    Args:
        storage: where items live; ``ListStorage(max_size=1000)`` by default. A callable
            returning a storage (e.g. ``functools.partial(LazyTensorStorage, 100)``) is called.
        sampler: which items a batch holds; :class:`RandomSampler` by default (or a callable
            returning one).
        writer: where new items go; :class:`RoundRobinWriter` by default (or a callable
            returning one).
        collate_fn: turns what the storage returns into a batch; stacks lists from a
            ``ListStorage`` and passes tensor storages' batches through by default.
        pin_memory: put sampled batches (their CPU tensors) in pinned memory, so that
            ``batch.to("cuda", non_blocking=True)`` (or a transform doing it) copies
            asynchronously; a ``LazyMemmapStorage(device="cuda")`` then copies from pinned
            memory. Pinning needs CUDA: without it, this does nothing.
        prefetch: number of batches sampled ahead by background threads (0: none); stopped by
            :meth:`empty` and when the buffer is garbage-collected.
        transform: a callable (an ``nn.Module`` such as an env transform, or any function) run on
            every sample; see :meth:`append_transform`.
        batch_size: default batch size of :meth:`sample`, needed to iterate and to prefetch.
        generator: random generator used by the sampler (torch's global RNG by default).
        sample_unit: what each sampled item expands into (a
            :class:`~torchrl.data.replay_buffers.sample_units.SampleUnit`);
            :class:`~torchrl.data.replay_buffers.sample_units.Transition` (itself) by default.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data.replay_buffers.storages import LazyTensorStorage
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)
        >>> rb.extend(TensorDict({"obs": torch.randn(10, 3)}, batch_size=[10])).shape
        torch.Size([10])
        >>> len(rb), rb.sample()["obs"].shape
        (10, torch.Size([4, 3]))
    """

    def __init__(
        self,
        *,
        storage: Storage | None = None,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
        sample_unit: SampleUnit | None = None,
    ) -> None:
        storage = _built(storage, Storage, "storage")
        sampler = _built(sampler, Sampler, "sampler")
        writer = _built(writer, Writer, "writer")
        self._storage = storage if storage is not None else ListStorage(max_size=1000)
        self._sampler = sampler if sampler is not None else RandomSampler()
        self._writer = writer if writer is not None else self._default_writer()
        if sample_unit is not None and not isinstance(sample_unit, SampleUnit):
            raise TypeError(f"sample_unit must be a SampleUnit, got {type(sample_unit).__name__}")
        self._sample_unit = sample_unit if sample_unit is not None else Transition()
        self._writer.register_storage(self._storage)
        # cumulative counters read by stats() (two integer additions per sample call)
        self._sample_calls = 0
        self._samples_returned = 0
        if collate_fn is None:
            collate_fn = default_collate if isinstance(self._storage, ListStorage) else identity
        self._collate_fn = collate_fn
        self._pin_memory = bool(pin_memory) and torch.cuda.is_available()
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self._batch_size = batch_size
        if prefetch is not None and (not isinstance(prefetch, int) or prefetch < 0):
            raise ValueError(f"prefetch must be a non-negative int, got {prefetch!r}")
        self._prefetch = prefetch or 0
        if self._prefetch and isinstance(self._sampler, ConsumingSampler):
            raise ValueError(
                "prefetch cannot be used with a ConsumingSampler: batches sampled ahead would "
                "consume items that are never returned"
            )
        self._generator = generator
        self._sampler._generator = generator
        self._lock = threading.RLock()
        self._transforms = _BufferTransforms()
        if transform is not None:
            self.append_transform(transform)
        self._executor: ThreadPoolExecutor | None = None
        self._finalizer: weakref.finalize | None = None
        self._futures: deque[Future] = deque()
        # Prefetched batches drawn but not read yet (guarded by the lock).
        self._unread: list[_Pending] = []
        if len(self._storage):
            # A reopened storage already holds items: continue after them.
            self._writer._resume()
            self._sampler._resume(self._storage)

    def _default_writer(self) -> Writer:
        return RoundRobinWriter()

    # -- properties -------------------------------------------------------------------------------
    @property
    def storage(self) -> Storage:
        """The storage."""
        return self._storage

    @property
    def sampler(self) -> Sampler:
        """The sampler."""
        return self._sampler

    @property
    def writer(self) -> Writer:
        """The writer."""
        return self._writer

    @property
    def sample_unit(self) -> SampleUnit:
        """What each sampled item expands into."""
        return self._sample_unit

    @property
    def batch_size(self) -> int | None:
        """The default batch size of :meth:`sample`."""
        return self._batch_size

    @property
    def transform(self) -> _BufferTransforms:
        """The buffer's transforms (a module: forward on samples, ``inv`` on written data)."""
        return self._transforms

    @property
    def write_count(self) -> int:
        """How many items were written since the buffer was created or emptied."""
        return self._writer._write_count

    def __len__(self) -> int:
        return self._sampler._visible_len(self._storage)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(storage={self._storage!r}, sampler={self._sampler!r}, "
            f"writer={self._writer!r}, batch_size={self._batch_size})"
        )

    # -- transforms -------------------------------------------------------------------------------
    def append_transform(
        self, transform: Callable[[Any], Any], *, invert: bool = False
    ) -> ReplayBuffer:
        """Adds a transform run on sampled data (after the previous ones).

        Args:
            transform: any callable mapping a batch to a batch (an ``nn.Module`` works, e.g. an env
                transform). If it has an ``inv`` method, ``inv`` also runs on data being written.
            invert: run the transform on data being written (``extend``/``add``) instead of on
                samples.

        Returns:
            The buffer itself.
        """
        self._transforms.insert(len(self._transforms), transform, invert)
        return self

    def insert_transform(
        self, index: int, transform: Callable[[Any], Any], *, invert: bool = False
    ) -> ReplayBuffer:
        """Inserts a transform at position ``index``; see :meth:`append_transform`."""
        self._transforms.insert(index, transform, invert)
        return self

    # -- writing ----------------------------------------------------------------------------------
    def _flat(self, index: Index) -> torch.Tensor:
        if isinstance(index, tuple):
            return self._storage._index_to_flat(index).reshape(-1)
        return torch.as_tensor(index).reshape(-1)

    def _prepare_write(self, data: Any) -> tuple[Any, Any]:
        """Transforms data to be written and extracts priorities (validated) before any write."""
        if isinstance(self._storage, TensorStorage):
            data = numbers_as_tensor(data)
        if len(self._transforms) and self._transforms.acts_on_write:
            data = self._transforms.inv(data)
        return data, None

    def _after_write(self, index: Any, data: Any, priorities: Any) -> None:
        """Hook run under the lock once data is written (priority updates)."""

    def add(self, data: Any) -> int | Index | None:
        """Writes one item and returns its index.

        Args:
            data: one item (a TensorDict of batch ``[]``, or ``[*lead]`` for ``ndim > 1``
                storages, a tensor, or any object for a ``ListStorage``).

        Returns:
            The index of the item.
        """
        data, priorities = self._prepare_write(data)
        with self._lock:
            if self._unread:
                self._read_ahead()
            free = self._sampler._free_slots() if self._storage.ndim == 1 else None
            index: int | Index | None
            if free is not None and free.numel() and isinstance(self._writer, RoundRobinWriter):
                index = int(free[0])
                self._storage.set(index, data)
                self._writer._write_count += 1
            else:
                index = self._writer.add(data)
            if isinstance(index, int):
                self._sampler.add(index)
            elif index is not None:
                self._sampler.extend(self._flat(index))
            self._after_write(index, data, priorities)
        return index

    def extend(self, data: Any) -> Index:
        """Writes a batch of items and returns their indices.

        Args:
            data: items stacked along the first dim (``[n, ...]``), or ``[*lead, n, ...]`` for
                storages with ``ndim > 1``; a list for a ``ListStorage``.

        Returns:
            The indices where the items went: ``[n]``, or a tuple of ``[*lead, n]`` tensors.

        Raises:
            KeyError, ValueError, TypeError: the data does not match the stored layout; the
                buffer is left unchanged.
        """
        data, priorities = self._prepare_write(data)
        with self._lock:
            if self._unread:
                self._read_ahead()
            free = self._sampler._free_slots() if self._storage.ndim == 1 else None
            if free is not None and free.numel():
                index = self._extend_into(free, data)
            else:
                index = self._writer.extend(data)
            self._sampler.extend(self._flat(index))
            self._after_write(index, data, priorities)
        return index

    def _extend_into(self, free: torch.Tensor, data: Any) -> Index:
        """Writes into the free slots ``free`` first, then on from the writer's cursor."""
        storage, writer = self._storage, self._writer
        n = len(data) if isinstance(data, (list, tuple)) else storage._write_len(data)
        if not isinstance(writer, RoundRobinWriter) or n > storage.slots:
            return writer.extend(data)
        used = free[:n]
        slots = used
        cursor = writer._cursor
        if used.numel() < n:
            # Continue from the cursor, skipping the free slots just used: the items written
            # there must not be overwritten. Among ``n`` consecutive slots at most
            # ``used.numel()`` are skipped, so ``n`` candidates are enough (``n <= slots``).
            seq = (cursor + torch.arange(n)) % storage.slots
            rest = seq[~torch.isin(seq, used)][: n - used.numel()]
            slots = torch.cat([used, rest])
            cursor = (int(rest[-1]) + 1) % storage.slots
        storage.set(slots, data)
        writer._cursor = cursor
        writer._write_count += n
        if isinstance(data, TensorDictBase) and isinstance(writer, TensorDictRoundRobinWriter):
            try:
                data.set(INDEX, slots.to(data.device) if data.device is not None else slots)
            except RuntimeError:  # a locked TensorDict keeps its content
                pass
        return slots

    def __setitem__(self, index: Any, data: Any) -> None:
        if self._storage.ndim > 1:
            raise NotImplementedError("item assignment needs a storage with ndim=1")
        with self._lock:
            if self._unread:
                self._read_ahead()
            idx = self._storage._check_index(index)
            assert isinstance(idx, torch.Tensor)  # ndim == 1
            self._storage.set(idx if idx.ndim else int(idx), data)
            self._sampler.mark_update(idx.reshape(-1))

    # -- reading ----------------------------------------------------------------------------------
    def _decorate(self, data: Any, info: dict[NestedKey, Any]) -> Any:
        """Hook adding sampling information into the batch (TensorDict buffers)."""
        return data

    def _rebuild_views(self, data: Any, index: Any) -> Any:
        """Hook run under the lock on the items read at ``index`` (trajectory views)."""
        return data

    def _draw(self, batch_size: int) -> tuple[Index, dict[NestedKey, Any], bool]:
        """Draws the index of a batch (under the lock): the sampler, then the sample unit."""
        index, info = self._sampler.sample(self._storage, batch_size)
        index, info = self._sample_unit.expand(index, info, self._storage)
        info[INDEX] = index
        return index, info, self._sampler.ran_out

    def _read(self, index: Index) -> tuple[Any, torch.device | None]:
        """Reads the items at ``index`` (under the lock), and where the storage sends them."""
        data, device = self._storage._get_kept(index)
        return self._rebuild_views(data, index), device

    def _finish(self, data: Any, info: dict[NestedKey, Any], device: torch.device | None) -> Any:
        """Turns the items read into the batch returned (outside the lock)."""
        if device is not None:
            # A storage that sends its items elsewhere (LazyMemmapStorage(device="cuda")): pin
            # the host copy first, so that the transfer is asynchronous.
            if self._pin_memory:
                data = _pinned(data)
            data = data.to(device, non_blocking=True)
        data = self._collate_fn(data)
        data = self._sampler.postprocess(data, info)
        data = self._sample_unit.postprocess(data, info)
        data = self._decorate(data, info)
        if self._pin_memory:
            data = _pinned(data)
        if len(self._transforms):
            data = self._transforms(data)
        return data

    def _sample_now(self, batch_size: int) -> tuple[Any, dict[NestedKey, Any], bool]:
        with self._lock:
            index, info, ran_out = self._draw(batch_size)
            data, device = self._read(index)
        return self._finish(data, info, device), info, ran_out

    # -- prefetching ------------------------------------------------------------------------------
    # The main thread draws every batch's index, in order, when it queues the batch: the random
    # draws happen in the same order as without prefetching, so a seeded sampler gives the same
    # batches. The items are read later, by a prefetch thread or, if a write comes first, by the
    # writer (see _read_ahead): a batch always holds the items as they were when it was drawn.
    def _sample_prefetched(self, batch_size: int) -> tuple[Any, dict[NestedKey, Any], bool]:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                self._prefetch, thread_name_prefix="torchrl-rb-prefetch"
            )
            self._finalizer = weakref.finalize(self, _shutdown, self._executor, self._futures)
        futures = self._futures
        while len(futures) <= self._prefetch:
            future, drawn = self._queue(self._executor, batch_size)
            futures.append(future)
            if not drawn:  # the draw failed: raised when this batch is due
                break
        future = futures.popleft()
        try:
            data, info, ran_out, ready = future.result()
        except BaseException:
            # Batches queued behind a failed one (e.g. sampled from an empty buffer) are stale.
            self._drain()
            raise
        if ready is not None:
            # Kernels queued on the caller's stream wait for those of the prefetch thread.
            ready.wait(data)
        return data, info, ran_out

    def _queue(self, executor: ThreadPoolExecutor, batch_size: int) -> tuple[Future, bool]:
        """Draws one batch now and has a prefetch thread read and finish it.

        Returns:
            The batch's future, and whether the draw succeeded (if not, the future holds the
            error).
        """
        with self._lock:
            try:
                index, info, ran_out = self._draw(batch_size)
            except Exception as err:
                failed: Future = Future()
                failed.set_exception(err)
                return failed, False
            pending = _Pending(index, info, ran_out)
            self._unread.append(pending)
        pending.future = executor.submit(self._complete, pending)
        return pending.future, True

    def _complete(self, pending: _Pending) -> tuple[Any, dict[NestedKey, Any], bool, Any]:
        """Runs in a prefetch thread: reads the items of a drawn batch and finishes it."""
        with self._lock:
            self._read_pending(pending)
        if pending.error is not None:
            raise pending.error
        data = self._finish(pending.items, pending.info, pending.device)
        return data, pending.info, pending.ran_out, _ready_event(data)

    def _read_pending(self, pending: _Pending) -> None:
        """Reads the items of a drawn batch, once (under the lock)."""
        if pending.read:
            return
        pending.read = True
        self._unread.remove(pending)
        try:
            pending.items, pending.device = self._read(pending.index)
        except Exception as err:  # raised in the thread, hence by sample()
            pending.error = err

    def _read_ahead(self) -> None:
        """Reads the drawn batches whose items are not read yet (under the lock, before a write).

        A write must not change the items of a batch drawn before it: a prefetch thread may not
        have read them yet, so the writer reads them first.
        """
        for pending in list(self._unread):
            self._read_pending(pending)

    def _drain(self) -> None:
        """Drops the prefetched batches (waiting for those being sampled)."""
        futures = list(self._futures)
        self._futures.clear()
        for future in futures:
            future.cancel()
        wait_futures(futures)
        with self._lock:
            # Batches cancelled before a thread read them; those queued meanwhile stay.
            self._unread = [p for p in self._unread if p.future is None or not p.future.cancelled()]

    def _stop_prefetch_threads(self) -> None:
        """Drops the prefetched batches and stops the threads (a later sample starts new ones)."""
        self._drain()
        finalizer, self._finalizer, self._executor = self._finalizer, None, None
        if finalizer is not None:
            finalizer()

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Samples a batch.

        With ``prefetch=N`` and the buffer's ``batch_size``, the batch returned was drawn when an
        earlier call queued it (the first call draws N + 1 batches, every later call one more,
        in order): its items and weights are those of that time, and the transforms ran in a
        prefetch thread (a transform drawing random numbers from torch's global generator then
        races with the caller). Another ``batch_size`` is sampled now, after the queued ones.
        Batches on a CUDA device are made by the prefetch thread on its current stream; the
        caller's current stream waits for them before its next kernels.

        Args:
            batch_size: number of items; the buffer's ``batch_size`` when omitted.
            return_info: also return the sampler's information: ``"index"`` and, for prioritized
                samplers, the importance weights ``"_weight"``.

        Returns:
            The batch, or ``(batch, info)`` with ``return_info``.

        Raises:
            RuntimeError: the buffer is empty, or no batch size is known.
        """
        if batch_size is None:
            batch_size = self._batch_size
            if batch_size is None:
                raise RuntimeError(
                    "no batch size: pass sample(batch_size) or build the buffer with batch_size="
                )
        if self._prefetch and batch_size == self._batch_size:
            data, info, _ = self._sample_prefetched(batch_size)
        else:
            data, info, _ = self._sample_now(batch_size)
        self._sample_calls += 1
        self._samples_returned += batch_size
        return (data, info) if return_info else data

    def __iter__(self) -> Iterator[Any]:
        """Yields batches of ``batch_size``; stops after an epoch for samplers that have one."""
        if self._batch_size is None:
            raise RuntimeError("iterating over a replay buffer needs batch_size= at construction")
        sample = self._sample_prefetched if self._prefetch else self._sample_now
        while True:
            data, _, ran_out = sample(self._batch_size)
            self._sample_calls += 1
            self._samples_returned += self._batch_size
            yield data
            if ran_out:
                return

    def stats(self) -> dict[str, int]:
        """A cheap snapshot of the buffer's counters, for :class:`~torchrl.record.loggers.LoggerMonitor`.

        Returns:
            ``size`` (items stored), ``capacity`` (the storage's ``max_size``), ``write_count``
            (items written since the buffer was built or emptied, overwritten ones included),
            ``sample_calls`` and ``samples_returned`` (batches and items sampled, nominal batch
            sizes; cumulative).

        Examples:
            >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
            >>> _ = rb.extend(torch.arange(6))
            >>> _ = rb.sample()
            >>> rb.stats()
            {'size': 6, 'capacity': 10, 'write_count': 6, 'sample_calls': 1, 'samples_returned': 4}
        """
        return {
            "size": len(self),
            "capacity": int(self._storage.max_size),
            "write_count": int(getattr(self._writer, "_write_count", len(self))),
            "sample_calls": self._sample_calls,
            "samples_returned": self._samples_returned,
        }

    def __getitem__(self, index: Any) -> Any:
        with self._lock:
            idx = self._storage._check_index(index)
            data = self._storage.get(idx)
        if isinstance(data, list):
            data = self._collate_fn(data)
        if len(self._transforms):
            data = self._transforms(data)
        return data

    # -- priorities -------------------------------------------------------------------------------
    def update_priority(self, index: IndexLike, priority: float | torch.Tensor) -> None:
        """Sets the priority of stored items (prioritized samplers; ignored by the others).

        Args:
            index: item indices (``[B]``, ``[B, ndim]`` or a tuple for ``ndim > 1`` storages).
            priority: one priority per item, or a scalar.

        Raises:
            IndexError: an index names no stored item.
            ValueError: a priority is negative, NaN or infinite (nothing is updated).
        """
        with self._lock:
            idx = self._storage._check_index(index)
            self._sampler.update_priority(idx, priority, storage=self._storage)

    # -- lifecycle ---------------------------------------------------------------------------------
    def empty(self) -> None:
        """Removes every item, resets the sampler and the writer, and stops the prefetch threads.

        Prefetched batches are dropped; the next prefetched sample starts new threads.
        """
        # Drained outside the lock: a batch being sampled in the background needs the lock to
        # finish, and waiting for it while holding the lock would never end.
        self._stop_prefetch_threads()
        with self._lock:
            self._storage._empty()
            self._sampler._empty()
            self._writer._empty()

    def state_dict(self) -> dict[str, Any]:
        """The state of the storage (its data included), the sampler and the writer."""
        with self._lock:
            return {
                "storage": self._storage.state_dict(),
                "sampler": self._sampler.state_dict(),
                "writer": self._writer.state_dict(),
            }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned.

        The storage, sampler and writer states are all validated, alone and against each other
        (sizes, counters, written items), before any of them is applied.

        Raises:
            KeyError: a part is missing from ``state_dict``.
            ValueError, TypeError: a state does not fit this buffer; the buffer is unchanged.
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"a buffer state is a dict, got {type(state_dict).__name__}")
        missing = [k for k in ("storage", "sampler", "writer") if k not in state_dict]
        if missing:
            raise KeyError(f"the buffer state has no {', '.join(map(repr, missing))} entry")
        self._drain()
        with self._lock:
            plan = self._storage._prepare_state(state_dict["storage"])
            sampler_state = self._sampler._check_state(state_dict["sampler"], plan)
            writer_state = self._writer._check_state(state_dict["writer"], plan)
            self._storage._apply_state(plan)
            self._sampler._apply_state(sampler_state)
            self._writer._apply_state(writer_state)

    def register_save_hook(self, hook: Any) -> None:
        """Adds ``hook(data, path) -> data`` to the storage's checkpointer (see
        :meth:`Storage.register_save_hook`): it runs on the stored data before :meth:`dumps`
        writes it.

        Args:
            hook: a callable taking the data and the destination path, returning the data.
        """
        self._storage.register_save_hook(hook)

    def register_load_hook(self, hook: Any) -> None:
        """Adds ``hook(data, path) -> data`` to the storage's checkpointer: it runs on the data
        :meth:`loads` reads, before it is stored.

        Args:
            hook: a callable taking the data and the source path, returning the data.
        """
        self._storage.register_load_hook(hook)

    def dumps(self, path: str | Path) -> None:
        """Saves the whole buffer into the directory ``path``.

        The layout: ``storage/`` (the items; memory-mapped files for tensor storages),
        ``sampler.pt``, ``writer.pt``, and ``buffer.json`` written last, each through a temporary
        file and a rename.

        Args:
            path: a directory, created if needed.
        """
        path = Path(path)
        with self._lock:
            path.mkdir(parents=True, exist_ok=True)
            self._storage.dumps(path / "storage")
            atomic_torch_save(self._sampler.state_dict(), path / "sampler.pt")
            atomic_torch_save(self._writer.state_dict(), path / "writer.pt")
            atomic_write_json(
                path / "buffer.json",
                {
                    "format_version": FORMAT_VERSION,
                    "buffer": type(self).__name__,
                    "storage": type(self._storage).__name__,
                    "sampler": type(self._sampler).__name__,
                    "writer": type(self._writer).__name__,
                    "len": len(self),
                    "write_count": self.write_count,
                },
            )

    def loads(self, path: str | Path, *, trusted: bool = False) -> None:
        """Restores a buffer saved by :meth:`dumps` into this one (same component classes).

        A ``LazyMemmapStorage`` maps the saved files in place, without copying them (later writes
        go to those files); other storages copy the items into memory. Every file is read
        without running code from it: tensors, TensorDicts of tensors and plain Python values
        load; a dump holding other objects (a ``ListStorage`` of arbitrary items) needs
        ``trusted=True``. Everything is validated before the buffer changes.

        Args:
            path: the directory given to :meth:`dumps`.
            trusted: allow arbitrary pickled objects in the dump (warns: unpickling them can
                run any code; only for dumps you wrote yourself).

        Raises:
            ValueError: the saved buffer was made of other storage/sampler/writer classes or
                does not fit this buffer (nothing is changed).
            pickle.UnpicklingError: a file holds objects that need ``trusted=True``.
        """
        apply = self._prepare_load(Path(path), trusted)
        self._drain()
        with self._lock:
            apply()

    def _prepare_load(self, path: Path, trusted: bool) -> Callable[[], None]:
        """Reads and checks a dump (the buffer is unchanged); returns what installs it.

        The caller drains the prefetched batches before calling the result.
        """
        meta = read_json(path / "buffer.json")
        check_format_version(meta, path / "buffer.json")
        for part, obj in (
            ("storage", self._storage),
            ("sampler", self._sampler),
            ("writer", self._writer),
        ):
            if meta[part] != type(obj).__name__:
                raise ValueError(
                    f"{path} holds a buffer with a {meta[part]} {part}, but this buffer has a "
                    f"{type(obj).__name__}"
                )
        hint = "rb.loads(path, trusted=True)"
        sampler_state = safe_torch_load(path / "sampler.pt", trusted=trusted, hint=hint)
        writer_state = safe_torch_load(path / "writer.pt", trusted=trusted, hint=hint)
        with self._lock:
            plan = self._storage._prepare_dump(path / "storage", trusted)
            sampler_checked = self._sampler._check_state(sampler_state, plan)
            writer_checked = self._writer._check_state(writer_state, plan)

        def apply() -> None:
            with self._lock:
                self._storage._apply_dump(plan)
                self._sampler._apply_state(sampler_checked)
                self._writer._apply_state(writer_checked)

        return apply


class PrioritizedReplayBuffer(ReplayBuffer):
    """A :class:`ReplayBuffer` with a :class:`PrioritizedSampler` (prioritized experience replay).

    Args:
        alpha: prioritization exponent (0: uniform sampling).
        beta: importance-sampling exponent.
        eps: added to every priority.
        dtype: float type of the priority trees.
        storage: see :class:`ReplayBuffer` (its ``max_size`` sizes the trees).
        collate_fn: see :class:`ReplayBuffer`.
        pin_memory: see :class:`ReplayBuffer`.
        prefetch: see :class:`ReplayBuffer`.
        transform: see :class:`ReplayBuffer`.
        batch_size: see :class:`ReplayBuffer`.
        generator: see :class:`ReplayBuffer`.

    Examples:
        >>> rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.5)
        >>> rb.extend(torch.arange(4.0))
        tensor([0, 1, 2, 3])
        >>> rb.update_priority(torch.tensor([0, 1, 2, 3]), torch.tensor([0.0, 0.0, 0.0, 1.0]))
        >>> data, info = rb.sample(3, return_info=True)
        >>> data.tolist(), info["index"].tolist()
        ([3.0, 3.0, 3.0], [3, 3, 3])
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        storage: Storage | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        storage = storage if storage is not None else ListStorage(max_size=1000)
        super().__init__(
            storage=storage,
            sampler=PrioritizedSampler(_capacity(storage), alpha, beta, eps, dtype),
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            batch_size=batch_size,
            generator=generator,
        )


def _built(part: Any, cls: type, name: str) -> Any:
    """``part`` itself, or what it returns when it is a constructor (a class or a callable)."""
    if part is None or isinstance(part, cls):
        return part
    if callable(part):
        part = part()
        if not isinstance(part, cls):
            raise TypeError(
                f"{name}: the callable returned a {type(part).__name__}, not a {cls.__name__}"
            )
    return part


def _capacity(storage: Storage) -> int:
    capacity = storage._max_size
    if capacity >= 2**40:
        raise ValueError("prioritized sampling needs a storage with a bounded max_size")
    return capacity


class TensorDictReplayBuffer(ReplayBuffer):
    """A :class:`ReplayBuffer` of TensorDicts that writes ``"index"`` (and weights) into samples.

    Samples carry ``"index"`` (``[B]``, or ``[B, ndim]``) and, with a prioritized sampler, the
    importance weights ``"_weight"``, so that a loss can update priorities with
    :meth:`update_tensordict_priority`. Written TensorDicts get their ``"index"`` too, and their
    ``priority_key`` entry, when present, sets the priority of the new items.

    With ``views=[...]`` (:class:`~torchrl.data.trajectory_views.TrajectoryView` objects, e.g.
    ``get_views(policy)``), every sample gets the training views rebuilt from the stored
    single-step data (see :class:`~torchrl.data.trajectory_views.ViewBuilder`): neighbours are
    read along the storage's write dim, never across an episode start or the ring's wrap, and
    padded as each view says. Indexing the buffer (``rb[i]``) returns stored data only.

    Args:
        priority_key: the entry holding priorities (``"td_error"`` by default).
        views: trajectory views rebuilt on every sample, or a ``ViewBuilder`` (to set the
            trajectory-id, episode-start and done keys it reads); needs a tensor storage.
        **kwargs: the :class:`ReplayBuffer` arguments; the writer defaults to
            :class:`TensorDictRoundRobinWriter`.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data.replay_buffers.storages import LazyTensorStorage
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
        >>> _ = rb.extend(TensorDict({"obs": torch.arange(5.0)}, [5]))
        >>> sample = rb.sample()
        >>> bool((sample["obs"] == sample["index"].float()).all())
        True

        Views rebuilt from single-step data (here the last two observations of an episode;
        ``TrajectoryView`` comes from :mod:`torchrl.data.trajectory_views`):

        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=3,
        ...     views=[TrajectoryView("obs", "-1:0")])
        >>> done = torch.tensor([False, True, False, False]).unsqueeze(-1)
        >>> _ = rb.extend(TensorDict({"obs": torch.arange(1.0, 5.0), ("next", "done"): done}, [4]))
        >>> rb[torch.arange(4)].get("obs_view", None) is None  # nothing stacked is stored
        True
        >>> sample = rb.sample()
        >>> expected = torch.tensor([[0.0, 1.0], [1.0, 2.0], [0.0, 3.0], [3.0, 4.0]])
        >>> bool((sample["obs_view"] == expected[sample["index"]]).all())
        True
    """

    def __init__(
        self,
        *,
        priority_key: NestedKey = PRIORITY,
        views: Sequence[TrajectoryView] | ViewBuilder | None = None,
        **kwargs: Any,
    ) -> None:
        self.priority_key = priority_key
        super().__init__(**kwargs)
        self._view_builder: ViewBuilder | None = None
        if views is not None:
            if not isinstance(self._storage, TensorStorage):
                raise TypeError(
                    f"views need a tensor storage (LazyTensorStorage, LazyMemmapStorage, ...) "
                    f"to read neighbouring steps from, got {type(self._storage).__name__}"
                )
            self._view_builder = views if isinstance(views, ViewBuilder) else ViewBuilder(views)

    @property
    def view_builder(self) -> ViewBuilder | None:
        """What rebuilds the trajectory views of samples (``None`` without views)."""
        return self._view_builder

    def _rebuild_views(self, data: Any, index: Any) -> Any:
        if self._view_builder is None or not isinstance(data, TensorDictBase):
            return data
        storage = self._storage
        return self._view_builder(
            data, storage, index, cursor=storage._cursor, column=storage._column
        )

    def _default_writer(self) -> Writer:
        return TensorDictRoundRobinWriter()

    def _decorate(self, data: Any, info: dict[NestedKey, Any]) -> Any:
        if not isinstance(data, TensorDictBase):
            return data
        index = info[INDEX]
        if isinstance(index, tuple):
            index = torch.stack(index, -1)
        data.set(INDEX, index.to(data.device) if data.device is not None else index)
        weight = info.get(WEIGHT)
        if weight is not None:
            data.set(WEIGHT, weight.to(data.device) if data.device is not None else weight)
        return data

    def _prepare_write(self, data: Any) -> tuple[Any, Any]:
        data, _ = super()._prepare_write(data)
        if not isinstance(data, TensorDictBase):
            return data, None
        priorities = data.get(self.priority_key, None)
        check = getattr(self._sampler, "_check_priority", None)
        if check is None:
            check = getattr(getattr(self._sampler, "_prio", None), "_check_priority", None)
        if priorities is None or check is None:
            return data, None
        n = data.batch_size[: min(data.batch_dims, self._storage.ndim)].numel()
        # Validated now, before the write: bad priorities leave the buffer untouched.
        check(priorities.reshape(n, -1), n)
        return data, priorities

    def _after_write(self, index: Index, data: Any, priorities: Any) -> None:
        if priorities is None:
            return
        written = data.get(INDEX, None)
        if written is None:  # a custom writer: every item was written, in order
            self._sampler.update_priority(index, priorities, storage=self._storage)
            return
        ndim = self._storage.ndim
        written = written.reshape(-1) if ndim == 1 else written.reshape(-1, ndim)
        keep = written >= 0 if ndim == 1 else written[:, 0] >= 0
        prio = priorities.reshape(keep.shape[0], -1)
        self._sampler.update_priority(written[keep], prio[keep], storage=self._storage)

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Updates priorities from a sampled batch: its ``"index"`` and ``priority_key`` entries.

        Args:
            data: a batch returned by :meth:`sample`, with the priority entry set (e.g. by a
                loss). Padded items (``"mask"`` False) are skipped.
        """
        priority = data.get(self.priority_key, None)
        if priority is None:
            raise KeyError(
                f"the batch has no priority entry {nested_key_str(self.priority_key)}; set it "
                f"(e.g. from the loss) before updating priorities"
            )
        index = data.get(INDEX, None)
        if index is None:
            raise KeyError(
                f"the batch has no {INDEX!r} entry: pass a batch sampled from this buffer"
            )
        mask = data.get(MASK, None)
        if mask is not None:
            index, priority = index[mask], priority[mask]
        self.update_priority(index, priority)


class TensorDictPrioritizedReplayBuffer(TensorDictReplayBuffer):
    """A :class:`TensorDictReplayBuffer` with a :class:`PrioritizedSampler`.

    Samples carry ``"index"`` and the importance weights ``"_weight"``; after computing
    ``td[priority_key]`` (e.g. TD errors), call :meth:`update_tensordict_priority`.

    Args:
        alpha: prioritization exponent.
        beta: importance-sampling exponent.
        priority_key: the entry holding priorities.
        eps: added to every priority.
        storage: see :class:`ReplayBuffer` (its ``max_size`` sizes the trees).
        collate_fn: see :class:`ReplayBuffer`.
        pin_memory: see :class:`ReplayBuffer`.
        prefetch: see :class:`ReplayBuffer`.
        transform: see :class:`ReplayBuffer`.
        reduction: how multi-element priorities are reduced per item.
        batch_size: see :class:`ReplayBuffer`.
        generator: see :class:`ReplayBuffer`.
        dtype: float type of the priority trees.
        views: see :class:`TensorDictReplayBuffer`.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data.replay_buffers.storages import LazyTensorStorage
        >>> rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5,
        ...     storage=LazyTensorStorage(10), batch_size=4)
        >>> _ = rb.extend(TensorDict({"obs": torch.zeros(6, 2)}, [6]))
        >>> sample = rb.sample()
        >>> sample["td_error"] = torch.rand(4)
        >>> rb.update_tensordict_priority(sample)
        >>> sorted(sample.keys())
        ['_weight', 'index', 'obs', 'td_error']
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        priority_key: NestedKey = PRIORITY,
        eps: float = 1e-8,
        storage: Storage | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        reduction: str = "max",
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float,
        views: Sequence[TrajectoryView] | ViewBuilder | None = None,
    ) -> None:
        storage = storage if storage is not None else ListStorage(max_size=1000)
        super().__init__(
            priority_key=priority_key,
            views=views,
            storage=storage,
            sampler=PrioritizedSampler(_capacity(storage), alpha, beta, eps, dtype, reduction),
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            batch_size=batch_size,
            generator=generator,
        )


class RemoteTensorDictReplayBuffer(TensorDictReplayBuffer):
    """A :class:`TensorDictReplayBuffer` meant to be owned by one process and called over RPC.

    Build it in its owner with ``torch.distributed.rpc.remote(owner, RemoteTensorDictReplayBuffer,
    kwargs=...)`` and call its methods from any worker through the returned ``RRef``
    (``rref.rpc_sync().extend(td)``, ``rref.rpc_sync().sample(8)``), or locally as usual. RPC
    serves calls on a thread pool: every method holds the buffer's lock. Indices returned by
    :meth:`add` and :meth:`extend` are CPU tensors (or ints), which RPC sends without device maps;
    sampled data stays on the storage's device (give RPC a device map for CUDA storages).
    :class:`~torchrl.collectors.distributed.RPCReplayBuffer` hosts such a buffer for you.

    Args:
        **kwargs: the :class:`TensorDictReplayBuffer` arguments.

    Examples:
        >>> import torch.distributed.rpc as rpc  # doctest: +SKIP
        >>> rpc.init_rpc("trainer", rank=0, world_size=2)  # doctest: +SKIP
        >>> rref = rpc.remote(  # doctest: +SKIP
        ...     "trainer", RemoteTensorDictReplayBuffer, kwargs={"batch_size": 4})
        >>> # on the collector: rref.rpc_sync().extend(td); on the trainer: rref.local_value()
    """

    def add(self, data: Any) -> int | Index | None:
        index = super().add(data)
        return _on_cpu(index)

    def extend(self, data: Any) -> Index:
        index = super().extend(data)
        return _on_cpu(index)


def _on_cpu(index: Any) -> Any:
    if isinstance(index, torch.Tensor):
        return index.cpu()
    if isinstance(index, tuple):
        return tuple(i.cpu() if isinstance(i, torch.Tensor) else i for i in index)
    return index
