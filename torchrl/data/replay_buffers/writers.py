"""Writers: where new items go in a storage."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from tensordict import TensorDictBase

from torchrl._keys import INDEX, NEXT, REWARD
from torchrl._types import NestedKey
from torchrl.data.replay_buffers.storages import Index, LoadPlan, Storage
from torchrl.data.replay_buffers.utils import check_reduction, nested_key_str, reduce_trailing

__all__ = [
    "ImmutableDatasetWriter",
    "RoundRobinWriter",
    "TensorDictMaxValueWriter",
    "TensorDictRoundRobinWriter",
    "Writer",
]


class Writer(ABC):
    """Base class of the writers: picks the slots of new items and writes them to the storage.

    A writer validates through the storage before moving its own cursor, so a failed write leaves
    both unchanged.

    Examples:
        Every writer (here :class:`RoundRobinWriter`, the default) picks slots for new items:

        >>> import torch
        >>> from torchrl.data import LazyTensorStorage, RoundRobinWriter
        >>> writer = RoundRobinWriter()
        >>> writer.register_storage(LazyTensorStorage(3))  # the replay buffer does it
        >>> writer.extend(torch.arange(2))
        tensor([0, 1])
        >>> writer.extend(torch.arange(2))  # wraps around when full
        tensor([2, 0])
        >>> writer.state_dict()
        {'cursor': 1, 'write_count': 4}
    """

    def __init__(self) -> None:
        self._storage: Storage | None = None
        self._cursor = 0
        self._write_count = 0

    def register_storage(self, storage: Storage) -> None:
        """Attaches the storage to write to (the replay buffer does it)."""
        self._storage = storage

    @property
    def storage(self) -> Storage:
        """The storage written to."""
        if self._storage is None:
            raise RuntimeError(f"{type(self).__name__} has no storage: call register_storage")
        return self._storage

    @abstractmethod
    def add(self, data: Any) -> int | Index | None:
        """Writes one item and returns its index."""

    @abstractmethod
    def extend(self, data: Any) -> Index:
        """Writes a batch of items and returns their indices."""

    def _resume(self) -> None:
        """Continues after the items already in a (reopened) storage."""
        storage = self.storage
        self._cursor = storage._cursor
        self._write_count = len(storage)

    def _empty(self) -> None:
        self._cursor = 0
        self._write_count = 0

    def state_dict(self) -> dict[str, Any]:
        """The cursor and the number of items written so far."""
        return {"cursor": self._cursor, "write_count": self._write_count}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned (validated first: on error nothing changes).

        Raises:
            ValueError: the cursor or count is out of range for the registered storage.
        """
        self._apply_state(self._check_state(state_dict))

    def _slots_of(self, plan: LoadPlan | None) -> int | None:
        if plan is not None and plan.slots is not None:
            return plan.slots
        storage = self._storage
        if storage is None or (storage.ndim > 1 and storage._lead is None):
            return None
        return storage.slots

    def _check_state(self, state_dict: dict[str, Any], plan: LoadPlan | None = None) -> Any:
        """Validates a state (against ``plan``, the storage state it goes with) without change."""
        name = type(self).__name__
        if not isinstance(state_dict, dict):
            raise ValueError(f"a {name} state is a dict, got {type(state_dict).__name__}")
        cursor, count = state_dict.get("cursor"), state_dict.get("write_count")
        if not isinstance(cursor, int) or not isinstance(count, int) or cursor < 0 or count < 0:
            raise ValueError(
                f"{name}: the saved cursor {cursor!r} and write count {count!r} must be ints >= 0"
            )
        slots = self._slots_of(plan)
        if slots is not None and cursor >= slots:
            raise ValueError(f"{name}: the saved cursor {cursor} is not in [0, {slots})")
        if plan is not None and plan.filled is not None and plan.slots is not None:
            # Until a storage is full, writes fill it in order: the next one goes right after
            # the stored items. Another cursor means the states come from different buffers.
            if plan.filled < plan.slots and cursor != plan.filled:
                raise ValueError(
                    f"{name}: the saved cursor {cursor} does not match the storage state, which "
                    f"holds {plan.filled} of {plan.slots} slots (the next write goes to slot "
                    f"{plan.filled}): the states do not belong together"
                )
            if count < plan.filled:
                raise ValueError(
                    f"{name}: the saved write count {count} is smaller than the {plan.filled} "
                    f"slots the storage state fills"
                )
        return dict(state_dict)

    def _apply_state(self, checked: Any) -> None:
        self._cursor = int(checked["cursor"])
        self._write_count = int(checked["write_count"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(cursor={self._cursor}, write_count={self._write_count})"


def _narrow(data: Any, dim: int, start: int, length: int) -> Any:
    index = (slice(None),) * dim + (slice(start, start + length),)
    return data[index]


class RoundRobinWriter(Writer):
    """Writes items in order, wrapping around to overwrite the oldest once the storage is full.

    Extending with more items than the storage holds keeps the last ones.

    Examples:
        >>> from torchrl.data.replay_buffers.storages import LazyTensorStorage
        >>> writer = RoundRobinWriter()
        >>> writer.register_storage(LazyTensorStorage(4))
        >>> writer.extend(torch.zeros(3, 2)).tolist(), writer.extend(torch.ones(3, 2)).tolist()
        ([0, 1, 2], [3, 0, 1])
    """

    def add(self, data: Any) -> int | Index:
        storage = self.storage
        if storage.ndim > 1:
            slots = storage._slots_for(data.unsqueeze(storage.ndim - 1))
        else:
            slots = storage.slots
        index = self._cursor
        storage.set(index, data)
        self._cursor = (index + 1) % slots
        self._write_count += 1
        if storage.ndim == 1:
            return index
        return storage._item_index(torch.tensor([index]))

    def _extend(self, data: Any) -> tuple[Index, int]:
        """Writes ``data``; returns the item index and how many leading items were dropped."""
        storage = self.storage
        nb = storage.ndim
        n = storage._write_len(data) if not isinstance(data, (list, tuple)) else len(data)
        slots = storage._slots_for(data)
        if n == 0:
            return storage._item_index(torch.zeros(0, dtype=torch.long)), 0
        skip = max(n - slots, 0)
        if skip:
            data = _narrow(data, nb - 1, skip, slots) if not isinstance(data, list) else data[skip:]
        start = (self._cursor + skip) % slots
        count = n - skip
        slot_index = (start + torch.arange(count)) % slots
        storage.set(slice(start, start + count) if start + count <= slots else slot_index, data)
        self._cursor = (self._cursor + n) % slots
        self._write_count += n
        return storage._item_index(slot_index), skip

    def extend(self, data: Any) -> Index:
        return self._extend(data)[0]


def _write_index(data: TensorDictBase, index: Index, skip: int, ndim: int) -> None:
    """Writes the storage index of every item into ``data[INDEX]`` (-1 for dropped items)."""
    value = torch.stack(index, -1) if isinstance(index, tuple) else index
    if skip:
        shape = (*data.batch_size[:ndim], *value.shape[ndim:])
        full = torch.full(shape, -1, dtype=torch.long)
        full.narrow(ndim - 1, skip, value.shape[ndim - 1]).copy_(value)
        value = full
    try:
        data.set(INDEX, value.to(data.device) if data.device is not None else value)
    except RuntimeError:
        # A locked TensorDict keeps its content: the index is a convenience, not a requirement.
        pass


class TensorDictRoundRobinWriter(RoundRobinWriter):
    """A :class:`RoundRobinWriter` for TensorDicts that writes each item's index into the input.

    After ``extend(td)``, ``td["index"]`` holds where each item went (``-1`` for items dropped
    because the batch was larger than the storage), so priorities can be updated from it. The
    ``"index"`` entry itself is never stored.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data.replay_buffers.storages import LazyTensorStorage
        >>> writer = TensorDictRoundRobinWriter()
        >>> writer.register_storage(LazyTensorStorage(10))
        >>> td = TensorDict({"obs": torch.zeros(3)}, [3])
        >>> _ = writer.extend(td)
        >>> td["index"].tolist()
        [0, 1, 2]
    """

    def add(self, data: TensorDictBase) -> int | Index:
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"{type(self).__name__} writes TensorDicts, got {type(data).__name__}")
        stored = data.exclude(INDEX) if INDEX in data.keys() else data
        index = super().add(stored)
        value = (
            torch.stack(index, -1).squeeze(-2) if isinstance(index, tuple) else torch.tensor(index)
        )
        try:
            data.set(INDEX, value)
        except RuntimeError:
            pass
        return index

    def extend(self, data: TensorDictBase) -> Index:
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"{type(self).__name__} writes TensorDicts, got {type(data).__name__}")
        stored = data.exclude(INDEX) if INDEX in data.keys() else data
        index, skip = self._extend(stored)
        _write_index(data, index, skip, self.storage.ndim)
        return index


