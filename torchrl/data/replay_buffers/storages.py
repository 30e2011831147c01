"""Storages: where a replay buffer keeps its items.

A storage answers ``get(index)``, ``set(index, data)``, ``len`` and saves its state. Storages with
``ndim > 1`` hold ``[*lead, T]`` data (for instance ``[n_envs, T]`` rollouts): writes go along the
last (time) dim, and an item is addressed by a tuple ``(lead..., t)``. Internally every item also has
a *flat* index, its row-major position in the full ``[*lead, slots]`` shape, which is what the
priority trees use.

Kinds: :class:`ListStorage` (any Python objects), :class:`TensorStorage` and
:class:`LazyTensorStorage` (preallocated tensors), :class:`LazyMemmapStorage` (memory-mapped files
that survive their process). The layout and on-disk helpers they share are in ``.utils``.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import MemoryMappedTensor, TensorDict, TensorDictBase, lazy_stack

from torchrl._types import IndexLike
from torchrl._utils import warn_once
from torchrl.data.replay_buffers.checkpointers import (
    CompressedListStorageCheckpointer,
    ListStorageCheckpointer,
    StorageCheckpointerBase,
    TensorStorageCheckpointer,
)
from torchrl.data.replay_buffers.compression import compress_item, decompress_item, default_codec
from torchrl.data.replay_buffers.utils import (
    FORMAT_VERSION,
    UNBOUNDED,
    Index,
    alloc_like,
    as_long_tensor,
    as_plain_tensors,
    atomic_torch_save,
    atomic_write_bytes,
    atomic_write_json,
    batch_shape,
    check_format_version,
    encode_header,
    make_gather_plan,
    nested_key_str,
    open_storage_dir,
    read_json,
    replace_dir,
    run_gather_plan,
    safe_torch_load,
    same_dir,
    split_index,
    tensor_leaves,
)

__all__ = [
    "CompressedListStorage",
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "ListStorage",
    "Storage",
    "TensorStorage",
    "numbers_as_tensor",
]


def numbers_as_tensor(data: Any) -> Any:
    """Turns a ``range``, a list/tuple of Python numbers or a number into a tensor, else no-op.

    Tensor storages hold tensors, so ``rb.extend(range(10))`` stores ``torch.arange(10)``, as
    in TorchRL.

    Args:
        data: the data to write.

    Returns:
        A tensor (1-dim, or 0-dim for a number; ``int64`` for ints, the default float dtype
        for floats, ``bool`` for bools), or ``data`` itself.

    Examples:
        >>> from torchrl.data.replay_buffers.storages import numbers_as_tensor
        >>> numbers_as_tensor(range(3)), numbers_as_tensor([0.5, 1])
        (tensor([0, 1, 2]), tensor([0.5000, 1.0000]))
    """
    if isinstance(data, (TensorDictBase, torch.Tensor)):
        return data
    if isinstance(data, range):
        return torch.arange(data.start, data.stop, data.step)
    if isinstance(data, (bool, int, float)):  # one item, for ``add``
        return torch.as_tensor(data)
    if (
        isinstance(data, (list, tuple))
        and data
        and all(isinstance(x, (bool, int, float)) for x in data)
    ):
        return torch.as_tensor(data)
    return data


@dataclass
class LoadPlan:
    """A checked storage state, ready to apply: the storage itself is still unchanged.

    ``filled`` (slots written along the write dim), ``slots`` and ``lead_numel`` describe the
    storage once the state is applied (``None`` when a custom storage cannot tell), so that the
    buffer can check its sampler's and writer's states against them before anything changes.
    """

    filled: int | None
    slots: int | None
    lead_numel: int | None
    payload: Any

    def written_flat(self) -> torch.Tensor | None:
        """The flat indices of the items that will be stored (``None`` when unknown)."""
        if self.filled is None or self.slots is None or self.lead_numel is None:
            return None
        t = torch.arange(self.filled)
        return (torch.arange(self.lead_numel)[:, None] * self.slots + t).reshape(-1)


def check_counters(filled: object, cursor: object, slots: int, what: str) -> tuple[int, int]:
    """Validates a saved ``(filled, cursor)`` pair against ``slots``; returns them as ints."""
    if not isinstance(filled, int) or isinstance(filled, bool) or not 0 <= filled <= slots:
        raise ValueError(f"{what}: the saved item count {filled!r} is not in [0, {slots}]")
    if not isinstance(cursor, int) or isinstance(cursor, bool) or not 0 <= cursor < max(slots, 1):
        raise ValueError(f"{what}: the saved write position {cursor!r} is not in [0, {slots})")
    return filled, cursor


class Storage(ABC):
    """Base class of the storages: a fixed number of slots that items are written into.

    Subclasses implement :meth:`get`, :meth:`set`, :meth:`_empty`, the state methods, and may
    hold ``ndim > 1`` data. ``len(storage)`` counts the items written so far.

    Args:
        max_size: the number of items the storage holds.
        ndim: the number of leading batch dims of the stored data; writes go along the last one.
        checkpointer: how :meth:`dumps`/:meth:`loads` save and read files (see
            :mod:`~torchrl.data.replay_buffers.checkpointers`); the class's default when ``None``.

    Examples:
        Every storage (here :class:`LazyTensorStorage`, which allocates on the first write)
        is written and read by index:

        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, Storage
        >>> storage = LazyTensorStorage(max_size=4)
        >>> isinstance(storage, Storage)
        True
        >>> storage.set(torch.arange(3), TensorDict({"obs": torch.ones(3, 2)}, [3]))
        >>> len(storage), storage.max_size
        (3, 4)
        >>> storage.get(torch.tensor([0, 2]))["obs"].shape
        torch.Size([2, 2])
    """

    def __init__(
        self,
        max_size: int | None,
        *,
        ndim: int = 1,
        checkpointer: StorageCheckpointerBase | None = None,
    ) -> None:
        if max_size is not None and (not isinstance(max_size, int) or max_size <= 0):
            raise ValueError(f"max_size must be a positive int, got {max_size!r}")
        if not isinstance(ndim, int) or ndim < 1:
            raise ValueError(f"ndim must be a positive int, got {ndim!r}")
        self._max_size = UNBOUNDED if max_size is None else max_size
        self.ndim = ndim
        self._lead: torch.Size | None = torch.Size([]) if ndim == 1 else None
        # Occupied slots along the write dim, the slot after the last write (ring order), and a
        # counter bumped on every change so that samplers can cache what they derive from data.
        self._filled = 0
        self._cursor = 0
        self._version = 0
        self._checkpointer: StorageCheckpointerBase | None = (
            self._default_checkpointer() if checkpointer is None else None
        )
        if checkpointer is not None:
            self.checkpointer = checkpointer

    #: What the checkpointers know this storage as ("list", "tensor", ...); None: custom.
    _checkpoint_kind: str | None = None

    def _default_checkpointer(self) -> StorageCheckpointerBase | None:
        return None

    # -- sizes ------------------------------------------------------------------------------
    @property
    def max_size(self) -> int:
        """The number of items the storage can hold."""
        if self._lead is not None and self.ndim > 1:
            return self._lead.numel() * self.slots
        return self._max_size

    @property
    def slots(self) -> int:
        """Write positions along the write (last batch) dim: ``max_size // prod(lead dims)``."""
        if self.ndim == 1:
            return self._max_size
        if self._lead is None:
            raise RuntimeError("the storage shape is unknown until the first write")
        return self._max_size // self._lead.numel()

    @property
    def shape(self) -> torch.Size:
        """The batch shape of the stored items: ``[*lead, filled]``."""
        lead = self._lead if self._lead is not None else torch.Size([])
        return torch.Size([*lead, self._filled])

    def __len__(self) -> int:
        if self._lead is None:
            return 0
        return self._lead.numel() * self._filled

    @property
    def _lead_shape(self) -> torch.Size:
        """The leading dims ``[*lead]`` (known after the first write for ``ndim > 1``)."""
        if self._lead is None:
            raise RuntimeError("the storage shape is unknown until the first write")
        return self._lead

    def _lead_numel(self) -> int:
        return 1 if self._lead is None else self._lead.numel()

    def _slots_for(self, data: Any) -> int:
        """The slot count once ``data`` (``[*lead, n, ...]``) sets the shape of a lazy storage."""
        if self.ndim == 1 or self._lead is not None:
            return self.slots
        lead = torch.Size(batch_shape(data)[: self.ndim - 1])
        slots = self._max_size // max(lead.numel(), 1)
        if slots == 0:
            raise ValueError(
                f"max_size={self._max_size} is smaller than the {lead.numel()} rows of the "
                f"first batch of shape {tuple(lead)}: no time slot fits"
            )
        return slots

    def _write_len(self, data: Any) -> int:
        """How many slots along the write dim ``data`` covers."""
        shape = batch_shape(data)
        if len(shape) < self.ndim:
            raise ValueError(
                f"extend expects data with at least {self.ndim} batch dims (the storage has "
                f"ndim={self.ndim}), got batch shape {tuple(shape)}"
            )
        return int(shape[self.ndim - 1])

    # -- index conversions --------------------------------------------------------------------
    def _index_to_flat(self, index: Any) -> torch.Tensor:
        """Row-major position in ``[*lead, slots]`` of each item of ``index``."""
        if self.ndim == 1:
            return as_long_tensor(index)
        parts = split_index(index, self.ndim)
        dims = [*self._lead_shape, self.slots]
        flat = parts[0]
        for part, size in zip(parts[1:], dims[1:]):
            flat = flat * size + part
        return flat

    def _flat_to_index(self, flat: torch.Tensor) -> Index:
        """The inverse of :meth:`_index_to_flat`: a tensor for ``ndim == 1``, else a tuple."""
        if self.ndim == 1:
            return flat
        dims = [*self._lead_shape, self.slots]
        parts = []
        for size in reversed(dims[1:]):
            parts.append(flat % size)
            flat = torch.div(flat, size, rounding_mode="floor")
        parts.append(flat)
        return tuple(reversed(parts))

    def _dense_to_index(self, dense: torch.Tensor) -> Index:
        """Maps ``dense`` in ``[0, len(self))`` onto stored items (uniform sampling uses it)."""
        if self.ndim == 1:
            return dense
        n_lead = self._lead_numel()
        t = torch.div(dense, n_lead, rounding_mode="floor")
        return self._flat_to_index((dense % n_lead) * self.slots + t)

    def _item_index(self, slot_index: torch.Tensor) -> Index:
        """The item index of every item written at ``slot_index`` (``[n]`` or ``[*lead, n]``)."""
        if self.ndim == 1:
            return slot_index
        lead = self._lead_shape
        grids = torch.meshgrid(
            *[torch.arange(s) for s in lead], slot_index.reshape(-1), indexing="ij"
        )
        return tuple(grids)

    def _check_index(self, index: Any) -> Index:
        """Normalizes a user index and checks that every item it names is stored.

        Ints and 1-D indices may be negative (counted from the end) for ``ndim == 1``.
        """
        n = len(self)
        if self.ndim == 1:
            if isinstance(index, slice):
                return torch.arange(n)[index]
            if isinstance(index, int):
                if not -n <= index < n:
                    raise IndexError(f"index {index} is out of range for {n} stored items")
                return torch.tensor(index % n)
            idx = as_long_tensor(index)
            if idx.numel() == 0:
                return idx
            # One min/max pass (numpy on CPU: cheaper than torch for a few hundred items).
            values = idx.numpy() if idx.device.type == "cpu" else idx
            low, high = int(values.min()), int(values.max())
            if low < -n or high >= n:
                bad = low if low < -n else high
                raise IndexError(f"index {bad} is out of range for {n} stored items")
            return idx if low >= 0 else torch.where(idx < 0, idx + n, idx)
        parts = split_index(index, self.ndim)
        dims = [*(self._lead or ()), self._filled]
        for d, (part, size) in enumerate(zip(parts, dims)):
            if part.numel() and (bool((part < 0).any()) or bool((part >= size).any())):
                bad_value = int(part[(part < 0) | (part >= size)][0])
                raise IndexError(
                    f"index {bad_value} along dim {d} is out of range for stored items of shape "
                    f"{tuple(dims)}"
                )
        return tuple(parts)

    def _note_write(self, slot_index: int | slice | torch.Tensor) -> None:
        if isinstance(slot_index, int):
            last = slot_index
        elif isinstance(slot_index, slice):
            last = slot_index.stop - 1
        else:
            if slot_index.numel() == 0:
                return
            last = int(slot_index.reshape(-1)[-1])
            top = int(slot_index.max())
            self._filled = max(self._filled, top + 1)
        self._filled = max(self._filled, last + 1)
        self._cursor = (last + 1) % self.slots
        self._version += 1

    # -- interface ------------------------------------------------------------------------------
    @abstractmethod
    def get(self, index: IndexLike) -> Any:
        """Reads the items at ``index`` (no range check: samplers give valid indices)."""

    def _get_kept(self, index: IndexLike) -> tuple[Any, torch.device | None]:
        """The items at ``index`` where they are kept, and the device :meth:`get` sends them to.

        A buffer reads through this under its lock and moves the batch (after pinning it, when
        asked) outside the lock. ``None``: :meth:`get` returns the items where they are.
        """
        return self.get(index), None

    @abstractmethod
    def set(self, index: int | slice | torch.Tensor, data: Any) -> None:
        """Writes ``data`` at the slots ``index`` along the write dim, after validating it."""

    @abstractmethod
    def _empty(self) -> None:
        """Forgets every item (memory stays allocated)."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The content and counters of the storage."""

    @abstractmethod
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned."""

    # -- files: through the storage's checkpointer ----------------------------------------------
    @property
    def checkpointer(self) -> StorageCheckpointerBase | None:
        """How :meth:`dumps` and :meth:`loads` write and read files (settable).

        Each storage class has a default (its own format); ``None`` for a custom storage that
        overrides :meth:`dumps` and :meth:`loads` itself.
        """
        return self._checkpointer

    @checkpointer.setter
    def checkpointer(self, value: StorageCheckpointerBase | None) -> None:
        if value is not None and not isinstance(value, StorageCheckpointerBase):
            raise TypeError(
                f"checkpointer must be a StorageCheckpointerBase, got {type(value).__name__}"
            )
        self._checkpointer = value

    def _own_checkpointer(self, what: str) -> StorageCheckpointerBase:
        if self._checkpointer is None:
            raise NotImplementedError(
                f"{type(self).__name__} has no checkpointer: set storage.checkpointer or "
                f"override {what}"
            )
        return self._checkpointer

    def register_save_hook(self, hook: Any) -> None:
        """Adds ``hook(data, path) -> data`` to the :attr:`checkpointer`, run before writing.

        Args:
            hook: a callable taking the data and the destination path, returning the data.
        """
        self._own_checkpointer("register_save_hook").register_save_hook(hook)

    def register_load_hook(self, hook: Any) -> None:
        """Adds ``hook(data, path) -> data`` to the :attr:`checkpointer`, run after reading.

        Args:
            hook: a callable taking the data and the source path, returning the data.
        """
        self._own_checkpointer("register_load_hook").register_load_hook(hook)

    def dumps(self, path: str | Path) -> None:
        """Saves the storage into ``path`` (a directory) with its :attr:`checkpointer`.

        Args:
            path: where to write; created if needed.
        """
        self._own_checkpointer("dumps").dumps(self, Path(path))

    def loads(self, path: str | Path, *, trusted: bool = False) -> None:
        """Restores the storage saved by :meth:`dumps` in ``path``, with its :attr:`checkpointer`.

        Args:
            path: where :meth:`dumps` wrote.
            trusted: allow unpickling arbitrary objects (only for files you wrote yourself);
                tensors, TensorDicts of tensors and plain Python values load without it.

        Raises:
            ValueError: the saved storage does not fit this one (nothing is changed).
            pickle.UnpicklingError: the files hold objects that need ``trusted=True``.
        """
        self._own_checkpointer("loads")
        self._apply_dump(self._prepare_dump(Path(path), trusted))

    # The built-in file format of a storage class, used by its default checkpointer. ``hooks``
    # are the checkpointer's save or load hooks, ``hook(data, path) -> data``.
    def _native_dumps(self, path: Path, hooks: list[Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no built-in file format")

    def _native_prepare(self, path: Path, trusted: bool, hooks: list[Any]) -> LoadPlan:
        raise NotImplementedError(f"{type(self).__name__} has no built-in file format")

    def _native_apply(self, plan: LoadPlan) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no built-in file format")

    # State loading is split in two so that a buffer can check the states of all its parts
    # before it changes any: _prepare_* validate and change nothing, _apply_* cannot fail on
    # validated input. Custom storages fall back to their own load_state_dict / loads.
    def _prepare_state(self, state_dict: dict[str, Any]) -> LoadPlan:
        return LoadPlan(None, None, None, state_dict)

    def _apply_state(self, plan: LoadPlan) -> None:
        self.load_state_dict(plan.payload)

    def _prepare_dump(self, path: Path, trusted: bool) -> LoadPlan:
        checkpointer = self._checkpointer
        if checkpointer is None:
            # A custom storage with its own loads: nothing can be checked ahead of time.
            return LoadPlan(None, None, None, (None, (path, trusted)))
        prepared = checkpointer.prepare_load(self, path, trusted)
        if isinstance(prepared, LoadPlan):
            return LoadPlan(
                prepared.filled, prepared.slots, prepared.lead_numel, (checkpointer, prepared)
            )
        return LoadPlan(None, None, None, (checkpointer, prepared))

    def _apply_dump(self, plan: LoadPlan) -> None:
        checkpointer, prepared = plan.payload
        if checkpointer is None:
            path, trusted = prepared
            if type(self).loads is Storage.loads:
                raise NotImplementedError(
                    f"{type(self).__name__} has no checkpointer and does not override loads"
                )
            # A custom loads may predate the trusted keyword: pass it only when it is set.
            if trusted:
                self.loads(path, trusted=True)
            else:
                self.loads(path)
            return
        checkpointer.apply_load(self, prepared)

    def _column(self, key: Any) -> torch.Tensor:
        """The stored values of ``key`` for all slots, shape ``[*lead, slots, ...]``."""
        raise NotImplementedError(f"{type(self).__name__} cannot read a column of its items")

    def __getitem__(self, index: Any) -> Any:
        return self.get(self._check_index(index))

    def __setitem__(self, index: Any, data: Any) -> None:
        self.set(as_long_tensor(index) if not isinstance(index, (int, slice)) else index, data)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_size={self.max_size}, len={len(self)})"


# ---------------------------------------------------------------------------------------------
# ListStorage
# ---------------------------------------------------------------------------------------------


class ListStorage(Storage):
    """Keeps any Python objects in a list.

    Extending with a TensorDict or a tensor stores one item per element of its first dim. Items are
    kept by reference (no copy), where they are unless ``device`` is given. Sampling returns a list
    that the buffer's ``collate_fn`` batches.

    Args:
        max_size: the most items kept; ``None`` means unbounded.
        compilable: accepted for TorchRL compatibility; it changes nothing here.
        device: where tensors and TensorDicts are moved on write (``None``: left where they
            are; other objects are never moved).

    Examples:
        >>> storage = ListStorage(max_size=3)
        >>> storage.set(torch.arange(2), ["a", {"b": 1}])
        >>> len(storage), storage.get(1)
        (2, {'b': 1})
        >>> storage = ListStorage(max_size=3, device="meta")
        >>> storage.set(0, torch.zeros(2))
        >>> storage.get(0).device
        device(type='meta')
    """

    def __init__(
        self,
        max_size: int | None = None,
        *,
        compilable: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(max_size, ndim=1)
        self._items: list[Any] = []
        # Kept apart from ``device``, which subclasses set to where they return items.
        self._write_device = torch.device(device) if device is not None else None
        self.device: torch.device | None = self._write_device

    def _placed(self, data: Any) -> Any:
        """``data`` moved to the storage's ``device`` (tensors and TensorDicts only)."""
        device = self._write_device
        if device is None or not isinstance(data, (TensorDictBase, torch.Tensor)):
            return data
        return data.to(device)

    def _as_items(self, data: Any, n: int) -> list[Any]:
        if isinstance(data, (TensorDictBase, torch.Tensor)):
            if data.ndim == 0 or data.shape[0] != n:
                raise ValueError(
                    f"got {n} indices but data with batch shape {tuple(batch_shape(data))}"
                )
            return list(self._placed(data).unbind(0))
        items = [self._placed(item) for item in data]
        if len(items) != n:
            raise ValueError(f"got {n} indices but {len(items)} items")
        return items

    def set(self, index: int | slice | torch.Tensor, data: Any) -> None:
        if isinstance(index, int):
            idx, items = [index], [self._placed(data)]
        else:
            if isinstance(index, slice):
                index = torch.arange(index.start, index.stop)
            idx = as_long_tensor(index).reshape(-1).tolist()
            items = self._as_items(data, len(idx))
        # Validate every index before touching the list, so a bad call changes nothing.
        size = len(self._items)
        for i in idx:
            if i < 0 or i >= self._max_size:
                raise IndexError(f"index {i} is out of range for a storage of {self._max_size}")
        new_size = max([size, *(i + 1 for i in idx)])
        if new_size > size and not set(range(size, new_size)) <= set(idx):
            raise IndexError(
                f"cannot write indices {sorted(set(idx))}: the storage holds {size} items and "
                f"writes past its end must fill every slot up to the last one"
            )
        self._items.extend([None] * (new_size - size))
        for i, item in zip(idx, items):
            self._items[i] = item
        self._filled = len(self._items)
        if idx:
            self._cursor = (idx[-1] + 1) % self._max_size
        self._version += 1

    def get(self, index: IndexLike) -> Any:
        if isinstance(index, int):
            return self._items[index]
        if isinstance(index, torch.Tensor) and index.ndim == 0:
            return self._items[int(index)]
        if isinstance(index, slice):
            return self._items[index]
        items = self._items
        return [items[i] for i in as_long_tensor(index).reshape(-1).tolist()]

    def _column(self, key: Any) -> torch.Tensor:
        if not self._items:
            return torch.zeros(0, dtype=torch.bool)
        first = self._items[0]
        if not isinstance(first, TensorDictBase):
            raise TypeError(f"ListStorage items are {type(first).__name__}, not TensorDicts")
        values = [item.get(key, None) for item in self._items]
        if any(v is None for v in values):
            raise KeyError(f"key {nested_key_str(key)} is missing from some stored items")
        return torch.stack(values)

    def _empty(self) -> None:
        self._items = []
        self._filled = 0
        self._cursor = 0
        self._version += 1

    def state_dict(self) -> dict[str, Any]:
        return {
            "items": list(self._items),
            "cursor": self._cursor,
            "max_size": None if self._max_size == UNBOUNDED else self._max_size,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores a :meth:`state_dict`; a state of another ``max_size`` is refused.

        Raises:
            ValueError: the state does not fit this storage (nothing is changed).
        """
        self._apply_state(self._prepare_state(state_dict))

    def _prepare_state(self, state_dict: dict[str, Any]) -> LoadPlan:
        if not isinstance(state_dict, dict) or "items" not in state_dict:
            raise ValueError("a ListStorage state is a dict with an 'items' list")
        items = [self._placed(item) for item in state_dict["items"]]
        mine = None if self._max_size == UNBOUNDED else self._max_size
        if "max_size" in state_dict and state_dict["max_size"] != mine:
            raise ValueError(
                f"the state comes from a ListStorage of max_size={state_dict['max_size']} "
                f"(holding {len(items)} items), which cannot be loaded into one of "
                f"max_size={mine}: its write position would not match"
            )
        if len(items) > self._max_size:
            raise ValueError(f"{len(items)} items do not fit in max_size={self._max_size}")
        cursor = state_dict.get("cursor", len(items) % self._max_size)
        _, cursor = check_counters(len(items), cursor, self._max_size, "ListStorage")
        return LoadPlan(len(items), self._max_size, 1, (items, cursor))

    def _apply_state(self, plan: LoadPlan) -> None:
        items, cursor = plan.payload
        self._items = items
        self._filled = len(items)
        self._cursor = cursor
        self._version += 1

    _checkpoint_kind = "list"

    def _default_checkpointer(self) -> StorageCheckpointerBase | None:
        return ListStorageCheckpointer()

    def _native_dumps(self, path: Path, hooks: list[Any]) -> None:
        path.mkdir(parents=True, exist_ok=True)
        state = self.state_dict()
        items = state["items"]
        for hook in hooks:
            items = hook(items, path)
        state["items"] = [_encode_item(item) for item in items]
        atomic_torch_save(state, path / "items.pt")
        atomic_write_json(
            path / "storage.json",
            {
                "format_version": FORMAT_VERSION,
                "kind": "list",
                "class": type(self).__name__,
                "max_size": None if self._max_size == UNBOUNDED else self._max_size,
            },
        )

    def _native_prepare(self, path: Path, trusted: bool, hooks: list[Any]) -> LoadPlan:
        meta = read_json(path / "storage.json")
        check_format_version(meta, path / "storage.json")
        if meta["kind"] != "list":
            raise ValueError(f"{path} holds a {meta['class']}, which a ListStorage cannot load")
        state = safe_torch_load(
            path / "items.pt", trusted=trusted, hint="loads(path, trusted=True)"
        )
        if not isinstance(state, dict) or not isinstance(state.get("items"), list):
            raise ValueError(f"{path / 'items.pt'} does not hold a ListStorage state")
        items = [_decode_item(item) for item in state["items"]]
        for hook in hooks:
            items = hook(items, path)
        return self._prepare_state(dict(state, items=list(items)))

    def _native_apply(self, plan: LoadPlan) -> None:
        self._apply_state(plan)


# A TensorDict item saved as plain containers, so that safe loading (weights_only) reads it.
_TD_MARK = "__torchrl_tensordict__"


def _encode_item(item: Any) -> Any:
    if type(item) is TensorDict:
        try:
            tensor_leaves(item)  # raises on non-tensor entries: those stay pickled
        except TypeError:
            return item
        return {
            _TD_MARK: {
                "data": item.to_dict(),
                "batch_size": list(item.batch_size),
                "device": None if item.device is None else str(item.device),
            }
        }
    return item


def _decode_item(item: Any) -> Any:
    if isinstance(item, dict) and len(item) == 1 and _TD_MARK in item:
        saved = item[_TD_MARK]
        return TensorDict(saved["data"], batch_size=saved["batch_size"], device=saved["device"])
    return item


# ---------------------------------------------------------------------------------------------
# Tensor storages
# ---------------------------------------------------------------------------------------------


def _check_fits(name: str, value: torch.Tensor, dtype: torch.dtype) -> None:
    """Raises when a value of ``value`` would change once cast to ``dtype`` (overflow, wrap).

    Only conversions that can change a value are checked (narrower ints, signed to unsigned,
    float64 to float32 overflow, ints to float16): the common same-dtype write costs nothing.
    Rounding a float to a narrower float is accepted; overflowing it to infinity is not.
    """
    src = value.dtype
    if src == torch.bool or value.numel() == 0 or dtype.is_complex or src.is_complex:
        return
    bad: torch.Tensor | None = None
    if dtype == torch.bool:
        bad = (value != 0) & (value != 1)
        low, high = 0, 1
    elif not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        low, high = info.min, info.max
        if src.is_floating_point:
            bad = ~torch.isfinite(value) | (value != value.trunc()) | (value < low) | (value > high)
        else:
            source = torch.iinfo(src)
            if source.min >= low and source.max <= high:
                return
            lo, hi = torch.aminmax(value)
            if int(lo) >= low and int(hi) <= high:
                return
            bad = (value < low) | (value > high)
    else:
        finfo = torch.finfo(dtype)
        low, high = -finfo.max, finfo.max  # type: ignore[assignment]
        top = torch.finfo(src).max if src.is_floating_point else torch.iinfo(src).max
        if top <= finfo.max:
            return
        lo, hi = torch.aminmax(value)
        if low <= float(lo) and float(hi) <= high:  # one reduction; NaN or inf fail it
            return
        bad = (value > high) | (value < low)
        if src.is_floating_point:
            bad &= torch.isfinite(value)  # infinities stay infinities
    if bad is not None and bool(bad.any()):
        offending = value[bad].reshape(-1)[0].item()
        raise ValueError(
            f"entry {name}: the value {offending} (dtype {src}) does not fit the stored dtype "
            f"{dtype} (range [{low}, {high}]"
            f"{', integers only' if not dtype.is_floating_point else ''}); nothing was written"
        )


class TensorStorage(Storage):
    """Keeps items in preallocated tensors: a TensorDict (nested allowed) or a single tensor.

    Wrapping an existing TensorDict or tensor makes all its items count as stored; the next write
    overwrites the oldest (index 0 first). Sampling indexes every stored tensor once.

    Args:
        storage: the TensorDict or tensor to wrap, of batch shape ``[*lead, slots]``; ``None`` for
            a lazy storage that allocates on its first write (see :class:`LazyTensorStorage`).
        max_size: the capacity; taken from ``storage`` when it is given.
        device: where items are kept (and returned); the wrapped data's device by default.
        ndim: leading batch dims of an item batch: ``2`` for ``[n_envs, T]`` data, written along T.

    Examples:
        >>> from tensordict import TensorDict
        >>> data = TensorDict({"obs": torch.arange(4.0)}, batch_size=[4])
        >>> storage = TensorStorage(data)
        >>> len(storage), storage.get(torch.tensor([3, 0]))["obs"].tolist()
        (4, [3.0, 0.0])
    """

    def __init__(
        self,
        storage: TensorDictBase | torch.Tensor | None = None,
        max_size: int | None = None,
        *,
        device: torch.device | str | None = None,
        ndim: int = 1,
    ) -> None:
        if storage is not None:
            shape = batch_shape(storage)
            if len(shape) < ndim:
                raise ValueError(f"ndim={ndim} but the storage has batch shape {tuple(shape)}")
            size = shape[:ndim].numel()
            if max_size is not None and max_size != size:
                raise ValueError(f"max_size={max_size} but the storage holds {size} items")
            max_size = size
        if max_size is None:
            raise ValueError("max_size is required when no storage is given")
        super().__init__(max_size, ndim=ndim)
        self._device = torch.device(device) if device is not None else None
        self._storage: TensorDictBase | torch.Tensor | None = None
        if storage is not None:
            if self._device is not None and storage.device != self._device:
                storage = storage.to(self._device)
            self._adopt(storage)
            self._filled = self.slots
            self._cursor = 0

    # -- allocation -------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """Where the items live."""
        if self._device is not None:
            return self._device
        return torch.device("cpu")

    @property
    def initialized(self) -> bool:
        """Whether the storage tensors exist (lazy storages allocate on the first write)."""
        return self._storage is not None

    def _adopt(self, storage: TensorDictBase | torch.Tensor) -> None:
        """Makes ``storage`` (batch ``[*lead, slots]``) the backing data and prepares fast access."""
        shape = batch_shape(storage)
        self._lead = torch.Size(shape[: self.ndim - 1])
        self._storage = storage
        self._is_td = isinstance(storage, TensorDictBase)
        nb = self.ndim
        if isinstance(storage, TensorDictBase):
            leaves = tensor_leaves(storage)
        else:
            leaves = [((), storage)]
        # Keys as tensordict spells them: a str at the root, a tuple below.
        self._layout = {
            (key[0] if len(key) == 1 else key): (tuple(v.shape[nb:]), v.dtype) for key, v in leaves
        }
        # Flat views [n_items, *tail] share memory with the storage: one index_select per leaf
        # serves a whole sample, whatever ndim is.
        numel = shape[:nb].numel()
        self._write_leaves = leaves
        self._flat_leaves: list[tuple[tuple[str, ...], torch.Tensor]] | None
        self._plan: list[tuple[str, Any, Any]] | None
        try:
            self._flat_leaves = [(key, v.view(numel, *v.shape[nb:])) for key, v in leaves]
            self._plan = (
                make_gather_plan(storage, numel, nb)
                if isinstance(storage, TensorDictBase)
                else None
            )
        except RuntimeError:
            self._flat_leaves = None
        if self._device is None:
            self._device = leaves[0][1].device if leaves else torch.device("cpu")

    def _allocate(self, data: TensorDictBase | torch.Tensor) -> None:
        shape = batch_shape(data)
        nb = self.ndim
        lead = torch.Size(shape[: nb - 1])
        slots = self._slots_for(data)
        batch = torch.Size([*lead, slots])
        device = self._device if self._device is not None else torch.device("cpu")
        storage: TensorDictBase | torch.Tensor
        if isinstance(data, TensorDictBase):
            storage = alloc_like(data, batch, nb, device, fill=True)
        else:
            storage = torch.zeros((*batch, *data.shape[nb:]), dtype=data.dtype, device=device)
        self._adopt(storage)

    # -- validation -------------------------------------------------------------------------------
    def _validate(self, data: Any, batch: tuple[int, ...]) -> None:
        nb = len(batch)
        if self._is_td:
            if not isinstance(data, TensorDictBase):
                raise TypeError(f"this storage holds TensorDicts, got {type(data).__name__}")
            keys = set(data.keys(True, True))
            expected = self._layout.keys()
            if keys != expected:
                missing = ", ".join(sorted(nested_key_str(k) for k in expected - keys)) or "none"
                extra = ", ".join(sorted(nested_key_str(k) for k in keys - expected)) or "none"
                raise KeyError(
                    f"the data's keys differ from the storage's layout: missing {missing}; "
                    f"unexpected {extra}"
                )
            items = [(key, data.get(key)) for key in expected]
        else:
            if not isinstance(data, torch.Tensor):
                raise TypeError(f"this storage holds tensors, got {type(data).__name__}")
            items = [((), data)]
        for key, value in items:
            tail, dtype = self._layout[key]
            name = nested_key_str(key) if key else "the data"
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"entry {name} is a {type(value).__name__}, expected a tensor")
            if tuple(value.shape[:nb]) != batch or tuple(value.shape[nb:]) != tail:
                raise ValueError(
                    f"entry {name} has shape {tuple(value.shape)} but the storage expects "
                    f"{(*batch, *tail)} (batch {batch} + item shape {tail})"
                )
            if value.dtype != dtype:
                if not torch.can_cast(value.dtype, dtype):
                    raise TypeError(
                        f"entry {name} has dtype {value.dtype}, which cannot be stored as {dtype}"
                    )
                _check_fits(name, value, dtype)

    # -- read / write -----------------------------------------------------------------------------
    def set(self, index: int | slice | torch.Tensor, data: TensorDictBase | torch.Tensor) -> None:
        data = numbers_as_tensor(data)
        nb = self.ndim
        if self._storage is None:
            # One item (int index) lacks the write dim that the allocation reads.
            self._allocate(data.unsqueeze(nb - 1) if isinstance(index, int) else data)
        lead = tuple(self._lead_shape)
        slots = self.slots
        if isinstance(index, int):
            if not 0 <= index < slots:
                raise IndexError(f"slot {index} is out of range for {slots} slots")
            batch = lead
        elif isinstance(index, slice):
            start, stop, step = index.indices(slots)
            if step != 1 or index.stop > slots or start >= stop:
                raise IndexError(f"slice {index} is not a valid range of {slots} slots")
            batch = (*lead, stop - start)
            index = slice(start, stop)
        else:
            index = as_long_tensor(index).reshape(-1)
            if index.numel() and (int(index.min()) < 0 or int(index.max()) >= slots):
                raise IndexError(f"slot indices must be in [0, {slots}), got {index.tolist()}")
            batch = (*lead, index.numel())
        self._validate(data, batch)
        self._write(index, data, nb)
        self._note_write(index)

    def _write(self, index: int | slice | torch.Tensor, data: Any, nb: int) -> None:
        dim = nb - 1
        if isinstance(index, torch.Tensor) and index.device != self.device:
            index = index.to(self.device)
        for key, dst in self._write_leaves:
            src = data.get(key) if key else data
            if src.dtype != dst.dtype or src.device != dst.device:
                src = src.to(device=dst.device, dtype=dst.dtype)
            if isinstance(index, int):
                dst.select(dim, index).copy_(src)
            elif isinstance(index, slice):
                dst.narrow(dim, index.start, index.stop - index.start).copy_(src)
            else:
                dst.index_copy_(dim, index, src)

    def get(self, index: IndexLike) -> TensorDictBase | torch.Tensor:
        if self._storage is None:
            raise RuntimeError("the storage is empty: nothing was written to it yet")
        scalar = False
        if self.ndim == 1:
            if isinstance(index, int):
                index, scalar = torch.tensor([index]), True
            elif isinstance(index, slice):
                index = torch.arange(self._filled)[index]
            flat = as_long_tensor(index)
            if flat.ndim == 0:
                flat, scalar = flat.reshape(1), True
        else:
            flat = self._index_to_flat(index)
        out_shape = flat.shape
        flat = flat.reshape(-1)
        out: Any
        if flat.device != self.device:
            flat = flat.to(self.device, non_blocking=True)
        if self._flat_leaves is None:
            out = self._storage[self._flat_to_index(flat)]
        elif self._is_td:
            out = self._gather_td(flat)
        else:
            out = torch.index_select(self._flat_leaves[0][1], 0, flat)
        if scalar:
            return out[0]
        if out_shape != flat.shape:
            out = (
                out.reshape(*out_shape, *out.shape[1:])
                if not self._is_td
                else out.reshape(out_shape)
            )
        return out

    def _gather_td(self, flat: torch.Tensor) -> TensorDict:
        batch = torch.Size([flat.shape[0]])
        assert self._plan is not None
        return run_gather_plan(self._plan, flat, batch, batch, self.device)

    def _column(self, key: Any) -> torch.Tensor:
        if self._storage is None:
            return torch.zeros(0, dtype=torch.bool)
        if not isinstance(self._storage, TensorDictBase):
            raise TypeError("this storage holds plain tensors: it has no keys")
        value = self._storage.get(key, None)
        if value is None:
            raise KeyError(
                f"key {nested_key_str(key)} is not stored; stored keys: "
                f"{', '.join(sorted(nested_key_str(k) for k in self._layout))}"
            )
        return value

    def _empty(self) -> None:
        self._filled = 0
        self._cursor = 0
        self._version += 1

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "storage": self._storage,
            "filled": self._filled,
            "cursor": self._cursor,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Copies the items and counters of a :meth:`state_dict` into this storage.

        Raises:
            ValueError, KeyError, TypeError: the saved data does not fit this storage (its
                shape, keys or dtypes differ, or its counters are out of range); the storage
                is left exactly as it was (a lazy storage stays unallocated).
        """
        self._apply_state(self._prepare_state(state_dict))

    def _prepare_state(self, state_dict: dict[str, Any]) -> LoadPlan:
        if not isinstance(state_dict, dict) or "storage" not in state_dict:
            raise ValueError("a tensor storage state is a dict with a 'storage' entry")
        data = state_dict["storage"]
        if data is None:
            slots = self.slots if self._lead is not None else self._max_size
            return LoadPlan(0, slots, 1, None)
        batch = batch_shape(data)
        if len(batch) < self.ndim:
            raise ValueError(
                f"saved data of batch shape {tuple(batch)} has fewer than ndim={self.ndim} dims"
            )
        if self._storage is not None:
            lead = self._lead_shape
            slots = self.slots
        else:
            lead = torch.Size(batch[: self.ndim - 1])
            slots = self._max_size // max(lead.numel(), 1)
            if isinstance(data, TensorDictBase):
                tensor_leaves(data)  # only tensors can be stored
        expected = torch.Size([*lead, slots])
        if batch[: self.ndim] != expected:
            raise ValueError(
                f"saved data of batch shape {tuple(batch[: self.ndim])} does not fit a storage "
                f"of shape {tuple(expected)} (max_size={self._max_size})"
            )
        if self._storage is not None:
            self._validate(data, tuple(expected))
        filled, cursor = check_counters(
            state_dict.get("filled"), state_dict.get("cursor"), slots, type(self).__name__
        )
        return LoadPlan(filled, slots, lead.numel(), (data, filled, cursor))

    def _apply_state(self, plan: LoadPlan) -> None:
        if plan.payload is None:
            self._empty()
            return
        self._load_data(*plan.payload)

    def _load_data(self, data: Any, filled: int, cursor: int) -> None:
        # Validated by _prepare_state.
        if self._storage is None:
            self._allocate_from_full(data)
        self._write(slice(0, self.slots), data, self.ndim)
        self._filled, self._cursor = filled, cursor
        self._version += 1

    def _allocate_from_full(self, data: TensorDictBase | torch.Tensor) -> None:
        nb = self.ndim
        batch = torch.Size(batch_shape(data)[:nb])
        if isinstance(data, TensorDictBase):
            self._adopt(alloc_like(data, batch, nb, self._device, fill=True))
        else:
            self._adopt(torch.zeros(data.shape, dtype=data.dtype, device=self.device))

    _checkpoint_kind = "tensor"

    def _default_checkpointer(self) -> StorageCheckpointerBase | None:
        return TensorStorageCheckpointer()

    def _native_dumps(self, path: Path, hooks: list[Any]) -> None:
        data = self._storage
        for hook in hooks:
            data = hook(data, path)
        replace_dir(path, lambda tmp: self._dump_into(tmp, data))

    def _dump_into(self, directory: Path, data: TensorDictBase | torch.Tensor | None) -> None:
        meta = self._meta()
        if data is not None:
            if isinstance(data, TensorDictBase):
                data.memmap(prefix=directory / "data", copy_existing=True)
            else:
                MemoryMappedTensor.from_tensor(
                    data.cpu(), filename=directory / "data.memmap", copy_existing=True
                )
        atomic_write_bytes(
            directory / "header.bin",
            encode_header(self._filled, self._cursor),
        )
        atomic_write_json(directory / "storage.json", meta)

    def _meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "class": type(self).__name__,
            "kind": "tensordict",
            "max_size": self._max_size,
            "ndim": self.ndim,
            "allocated": self._storage is not None,
        }
        if self._storage is not None:
            meta["shape"] = [*self._lead_shape, self.slots]
            if not self._is_td:
                meta["kind"] = "tensor"
                meta["dtype"] = str(self._storage.dtype).replace("torch.", "")
                meta["tensor_shape"] = list(self._storage.shape)
        return meta

    def _native_prepare(self, path: Path, trusted: bool, hooks: list[Any]) -> LoadPlan:
        data, meta, filled, cursor, _ = open_storage_dir(path, trusted)
        self._check_meta(meta, path)
        for hook in hooks:
            data = hook(data, path)
        return self._prepare_state({"storage": data, "filled": filled, "cursor": cursor})

    def _native_apply(self, plan: LoadPlan) -> None:
        self._apply_state(plan)

    def _check_meta(self, meta: dict[str, Any], path: Path) -> None:
        if meta["kind"] == "list":
            raise ValueError(f"{path} holds a ListStorage, which {type(self).__name__} cannot load")
        if meta["ndim"] != self.ndim:
            raise ValueError(f"{path} holds a storage with ndim={meta['ndim']}, not {self.ndim}")
        if meta["max_size"] != self._max_size:
            raise ValueError(
                f"{path} holds a storage of max_size={meta['max_size']}, not {self._max_size}"
            )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_size={self.max_size}, len={len(self)}, "
            f"ndim={self.ndim}, device={self.device})"
        )


class LazyTensorStorage(TensorStorage):
    """A :class:`TensorStorage` allocated on the first write, from the layout of the first batch.

    Any (nested) TensorDict or tensor layout works; later writes must have the same keys and item
    shapes (dtypes are cast when torch allows it) or they raise and change nothing.

    Args:
        max_size: the capacity in items.
        device: where to allocate (``"cpu"`` by default; any torch device).
        ndim: ``2`` to store ``[n_envs, T]`` batches as ``[n_envs, max_size // n_envs]``.

    Examples:
        >>> from tensordict import TensorDict
        >>> storage = LazyTensorStorage(100)
        >>> data = TensorDict({"obs": torch.zeros(10, 3), ("next", "done"): torch.zeros(10, 1,
        ...     dtype=torch.bool)}, batch_size=[10])
        >>> storage.set(torch.arange(10), data)
        >>> len(storage), storage.get(torch.tensor([0, 5]))["next", "done"].shape
        (10, torch.Size([2, 1]))
    """

    def __init__(self, max_size: int, *, device: torch.device | str = "cpu", ndim: int = 1) -> None:
        super().__init__(None, max_size, device=device, ndim=ndim)


# ---------------------------------------------------------------------------------------------
# Memory-mapped storage: a tensor storage in files that outlive the process
# ---------------------------------------------------------------------------------------------