class TensorDictMaxValueWriter(Writer):
    """Keeps the items with the highest rank: once full, a new item replaces the lowest-ranked one.

    The rank of an item is ``data[rank_key]`` reduced over its non-batch dims. A batch is written
    in one go: the stored and incoming items compete together, stored items win ties. Writes
    ``data["index"]`` (``-1`` for items that did not make it) and returns the written indices.

    Args:
        rank_key: the entry ranking items; ``("next", "reward")`` by default.
        reduction: how to reduce a multi-element rank: ``"sum"``, ``"max"``, ``"min"``,
            ``"mean"`` or ``"median"``.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data.replay_buffers.storages import LazyTensorStorage
        >>> writer = TensorDictMaxValueWriter(rank_key="r")
        >>> writer.register_storage(LazyTensorStorage(2))
        >>> _ = writer.extend(TensorDict({"r": torch.tensor([1.0, 5.0, 3.0])}, [3]))
        >>> sorted(writer.storage.get(torch.arange(2))["r"].tolist())
        [3.0, 5.0]
    """

    def __init__(self, rank_key: NestedKey | None = None, reduction: str = "sum") -> None:
        super().__init__()
        self.rank_key = rank_key if rank_key is not None else (NEXT, REWARD)
        self.reduction = check_reduction(reduction)
        self._ranks: torch.Tensor | None = None
        self._filled = 0

    def register_storage(self, storage: Storage) -> None:
        if storage.ndim != 1:
            raise ValueError(f"{type(self).__name__} needs a storage with ndim=1")
        super().register_storage(storage)

    def _ranks_of(self, data: TensorDictBase) -> torch.Tensor:
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"{type(self).__name__} writes TensorDicts, got {type(data).__name__}")
        value = data.get(self.rank_key, None)
        if value is None:
            raise KeyError(
                f"{type(self).__name__}: the data has no rank entry {nested_key_str(self.rank_key)}"
            )
        ranks = reduce_trailing(value, 1, self.reduction).to(torch.float64).cpu()
        if torch.isnan(ranks).any():
            raise ValueError(f"rank entry {nested_key_str(self.rank_key)} contains NaN")
        return ranks

    def add(self, data: TensorDictBase) -> int | None:
        index = self.extend(data.unsqueeze(0))
        return int(index[0]) if index.numel() else None

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        storage = self.storage
        ranks = self._ranks_of(data)
        n = ranks.shape[0]
        slots = storage._slots_for(data)
        stored_ranks = (
            self._ranks if self._ranks is not None else torch.empty(0, dtype=torch.float64)
        )
        filled = self._filled
        if filled + n <= slots:
            new_in = torch.arange(n)
            positions = torch.arange(filled, filled + n)
        else:
            candidates = torch.cat([stored_ranks[:filled], ranks])
            # A stable descending sort with stored items first: they win ties.
            keep = torch.sort(candidates, descending=True, stable=True).indices[:slots]
            new_in = torch.sort(keep[keep >= filled]).values - filled
            kept_stored = torch.zeros(filled, dtype=torch.bool)
            kept_stored[keep[keep < filled]] = True
            evicted = (~kept_stored).nonzero().squeeze(-1)
            positions = torch.cat([torch.arange(filled, slots), evicted])[: new_in.numel()]
        stored = data.exclude(INDEX) if INDEX in data.keys() else data
        if new_in.numel():
            storage.set(positions, stored[new_in])
        if self._ranks is None:
            self._ranks = torch.full((slots,), -float("inf"), dtype=torch.float64)
        self._ranks[positions] = ranks[new_in]
        self._filled = min(slots, filled + n)
        self._cursor = self._filled % slots
        self._write_count += int(new_in.numel())
        full_index = torch.full((n,), -1, dtype=torch.long)
        full_index[new_in] = positions
        try:
            data.set(INDEX, full_index)
        except RuntimeError:
            pass
        return positions

    def _resume(self) -> None:
        super()._resume()
        storage = self.storage
        self._filled = len(storage)
        if self._filled:
            column = storage._column(self.rank_key)[: self._filled]
            self._ranks = torch.full((storage.slots,), -float("inf"), dtype=torch.float64)
            self._ranks[: self._filled] = reduce_trailing(column, 1, self.reduction).double().cpu()

    def _empty(self) -> None:
        super()._empty()
        self._ranks = None
        self._filled = 0

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(ranks=self._ranks, filled=self._filled)
        return state

    def _check_state(self, state_dict: dict[str, Any], plan: LoadPlan | None = None) -> Any:
        checked = super()._check_state(state_dict, plan)
        name = type(self).__name__
        ranks, filled = checked.get("ranks"), checked.get("filled")
        slots = self._slots_of(plan)
        if not isinstance(filled, int) or filled < 0 or (slots is not None and filled > slots):
            raise ValueError(f"{name}: the saved item count {filled!r} is not in [0, {slots}]")
        if plan is not None and plan.filled is not None and filled != plan.filled:
            raise ValueError(
                f"{name}: the saved item count {filled} differs from the storage state's "
                f"{plan.filled}: the states do not belong together"
            )
        if ranks is not None and (
            not isinstance(ranks, torch.Tensor)
            or ranks.ndim != 1
            or (slots is not None and ranks.shape[0] != slots)
        ):
            raise ValueError(f"{name}: the saved ranks must be a 1-D tensor of {slots} values")
        if ranks is None and filled:
            raise ValueError(f"{name}: the state holds {filled} items but no ranks")
        return checked

    def _apply_state(self, checked: Any) -> None:
        super()._apply_state(checked)
        ranks = checked["ranks"]
        self._ranks = None if ranks is None else ranks.to(torch.float64).clone()
        self._filled = int(checked["filled"])


class ImmutableDatasetWriter(Writer):
    """A writer that refuses every write: the buffer serves a fixed dataset.

    Use it for offline datasets (a storage filled once, e.g. wrapped by a ``TensorStorage`` or
    opened from files), so that a stray ``extend`` raises instead of overwriting data.

    Args:
        compilable: accepted for TorchRL compatibility; it changes nothing here.

    Examples:
        >>> from torchrl.data.replay_buffers import ReplayBuffer, TensorStorage
        >>> rb = ReplayBuffer(storage=TensorStorage(torch.arange(4)),
        ...     writer=ImmutableDatasetWriter())
        >>> len(rb)
        4
        >>> rb.extend(torch.zeros(2))
        Traceback (most recent call last):
        ...
        RuntimeError: this replay buffer holds an immutable dataset (ImmutableDatasetWriter): it cannot be written to
    """

    def __init__(self, compilable: bool = False) -> None:
        super().__init__()

    def _refuse(self) -> RuntimeError:
        return RuntimeError(
            "this replay buffer holds an immutable dataset (ImmutableDatasetWriter): it cannot "
            "be written to"
        )

    def add(self, data: Any) -> int | Index | None:
        raise self._refuse()

    def extend(self, data: Any) -> Index:
        raise self._refuse()