class LazyMemmapStorage(TensorStorage):
    """A lazy tensor storage whose items live in memory-mapped files (tensordict ``MemoryMappedTensor``).

    The files sit in ``scratch_dir`` (a temporary directory, removed with the storage, when
    ``None``). After every write, the item count and write position are stored in a small header
    file, after the data: a process killed in the middle of ``extend`` leaves the items written
    before intact, and :meth:`open` maps the directory again without copying it. Slots that were
    being overwritten at the time of the kill are reported as torn (``storage.torn_slots``).

    Args:
        max_size: the capacity in items.
        scratch_dir: directory of the files; must not already hold a storage unless ``existsok``.
        device: where sampled items are returned (files are always on CPU). A buffer reads
            them on CPU, pins them when built with ``pin_memory=True``, and sends them with
            ``non_blocking=True``.
        ndim: ``2`` to store ``[n_envs, T]`` batches.
        existsok: replace a storage already in ``scratch_dir`` instead of raising.

    Examples:
        >>> import tempfile
        >>> from tensordict import TensorDict
        >>> path = tempfile.mkdtemp()
        >>> storage = LazyMemmapStorage(10, scratch_dir=path)
        >>> storage.set(torch.arange(3), TensorDict({"x": torch.arange(3.0)}, [3]))
        >>> reopened = LazyMemmapStorage.open(path)
        >>> len(reopened), reopened.get(torch.tensor([2]))["x"].tolist()
        (3, [2.0])
    """

    def __init__(
        self,
        max_size: int,
        *,
        scratch_dir: str | Path | None = None,
        device: torch.device | str = "cpu",
        ndim: int = 1,
        existsok: bool = False,
    ) -> None:
        super().__init__(None, max_size, device=torch.device("cpu"), ndim=ndim)
        self._out_device = torch.device(device)
        self._scratch_dir = Path(scratch_dir) if scratch_dir is not None else None
        self._existsok = existsok
        self._dir: Path | None = None
        self._header: np.memmap | None = None
        self._dirty: np.memmap | None = None
        self._finalizer: Any = None
        self.torn_slots = torch.zeros(0, dtype=torch.long)
        if self._scratch_dir is not None and (self._scratch_dir / "storage.json").exists():
            if not existsok:
                raise FileExistsError(
                    f"{self._scratch_dir} already holds a storage: reopen it with "
                    f"LazyMemmapStorage.open({str(self._scratch_dir)!r}) or pass existsok=True "
                    f"to overwrite it"
                )

    @property
    def scratch_dir(self) -> Path | None:
        """The directory holding the files (``None`` before the first write)."""
        return self._dir

    @classmethod
    def open(
        cls, path: str | Path, *, device: torch.device | str = "cpu", trusted: bool = False
    ) -> LazyMemmapStorage:
        """Maps the storage files in ``path`` again, without copying them.

        Writes go to the same files. Items whose write was interrupted are listed in
        ``torn_slots`` (a warning says so) and are overwritten first by a round-robin writer.

        Args:
            path: a ``scratch_dir`` of a :class:`LazyMemmapStorage`, or a directory written by a
                tensor storage's ``dumps``.
            device: where sampled items are returned.
            trusted: skip the check that the files hold plain tensors only.

        Returns:
            The reopened storage.
        """
        path = Path(path)
        meta = read_json(path / "storage.json")
        ndim = int(meta.get("ndim", 1))
        max_size = int(meta["max_size"])
        storage = cls(max_size, scratch_dir=None, device=device, ndim=ndim)
        storage._native_apply(storage._native_prepare(path, trusted, []))
        return storage

    # -- files ----------------------------------------------------------------------------------
    def _native_prepare(self, path: Path, trusted: bool, hooks: list[Any]) -> LoadPlan:
        if hooks:
            raise NotImplementedError(
                "LazyMemmapStorage maps saved files in place: load hooks, which would change "
                "the data read, are not supported; load into a LazyTensorStorage instead"
            )
        data, meta, filled, cursor, torn = open_storage_dir(path, trusted)
        self._check_meta(meta, path)
        if data is None:
            return LoadPlan(0, self._max_size if self.ndim > 1 else self.slots, 1, (path, None))
        batch = batch_shape(data)
        lead = torch.Size(batch[: self.ndim - 1])
        slots = self._max_size // max(lead.numel(), 1)
        if len(batch) < self.ndim or batch[self.ndim - 1] != slots:
            raise ValueError(
                f"{path}: saved data of batch shape {tuple(batch)} does not fit a storage of "
                f"max_size={self._max_size} and ndim={self.ndim}"
            )
        if filled < slots:
            # The header stores the count before the cursor; below capacity they agree.
            cursor = filled
        filled, cursor = check_counters(filled, cursor, slots, str(path / "header.bin"))
        if torn is not None and torn.size:
            cursor = int(torn[0])
        return LoadPlan(filled, slots, lead.numel(), (path, (data, filled, cursor, torn)))

    def _native_apply(self, plan: LoadPlan) -> None:
        path, content = plan.payload
        self._release_temp()
        self.torn_slots = torch.zeros(0, dtype=torch.long)
        self._dir = path
        if content is None:
            self._storage = None
            self._filled = self._cursor = 0
            self._version += 1
            return
        data, filled, cursor, torn = content
        self._memmap_data = data
        self._adopt(
            as_plain_tensors(data)
            if isinstance(data, TensorDictBase)
            else data.as_subclass(torch.Tensor)
        )
        self._open_header(path)
        # With torn slots, the cursor is on the first of them, so that a round-robin writer
        # repairs them first.
        self._filled, self._cursor = filled, cursor
        self._version += 1
        if torn is not None and torn.size:
            self.torn_slots = torch.from_numpy(torn.astype(np.int64))
            warn_once(
                f"{path}: {torn.size} slot(s) were being written when the process stopped and "
                f"hold a mix of old and new data (slots {torn[:8].tolist()}...); they are "
                f"listed in storage.torn_slots and will be overwritten first"
            )

    def _open_header(self, path: Path) -> None:
        self._header = np.memmap(path / "header.bin", dtype=np.int64, mode="r+", shape=(4,))
        dirty_path = path / "dirty.bin"
        if not dirty_path.exists() or dirty_path.stat().st_size != self.slots:
            np.zeros(self.slots, dtype=np.uint8).tofile(dirty_path)
        self._dirty = np.memmap(dirty_path, dtype=np.uint8, mode="r+", shape=(self.slots,))

    def _release_temp(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None

    def _allocate(self, data: TensorDictBase | torch.Tensor) -> None:
        if self._scratch_dir is None:
            path = Path(tempfile.mkdtemp(prefix="torchrl_memmap_"))
            self._finalizer = weakref.finalize(self, shutil.rmtree, str(path), True)
        else:
            path = self._scratch_dir
            if (path / "storage.json").exists():
                if not self._existsok:
                    raise FileExistsError(f"{path} already holds a storage")
                (path / "storage.json").unlink()
                shutil.rmtree(path / "data", ignore_errors=True)
            path.mkdir(parents=True, exist_ok=True)
        nb = self.ndim
        shape = batch_shape(data)
        lead = torch.Size(shape[: nb - 1])
        batch = torch.Size([*lead, self._slots_for(data)])
        if isinstance(data, TensorDictBase):
            template = alloc_like(data, batch, nb, torch.device("cpu"), fill=False)
            mm = template.memmap_like(prefix=path / "data", existsok=True)
            plain = as_plain_tensors(mm)
        else:
            mm = MemoryMappedTensor.zeros(
                (*batch, *data.shape[nb:]), dtype=data.dtype, filename=path / "data.memmap"
            )
            plain = mm.as_subclass(torch.Tensor)
        self._memmap_data = mm
        self._dir = path
        self._adopt(plain)
        (path / "header.bin").write_bytes(encode_header(0, 0))
        np.zeros(self.slots, dtype=np.uint8).tofile(path / "dirty.bin")
        self._open_header(path)
        # storage.json comes last: a directory without it holds no storage.
        atomic_write_json(path / "storage.json", self._meta())

    # -- writes: dirty mark, data, header, clear mark ----------------------------------------------
    def _write(self, index: int | slice | torch.Tensor, data: Any, nb: int) -> None:
        dirty = self._dirty
        if dirty is None:
            super()._write(index, data, nb)
            return
        slots_np: Any = index.cpu().numpy() if isinstance(index, torch.Tensor) else index
        # The order is what makes a kill harmless: mark, write, publish the count, unmark.
        dirty[slots_np] = 1
        super()._write(index, data, nb)

    def _note_write(self, slot_index: int | slice | torch.Tensor) -> None:
        super()._note_write(slot_index)
        if self._header is not None and self._dirty is not None:
            self._header[1] = self._filled
            self._header[2] = self._cursor
            slots_np: Any = (
                slot_index.cpu().numpy() if isinstance(slot_index, torch.Tensor) else slot_index
            )
            self._dirty[slots_np] = 0
            if self.torn_slots.numel():
                keep = ~np.isin(self.torn_slots.numpy(), np.arange(self.slots)[slots_np])
                self.torn_slots = self.torn_slots[torch.from_numpy(keep)]

    def get(self, index: IndexLike) -> TensorDictBase | torch.Tensor:
        out, out_device = self._get_kept(index)
        if out_device is not None:
            # Host to device: non_blocking is safe (the copy is ordered on the current stream).
            out = out.to(out_device, non_blocking=True)
        return out

    def _get_kept(self, index: IndexLike) -> tuple[Any, torch.device | None]:
        out_device = self._out_device if self._out_device != self.device else None
        return super().get(index), out_device

    def _empty(self) -> None:
        super()._empty()
        if self._header is not None:
            self._header[1] = 0
            self._header[2] = 0

    def _load_data(self, data: Any, filled: int, cursor: int) -> None:
        if self._storage is None:
            self._allocate(data)
        super()._load_data(data, filled, cursor)
        if self._dirty is not None:
            # Every slot was rewritten in full: none is torn (_write marked them all).
            self._dirty[:] = 0
        if self._header is not None:
            self._header[1] = self._filled
            self._header[2] = self._cursor

    # -- dumps / loads ------------------------------------------------------------------------------
    def _native_dumps(self, path: Path, hooks: list[Any]) -> None:
        if hooks:
            data = self._storage
            for hook in hooks:
                data = hook(data, path)
            replace_dir(path, lambda tmp: self._dump_into(tmp, data))
            return
        if self._dir is not None and path.exists() and same_dir(path, self._dir):
            # Already there: data and header are live; flush them and refresh the layout file.
            if self._header is not None and self._dirty is not None:
                self._header.flush()
                self._dirty.flush()
            atomic_write_json(path / "storage.json", self._meta())
            return
        if self._storage is None:
            replace_dir(path, lambda tmp: self._dump_into(tmp, None))
            return

        source_dir = self._dir
        assert source_dir is not None  # allocated storages have their files

        def fill(tmp: Path) -> None:
            for name in ("data", "data.memmap", "header.bin", "dirty.bin"):
                src = source_dir / name
                if src.is_dir():
                    shutil.copytree(src, tmp / name)
                elif src.exists():
                    shutil.copyfile(src, tmp / name)
            atomic_write_json(tmp / "storage.json", self._meta())

        replace_dir(path, fill)

    def loads(self, path: str | Path, *, trusted: bool = False) -> None:
        """Maps the files in ``path`` in place (no copy): later writes go to those files.

        Args:
            path: a directory written by ``dumps`` (or a ``scratch_dir``).
            trusted: skip the check that the files hold plain tensors only.
        """
        super().loads(path, trusted=trusted)

    def _meta(self) -> dict[str, Any]:
        meta = super()._meta()
        meta["class"] = type(self).__name__
        return meta

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["scratch_dir"] = str(self._dir) if self._dir is not None else None
        return state


# ---------------------------------------------------------------------------------------------
# List storages with a twist: compressed items, lazily stacked samples
# ---------------------------------------------------------------------------------------------


class CompressedListStorage(ListStorage):
    """A :class:`ListStorage` that keeps every item compressed, and decompresses what is read.

    Items are tensors or TensorDicts of tensors; each tensor is compressed on its own (zstd by
    default, see :mod:`~torchrl.data.replay_buffers.compression`), which suits raw observations
    such as images. Sampling returns a list that the buffer stacks. Its default checkpointer,
    :class:`~torchrl.data.replay_buffers.checkpointers.CompressedListStorageCheckpointer`, saves
    the compressed bytes without unpickling anything on load.

    Args:
        max_size: the most items kept.
        compression_fn: maps a tensor to a ``uint8`` tensor of compressed bytes (zstd of the raw
            bytes by default). Give ``decompression_fn`` with it.
        decompression_fn: maps those bytes back to the tensor (or to its raw bytes).
        compression_level: the level of the default codec (1-22 for zstd). Defaults to 3.
        device: where decompressed items are returned. Defaults to ``"cpu"``.
        compilable: accepted for TorchRL compatibility; it changes nothing here.

    Examples:
        >>> storage = CompressedListStorage(10)
        >>> storage.set(torch.arange(2), torch.zeros(2, 64, 64, dtype=torch.uint8))
        >>> storage.get(0).shape, storage.compressed_nbytes() < 2 * 64 * 64
        (torch.Size([64, 64]), True)
    """

    _checkpoint_kind = "compressed"

    def __init__(
        self,
        max_size: int,
        *,
        compression_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        decompression_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        compression_level: int = 3,
        device: torch.device | str = "cpu",
        compilable: bool = False,
    ) -> None:
        super().__init__(max_size)
        if (compression_fn is None) != (decompression_fn is None):
            raise ValueError(
                "give both compression_fn and decompression_fn (or neither, for the default "
                "zstd codec): one without the other cannot read back what it wrote"
            )
        self.compression_fn = compression_fn
        self.decompression_fn = decompression_fn
        self.compression_level = compression_level
        self._codec = default_codec(compression_level) if compression_fn is None else None
        self.device = torch.device(device)

    @property
    def codec_name(self) -> str:
        """``"zstd"`` or ``"zlib"`` for the default codec, ``"custom"`` with user functions."""
        return self._codec.name if self._codec is not None else "custom"

    def _default_checkpointer(self) -> StorageCheckpointerBase | None:
        return CompressedListStorageCheckpointer()

    def _compress(self, item: Any) -> dict[str, Any]:
        return compress_item(item, self._codec, self.compression_fn)

    def _decompress(self, record: dict[str, Any]) -> Any:
        return decompress_item(record, self._codec, self.decompression_fn, self.device)

    def _as_items(self, data: Any, n: int) -> list[Any]:
        return [self._compress(item) for item in super()._as_items(data, n)]

    def set(self, index: int | slice | torch.Tensor, data: Any) -> None:
        if isinstance(index, int):
            data = self._compress(data)
        super().set(index, data)

    def get(self, index: IndexLike) -> Any:
        out = super().get(index)
        if isinstance(out, list):
            return [self._decompress(record) for record in out]
        return self._decompress(out)

    def _column(self, key: Any) -> torch.Tensor:
        items = [self._decompress(record) for record in self._items]
        if not items:
            return torch.zeros(0, dtype=torch.bool)
        if not isinstance(items[0], TensorDictBase):
            raise TypeError("CompressedListStorage items are tensors, not TensorDicts")
        return torch.stack([item.get(key) for item in items])

    def compressed_nbytes(self) -> int:
        """The number of compressed bytes held (all items)."""

        def size(record: dict[str, Any]) -> int:
            if record["kind"] == "td":
                return sum(size(r) for r in record["entries"].values())
            return int(record["bytes"].numel())

        return sum(size(record) for record in self._items)

    # -- files: compressed bytes in one flat file, layout in JSON --------------------------------
    def _native_dumps(self, path: Path, hooks: list[Any]) -> None:
        if hooks:
            raise NotImplementedError("CompressedListStorageCheckpointer does not run hooks")
        blobs: list[np.ndarray] = []
        offset = 0

        def describe(record: dict[str, Any]) -> dict[str, Any]:
            nonlocal offset
            if record["kind"] == "td":
                entries = {k: describe(v) for k, v in record["entries"].items()}
                return {"kind": "td", "batch_size": record["batch_size"], "entries": entries}
            raw = record["bytes"].numpy()
            blobs.append(raw)
            out = {
                "kind": "tensor",
                "dtype": record["dtype"],
                "shape": record["shape"],
                "span": [offset, int(raw.size)],
            }
            offset += int(raw.size)
            return out

        layout = [describe(record) for record in self._items]
        meta = {
            "format_version": FORMAT_VERSION,
            "kind": "compressed",
            "class": type(self).__name__,
            "max_size": None if self._max_size == UNBOUNDED else self._max_size,
            "cursor": self._cursor,
            "codec": self.codec_name,
            "items": layout,
        }

        def fill(tmp: Path) -> None:
            if offset:
                data = np.memmap(tmp / "data.bin", dtype=np.uint8, mode="w+", shape=(offset,))
                start = 0
                for blob in blobs:
                    data[start : start + blob.size] = blob
                    start += blob.size
                data.flush()
                del data
            atomic_write_json(tmp / "metadata.json", meta)

        replace_dir(path, fill)

    def _native_prepare(self, path: Path, trusted: bool, hooks: list[Any]) -> LoadPlan:
        if hooks:
            raise NotImplementedError("CompressedListStorageCheckpointer does not run hooks")
        meta = read_json(path / "metadata.json")
        check_format_version(meta, path / "metadata.json")
        if meta.get("kind") != "compressed":
            raise ValueError(f"{path} does not hold a CompressedListStorage")
        if meta["codec"] != self.codec_name:
            raise ValueError(
                f"{path} was compressed with {meta['codec']!r} but this storage uses "
                f"{self.codec_name!r}: it could not decompress the items"
            )
        total = 0
        data_file = path / "data.bin"
        data = (
            np.memmap(data_file, dtype=np.uint8, mode="r")
            if data_file.exists()
            else np.zeros(0, np.uint8)
        )

        def rebuild(entry: dict[str, Any]) -> dict[str, Any]:
            nonlocal total
            if entry["kind"] == "td":
                entries = {k: rebuild(v) for k, v in entry["entries"].items()}
                return {"kind": "td", "batch_size": list(entry["batch_size"]), "entries": entries}
            start, length = (int(v) for v in entry["span"])
            if start < 0 or start + length > data.size:
                raise ValueError(f"{path}: an item's bytes lie outside data.bin")
            total += length
            return {
                "kind": "tensor",
                "bytes": torch.from_numpy(np.array(data[start : start + length])),
                "dtype": str(entry["dtype"]),
                "shape": [int(s) for s in entry["shape"]],
            }

        for entry in meta["items"]:
            _check_record_layout(entry, path)
        items = [rebuild(entry) for entry in meta["items"]]
        return self._prepare_state(
            {"items": items, "cursor": meta["cursor"], "max_size": meta["max_size"]}
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_size={self.max_size}, len={len(self)}, "
            f"codec={self.codec_name})"
        )


def _check_record_layout(entry: Any, path: Path) -> None:
    """Checks a saved record description before anything is built from it."""
    if not isinstance(entry, dict) or entry.get("kind") not in ("td", "tensor"):
        raise ValueError(f"{path / 'metadata.json'}: an item description is malformed")
    if entry["kind"] == "td":
        for value in entry.get("entries", {}).values():
            _check_record_layout(value, path)
        return
    dtype = getattr(torch, str(entry.get("dtype")), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{path / 'metadata.json'}: unknown dtype {entry.get('dtype')!r}")


class LazyStackStorage(ListStorage):
    """A :class:`ListStorage` whose samples are lazy stacks of the stored TensorDicts.

    Items may differ in shape (for instance episodes of different lengths): a sample is a
    ``tensordict.LazyStackedTensorDict`` that stacks them without copying (``densify`` or
    indexing turns it into tensors when the shapes allow). Tensor items are stacked with
    ``torch.stack``.

    Args:
        max_size: the most items kept; ``None`` means unbounded.
        compilable: accepted for TorchRL compatibility; it changes nothing here.
        stack_dim: the dim of the sample along which items are stacked. Defaults to 0.
        device: where items are moved on write (``None``: left where they are).

    Examples:
        >>> from tensordict import TensorDict
        >>> storage = LazyStackStorage(10)
        >>> storage.set(torch.arange(2), [TensorDict(x=torch.zeros(3), batch_size=[3]),
        ...     TensorDict(x=torch.zeros(5), batch_size=[5])])
        >>> sample = storage.get(torch.tensor([0, 1]))
        >>> type(sample).__name__, sample[1]["x"].shape
        ('LazyStackedTensorDict', torch.Size([5]))
    """

    def __init__(
        self,
        max_size: int | None = None,
        *,
        compilable: bool = False,
        stack_dim: int = 0,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(max_size, device=device)
        if not isinstance(stack_dim, int):
            raise TypeError(f"stack_dim must be an int, got {stack_dim!r}")
        self.stack_dim = stack_dim

    def get(self, index: IndexLike) -> Any:
        out = super().get(index)
        if not isinstance(out, list) or not out:
            return out
        if all(isinstance(x, TensorDictBase) for x in out):
            return lazy_stack(out, self.stack_dim)
        if all(isinstance(x, torch.Tensor) for x in out):
            try:
                return torch.stack(out, self.stack_dim)
            except RuntimeError as err:
                raise RuntimeError(
                    "LazyStackStorage stacks tensor items with torch.stack, which needs equal "
                    f"shapes; store TensorDicts to stack items of different shapes ({err})"
                ) from err
        return out


def storage_nbytes(storage: Storage) -> int:
    """Bytes held by the tensors of a tensor storage (0 for other storages).

    Args:
        storage: any storage.

    Returns:
        The summed ``numel * element_size`` of the stored tensors, unwritten slots included.

    Examples:
        >>> storage = LazyTensorStorage(10)
        >>> storage.set(torch.arange(2), torch.zeros(2, 3))
        >>> storage_nbytes(storage)
        120
    """
    if not isinstance(storage, TensorStorage) or storage._storage is None:
        return 0
    return sum(v.numel() * v.element_size() for _, v in storage._write_leaves)
