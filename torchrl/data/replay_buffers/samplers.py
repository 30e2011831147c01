"""Samplers: which stored items a batch is made of.

A sampler answers ``sample(storage, batch_size) -> (index, info)``. The replay buffer tells it about
writes (``extend``, ``add``, ``mark_update``) and forwards ``update_priority``. Every sampler saves
and restores its state with ``state_dict`` / ``load_state_dict``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from torchrl._keys import DONE, MASK, NEXT, POLICY_VERSION, TRUNCATED, WEIGHT
from torchrl._types import IndexLike, NestedKey
from torchrl.data._segment_tree import MinSegmentTree, SumSegmentTree
from torchrl.data.replay_buffers.storages import Index, LoadPlan, Storage
from torchrl.data.replay_buffers.utils import (
    as_long_tensor,
    atomic_torch_save,
    check_reduction,
    nested_key_str,
    reduce_trailing,
    safe_torch_load,
)

__all__ = [
    "ConsumingSampler",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "RandomSampler",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "StalenessAwareSampler",
]


def check_not_empty(storage: Storage) -> int:
    """``len(storage)``; raises ``RuntimeError`` when the storage holds nothing to sample."""
    n = len(storage)
    if n == 0:
        raise RuntimeError("cannot sample from an empty replay buffer: extend it first")
    return n


class Sampler(ABC):
    """Base class of the samplers.

    Subclasses implement :meth:`sample`; the hooks (``extend``, ``update_priority``, ...) default to
    doing nothing, so that code calling them works with every sampler.

    Examples:
        A sampler that returns the most recent items:

        >>> import torch
        >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
        >>> class NewestSampler(Sampler):
        ...     def sample(self, storage, batch_size):
        ...         n = len(storage)
        ...         return torch.arange(n - batch_size, n), {}
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=NewestSampler(), batch_size=2)
        >>> _ = rb.extend(torch.arange(5))
        >>> rb.sample()
        tensor([3, 4])
    """

    #: Set by the replay buffer (its ``generator`` argument); ``None`` uses torch's global RNG.
    _generator: torch.Generator | None = None

    @abstractmethod
    def sample(self, storage: Storage, batch_size: int) -> tuple[Index, dict[NestedKey, Any]]:
        """Returns the index of ``batch_size`` stored items, and a dict of extra information."""

    def extend(self, index: torch.Tensor) -> None:  # noqa: B027
        """Called after items were written at the flat indices ``index``.

        Flat indices number the items row-major over the storage's full ``[*lead, slots]``
        shape; for ``ndim == 1`` storages they are the plain item indices.
        """

    def add(self, index: int | torch.Tensor) -> None:
        """Called after one item was written at the flat index ``index``."""
        self.extend(torch.as_tensor(index).reshape(1))

    def mark_update(self, index: torch.Tensor) -> None:
        """Called after items at the flat indices ``index`` were overwritten in place."""
        self.extend(index)

    def update_priority(  # noqa: B027
        self, index: IndexLike, priority: float | torch.Tensor, *, storage: Storage | None = None
    ) -> None:
        """Sets priorities; samplers without priorities ignore the call."""

    def postprocess(self, data: Any, info: dict[NestedKey, Any]) -> Any:
        """Adjusts sampled data using ``info`` (slice samplers mark slice ends); default: as is."""
        return data

    @property
    def ran_out(self) -> bool:
        """Whether an epoch just ended (samplers without replacement); always False otherwise."""
        return False

    def _resume(self, storage: Storage) -> None:
        """Takes into account items already in a storage the sampler did not see written."""
        if not len(storage):
            return
        if storage.ndim == 1:
            self.extend(torch.arange(len(storage)))
        else:
            flat = torch.arange(storage.max_size)
            self.extend(flat[(flat % storage.slots) < storage._filled])

    def _empty(self) -> None:  # noqa: B027
        """Forgets everything learnt about the stored items."""

    def _visible_len(self, storage: Storage) -> int:
        """How many stored items the buffer reports (samplers that consume items report fewer)."""
        return len(storage)

    def _free_slots(self) -> torch.Tensor:
        """Slots the buffer should write to before its writer's cursor (consumed items)."""
        return torch.zeros(0, dtype=torch.long)

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state (empty for stateless samplers)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:  # noqa: B027
        """Restores what :meth:`state_dict` returned."""

    # Loading in two steps (see Storage._prepare_state): _check_state validates a state against
    # the storage content it will go with (``plan``, None when unknown) and changes nothing;
    # _apply_state installs it. Custom samplers fall back to their load_state_dict.
    def _check_state(self, state_dict: dict[str, Any], plan: LoadPlan | None = None) -> Any:
        if not isinstance(state_dict, dict):
            raise ValueError(f"a {type(self).__name__} state is a dict, got {type(state_dict)}")
        return state_dict

    def _apply_state(self, checked: Any) -> None:
        self.load_state_dict(checked)

    def dumps(self, path: str | Path) -> None:
        """Saves :meth:`state_dict` to ``path/sampler.pt``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        atomic_torch_save(self.state_dict(), path / "sampler.pt")

    def loads(self, path: str | Path, *, trusted: bool = False) -> None:
        """Restores the state saved by :meth:`dumps` in ``path``.

        Args:
            path: the directory given to :meth:`dumps`.
            trusted: allow arbitrary pickled objects in the file (warns; they can run code).

        Raises:
            pickle.UnpicklingError: the file holds objects that need ``trusted=True``.
        """
        state = safe_torch_load(
            Path(path) / "sampler.pt", trusted=trusted, hint="loads(path, trusted=True)"
        )
        self.load_state_dict(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _ranges(mask: np.ndarray, limit: int = 4) -> str:
    """``mask``'s True positions as ranges, for error messages: ``"[0, 8)"``, ``"none"``."""
    where = np.flatnonzero(mask)
    if where.size == 0:
        return "none"
    breaks = np.flatnonzero(np.diff(where) != 1)
    starts = np.concatenate([[where[0]], where[breaks + 1]])
    ends = np.concatenate([where[breaks], [where[-1]]]) + 1
    parts = [f"[{a}, {b})" for a, b in zip(starts[:limit], ends[:limit])]
    return " ".join(parts) + (" ..." if starts.size > limit else "")


class RandomSampler(Sampler):
    """Samples stored items uniformly, with replacement.

    Examples:
        >>> from torchrl.data.replay_buffers.storages import LazyTensorStorage
        >>> storage = LazyTensorStorage(10)
        >>> storage.set(torch.arange(5), torch.arange(5.0))
        >>> index, info = RandomSampler().sample(storage, 3)
        >>> index.shape, bool((index < 5).all())
        (torch.Size([3]), True)
    """

    def sample(self, storage: Storage, batch_size: int) -> tuple[Index, dict[NestedKey, Any]]:
        n = check_not_empty(storage)
        dense = torch.randint(n, (batch_size,), generator=self._generator)
        return storage._dense_to_index(dense), {}


class SamplerWithoutReplacement(Sampler):
    """Samples every stored item once per epoch, in shuffled order.

    An epoch restarts when it is exhausted or when the number of stored items changed.
    ``ran_out`` is True right after the last batch of an epoch (iterating over a buffer stops
    there).

    Args:
        drop_last: drop the last, smaller batch of an epoch; then a batch size larger than the
            number of stored items is an error.
        shuffle: draw items in random order; in storage order otherwise.

    Examples:
        >>> from torchrl.data.replay_buffers.storages import LazyTensorStorage
        >>> storage = LazyTensorStorage(10)
        >>> storage.set(torch.arange(5), torch.arange(5.0))
        >>> sampler = SamplerWithoutReplacement(shuffle=False)
        >>> [sampler.sample(storage, 2)[0].tolist() for _ in range(3)]
        [[0, 1], [2, 3], [4]]
        >>> sampler.ran_out
        True
    """

    def __init__(self, drop_last: bool = False, shuffle: bool = True) -> None:
        self.drop_last = drop_last
        self.shuffle = shuffle
        self._perm: torch.Tensor | None = None
        self._pos = 0
        self._len = 0
        self._ran_out = False

    def sample(self, storage: Storage, batch_size: int) -> tuple[Index, dict[NestedKey, Any]]:
        n = check_not_empty(storage)
        if self.drop_last and batch_size > n:
            raise ValueError(
                f"batch_size={batch_size} is larger than the {n} stored items: with "
                f"drop_last=True no batch of an epoch would be full"
            )
        remaining = n - self._pos
        if (
            self._perm is None
            or self._len != n
            or remaining <= 0
            or (self.drop_last and remaining < batch_size)
        ):
            self._new_epoch(n)
        perm = self._perm
        assert perm is not None  # set by _new_epoch
        take = perm[self._pos : self._pos + batch_size]
        self._pos += take.numel()
        remaining = n - self._pos
        self._ran_out = remaining <= 0 or (self.drop_last and remaining < batch_size)
        return storage._dense_to_index(take), {}

    def _new_epoch(self, n: int) -> None:
        if self.shuffle:
            self._perm = torch.randperm(n, generator=self._generator)
        else:
            self._perm = torch.arange(n)
        self._pos = 0
        self._len = n

    @property
    def ran_out(self) -> bool:
        return self._ran_out

    def _empty(self) -> None:
        self._perm = None
        self._pos = 0
        self._len = 0
        self._ran_out = False

    def state_dict(self) -> dict[str, Any]:
        return {"perm": self._perm, "pos": self._pos, "len": self._len, "ran_out": self._ran_out}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._apply_state(self._check_state(state_dict))

    def _check_state(self, state_dict: dict[str, Any], plan: LoadPlan | None = None) -> Any:
        super()._check_state(state_dict)
        perm, pos, n = state_dict.get("perm"), state_dict.get("pos"), state_dict.get("len")
        if not isinstance(n, int) or not isinstance(pos, int) or n < 0 or not 0 <= pos <= n:
            raise ValueError(
                f"{type(self).__name__}: the saved position {pos!r} and length {n!r} are not "
                f"two ints with 0 <= position <= length"
            )
        if perm is not None:
            if not isinstance(perm, torch.Tensor) or perm.shape != (n,) or perm.is_floating_point():
                raise ValueError(
                    f"{type(self).__name__}: the saved permutation must be an int tensor of "
                    f"shape ({n},)"
                )
            if n and not torch.equal(torch.sort(perm).values, torch.arange(n)):
                raise ValueError(f"{type(self).__name__}: the saved order is not a permutation")
        return (perm, pos, n, bool(state_dict.get("ran_out", False)))

    def _apply_state(self, checked: Any) -> None:
        self._perm, self._pos, self._len, self._ran_out = checked

    def __repr__(self) -> str:
        return f"{type(self).__name__}(drop_last={self.drop_last}, shuffle={self.shuffle})"


class PrioritizedSampler(Sampler):
    """Samples items with probability ``p_i ** alpha / sum_j p_j ** alpha`` (prioritized replay).

    Priorities live in a sum tree and a min tree (C++, ``torchrl._C``): sampling and updating a
    batch cost O(log n) per item. New items get the largest priority seen so far (1 at first). A
    sample comes with importance weights ``(N * P(i)) ** -beta``, divided by their maximum over the
    buffer (from the smallest priority), in ``info["_weight"]``.

    Args:
        max_capacity: the number of items the trees hold (at least the storage size).
        alpha: how much prioritization is used (0: uniform).
        beta: importance-sampling correction exponent (1: full correction); may be changed
            between samples (``sampler.beta = ...``).
        eps: added to priorities, so that none is zero.
        dtype: the trees' float type: ``torch.float`` (default) or ``torch.double``.
        reduction: how a priority with more than one element per item is reduced: ``"max"``,
            ``"min"``, ``"sum"``, ``"mean"`` or ``"median"``.

    Examples:
        >>> from torchrl.data.replay_buffers.storages import LazyTensorStorage
        >>> storage = LazyTensorStorage(4)
        >>> storage.set(torch.arange(2), torch.zeros(2))
        >>> sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0)
        >>> sampler.extend(torch.arange(2))
        >>> sampler.update_priority(torch.tensor([0, 1]), torch.tensor([0.0, 2.0]))
        >>> index, info = sampler.sample(storage, 4)
        >>> index.tolist(), info["_weight"].tolist()
        ([1, 1, 1, 1], [1.0, 1.0, 1.0, 1.0])
    """

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
    ) -> None:
        if not isinstance(max_capacity, int) or max_capacity <= 0:
            raise ValueError(f"max_capacity must be a positive int, got {max_capacity!r}")
        if not alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if not beta >= 0:
            raise ValueError(f"beta must be >= 0, got {beta}")
        if not eps >= 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        self._max_capacity = max_capacity
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.eps = float(eps)
        self.dtype = dtype
        self.reduction = check_reduction(reduction)
        self._max_priority: float | None = None
        self._sum_tree = SumSegmentTree(max_capacity, dtype)
        self._min_tree = MinSegmentTree(max_capacity, dtype)
        # Which flat indices were written (learnt from extend/add): priorities of others are
        # refused, as sampling them would return slots that hold no item.
        self._written = np.zeros(max_capacity, dtype=bool)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        # Ray (pickle protocol 5) hands arrays back as read-only views of its object store.
        if not self._written.flags.writeable:
            self._written = self._written.copy()

    @property
    def max_capacity(self) -> int:
        """The number of items the trees hold."""
        return self._max_capacity

    @property
    def default_priority(self) -> float:
        """The priority given to new items: the largest one seen so far, 1 before any update."""
        return 1.0 if self._max_priority is None else self._max_priority

    def _stored(self, raw: np.ndarray | float) -> np.ndarray | float:
        return np.power(np.asarray(raw, dtype=np.float64) + self.eps, self.alpha)

    # -- sampling ---------------------------------------------------------------------------------
    def _sample_flat(self, storage: Storage, n: int) -> np.ndarray:
        check_not_empty(storage)
        total = self._sum_tree.total()
        if not total > 0:
            raise RuntimeError(
                "every stored item has priority 0: nothing can be sampled (use eps > 0 or "
                "update some priorities)"
            )
        mass = torch.rand(n, dtype=torch.float64, generator=self._generator).numpy()
        mass *= total
        return np.asarray(self._sum_tree.scan_lower_bound(mass))

    def _weights(self, flat: np.ndarray) -> torch.Tensor:
        p = np.array(self._sum_tree[flat], dtype=np.float64)
        p_min = self._min_tree.total()
        # (N p_i / total) ** -beta / max_j (N p_j / total) ** -beta == (p_i / p_min) ** -beta:
        # the max weight belongs to the smallest priority.
        np.maximum(p, p_min, out=p)
        w = np.power(p / p_min, -self.beta)
        return torch.from_numpy(w.astype(np.float32))

    def sample(self, storage: Storage, batch_size: int) -> tuple[Index, dict[NestedKey, Any]]:
        flat = self._sample_flat(storage, batch_size)
        weight = self._weights(flat)
        return storage._flat_to_index(torch.from_numpy(flat)), {WEIGHT: weight}

    # -- priorities ------------------------------------------------------------------------------
    def _flat(self, index: Any, storage: Storage | None) -> np.ndarray:
        if storage is not None and storage.ndim > 1:
            flat_t = storage._index_to_flat(index)
        else:
            flat_t = as_long_tensor(index)
        flat: np.ndarray = flat_t.reshape(-1).cpu().numpy()
        if flat.size and (flat.min() < 0 or flat.max() >= self._max_capacity):
            bad = flat[(flat < 0) | (flat >= self._max_capacity)][0]
            raise IndexError(
                f"index {bad} is out of range for a sampler of capacity {self._max_capacity}"
            )
        return flat

    def extend(self, index: torch.Tensor) -> None:
        flat = self._flat(index, None)
        if flat.size:
            self._written[flat] = True
            value = self._stored(self.default_priority)
            self._sum_tree.update(flat, value)
            self._min_tree.update(flat, value if value > 0 else np.inf)

    def update_priority(
        self, index: IndexLike, priority: float | torch.Tensor, *, storage: Storage | None = None
    ) -> None:
        """Sets the priority of the items at ``index`` (validated first: on error nothing changes).

        Args:
            index: item indices: a tensor ``[B]`` (or ``[B, ndim]`` / a tuple with ``storage``),
                a list or an int.
            priority: one value per item (``[B]``, or ``[B, ...]`` reduced with ``reduction``), or
                a scalar for all.
            storage: the storage the index refers to (needed for ``ndim > 1`` indices).

        Raises:
            ValueError: a priority is negative, NaN or infinite, or the shapes do not match.
            IndexError: an index is outside ``[0, max_capacity)``, or names a slot where no
                item was written (the sampler learns written items from ``extend``/``add``).
        """
        flat = self._flat(index, storage)
        if flat.size:
            known = self._written[flat]
            if not known.all():
                bad = int(flat[~known][0])
                count = int(self._written.sum())
                raise IndexError(
                    f"index {bad} names no written item: {count} item(s) were written (flat "
                    f"indices {_ranges(self._written)}); priorities can only be set for stored "
                    f"items (nothing was updated)"
                )
        prio = self._check_priority(priority, flat.size)
        if flat.size == 0:
            return
        stored = self._stored(prio)
        self._sum_tree.update(flat, stored)
        # Zero priorities are left out of the min tree: the smallest *positive* priority sets
        # the largest weight, as zero-priority items are never drawn.
        self._min_tree.update(flat, np.where(stored > 0, stored, np.inf))
        top = float(prio.max())
        if self._max_priority is None or top > self._max_priority:
            self._max_priority = top

    def _check_priority(self, priority: Any, n: int) -> np.ndarray:
        prio: np.ndarray
        if isinstance(priority, torch.Tensor):
            values = priority.detach()
            if values.ndim > 1:
                values = reduce_trailing(values, 1, self.reduction)
            prio = values.to("cpu", torch.float64).numpy()
        else:
            prio = np.asarray(priority, dtype=np.float64)
            if prio.ndim > 1:
                prio = reduce_trailing(torch.from_numpy(prio), 1, self.reduction).numpy()
        if prio.ndim == 0 or prio.size == 1:
            prio = np.broadcast_to(prio.reshape(()), (n,))
        if prio.shape != (n,):
            raise ValueError(f"got {n} indices but priorities of shape {prio.shape}")
        ok = np.isfinite(prio) & (prio >= 0)
        if not ok.all():
            where = int(np.flatnonzero(~ok)[0])
            raise ValueError(
                f"priorities must be finite and non-negative; got {prio[where]} at position "
                f"{where} of the update (the buffer is unchanged)"
            )
        return prio

    def _empty(self) -> None:
        self._sum_tree = SumSegmentTree(self._max_capacity, self.dtype)
        self._min_tree = MinSegmentTree(self._max_capacity, self.dtype)
        self._max_priority = None
        self._written = np.zeros(self._max_capacity, dtype=bool)

    def state_dict(self) -> dict[str, Any]:
        return {
            "sum_tree": self._sum_tree.state_dict(),
            "min_tree": self._min_tree.state_dict(),
            "max_priority": self._max_priority,
            "alpha": self.alpha,
            "beta": self.beta,
            "eps": self.eps,
            "written": torch.from_numpy(self._written.copy()),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores a :meth:`state_dict` (validated first: on error nothing changes).

        Raises:
            ValueError: the state has another capacity, invalid values, or priorities for
                items it does not mark as written.
        """
        self._apply_state(self._check_state(state_dict))

    def _check_state(self, state_dict: dict[str, Any], plan: LoadPlan | None = None) -> Any:
        super()._check_state(state_dict)
        name, cap = type(self).__name__, self._max_capacity
        trees = []
        for key, tree_cls in (("sum_tree", SumSegmentTree), ("min_tree", MinSegmentTree)):
            saved = state_dict.get(key)
            if not isinstance(saved, dict) or saved.get("capacity") != cap:
                got = saved.get("capacity") if isinstance(saved, dict) else saved
                raise ValueError(
                    f"{name}: the saved {key} has capacity {got!r}, this sampler has {cap}"
                )
            tree = tree_cls(cap, self.dtype)
            tree.load_state_dict(saved)  # a fresh tree: validates the values
            trees.append(tree)
        values = np.asarray(trees[0][np.arange(cap)], dtype=np.float64)
        top = state_dict.get("max_priority")
        if top is not None and not (
            isinstance(top, (int, float)) and np.isfinite(top) and top >= 0
        ):
            raise ValueError(f"{name}: the saved max_priority {top!r} is not a finite number >= 0")
        params = {}
        for key in ("alpha", "beta", "eps"):
            value = state_dict.get(key)
            if not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name}: the saved {key} {value!r} is not a number >= 0")
            params[key] = float(value)
        written = state_dict.get("written")
        if written is not None:
            if not isinstance(written, torch.Tensor) or written.dtype != torch.bool:
                raise ValueError(f"{name}: the saved 'written' entry is not a bool tensor")
            if written.shape != (cap,):
                raise ValueError(
                    f"{name}: the saved 'written' mask has shape {tuple(written.shape)}, "
                    f"expected ({cap},)"
                )
            mask = written.numpy().copy()
        else:  # states saved before the mask existed: items with a priority were written
            mask = values > 0
        if (values[~mask] > 0).any():
            bad = int(np.flatnonzero((values > 0) & ~mask)[0])
            raise ValueError(f"{name}: the state gives a priority to slot {bad}, never written")
        stored = plan.written_flat() if plan is not None else None
        if stored is not None:
            stored_np = stored.numpy()
            if stored_np.size and stored_np.max() >= cap:
                raise ValueError(
                    f"{name}: the storage state holds item {int(stored_np.max())}, beyond this "
                    f"sampler's capacity {cap}"
                )
            in_storage = np.zeros(cap, dtype=bool)
            in_storage[stored_np] = True
            if written is None:
                mask = in_storage
            extra = mask & ~in_storage
            missing = in_storage & ~mask
            if extra.any() or missing.any() or (values[~in_storage] > 0).any():
                raise ValueError(
                    f"{name}: the sampler state covers the slots {_ranges(mask)} but the "
                    f"storage state holds {_ranges(in_storage)}: the two do not belong together"
                )
        return trees, top, params, mask

    def _apply_state(self, checked: Any) -> None:
        (self._sum_tree, self._min_tree), top, params, mask = checked
        self._max_priority = None if top is None else float(top)
        self.alpha, self.beta, self.eps = params["alpha"], params["beta"], params["eps"]
        self._written = mask

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_capacity={self._max_capacity}, alpha={self.alpha}, "
            f"beta={self.beta}, eps={self.eps})"
        )


@dataclass
class _Trajectories:
    """Trajectories of a storage, in numpy arrays of length K (one entry per trajectory).

    ``start`` is the time of the first item and may be negative: the trajectory then begins
    ``-start`` slots before the end of the ring and wraps. Time ``t`` of row ``r`` is the flat
    item ``r * slots + t % t_len``.
    """

    row: np.ndarray
    start: np.ndarray
    length: np.ndarray
    end_key: np.ndarray  # row * t_len + time of the last item, sorted
    first_of_row: np.ndarray  # per row, the position in the arrays of its first trajectory
    t_len: int
    slots: int
    signature: tuple[int, ...]
    _eligible: dict[tuple[int, bool], np.ndarray] = field(default_factory=dict)

    def eligible(self, slice_len: int, strict: bool) -> np.ndarray:
        key = (slice_len, strict)
        cached = self._eligible.get(key)
        if cached is None:
            cached = (
                np.flatnonzero(self.length >= slice_len) if strict else np.arange(self.length.size)
            )
            self._eligible[key] = cached
        return cached

    def locate(self, flat: np.ndarray) -> np.ndarray:
        """The trajectory (position in the arrays) holding each flat item index."""
        row, t = np.divmod(flat, self.slots)
        key = row * self.t_len + t
        j = np.searchsorted(self.end_key, key, side="left")
        j_clipped = np.minimum(j, self.end_key.size - 1)
        # Past the last end of its row, an item belongs to the row's wrapping first trajectory.
        wrap = (j >= self.end_key.size) | (self.row[j_clipped] != row)
        return np.where(wrap, self.first_of_row[row], j_clipped)


def _end_flags(values: torch.Tensor, n_rows: int, ndim: int, t_len: int) -> np.ndarray:
    # A column has the storage's full time length (tensor storages) or its filled one (lists).
    flags = values.detach().reshape(n_rows, values.shape[ndim - 1], -1)[:, :t_len].cpu()
    if flags.dtype != torch.bool:
        flags = flags != 0
    return flags.any(-1).numpy()


def _traj_id_ends(ids: torch.Tensor, n_rows: int, ndim: int, t_len: int, wrap: bool) -> np.ndarray:
    ids = ids.detach().reshape(n_rows, ids.shape[ndim - 1], -1)
    ids_np = ids[:, :t_len, 0].cpu().numpy()
    ends = np.empty((n_rows, t_len), dtype=bool)
    np.not_equal(ids_np[:, :-1], ids_np[:, 1:], out=ends[:, :-1])
    ends[:, -1] = (ids_np[:, -1] != ids_np[:, 0]) if wrap else True
    return ends


def _span_of(span: Any, slice_len: int) -> tuple[int, int]:
    def one(v: object) -> int:
        if v is True:
            return slice_len - 1
        if v is False or v is None:
            return 0
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"span entries must be bools or non-negative ints, got {v!r}")
        return min(v, slice_len - 1)

    if isinstance(span, (tuple, list)):
        if len(span) != 2:
            raise ValueError(f"span must be a bool, an int or a (left, right) pair, got {span!r}")
        return one(span[0]), one(span[1])
    return one(span), one(span)


class SliceSampler(Sampler):
    """Samples slices (contiguous sub-trajectories) of stored trajectories, with replacement.

    A trajectory is drawn uniformly among those long enough, then a slice start uniformly within
    it. The index comes slice after slice (``[num_slices * slice_len]``); ``info`` holds the
    slice ends under ``truncated_key``, and sampled TensorDicts get them or-ed into their
    truncated (and end) entries, so that ``split_trajectories`` can cut them again.

    Args:
        num_slices: slices per batch (``slice_len = batch_size // num_slices``). Exclusive with
            ``slice_len``.
        slice_len: items per slice (``num_slices = batch_size // slice_len``).
        end_key: the per-item end flag; ``("next", "done")`` when neither key is given.
        traj_key: a per-item trajectory id, instead of an end flag.
        ends: a precomputed end-flag tensor of the storage's full shape (static storages).
        trajectories: a precomputed trajectory-id tensor of the storage's full shape.
        cache_values: keep the trajectories between samples. They are recomputed whenever the
            storage changes (its write counter moves), so caching is safe through the buffer.
        truncated_key: where slice ends are written in sampled TensorDicts.
        strict_length: only sample trajectories at least ``slice_len`` long; otherwise shorter
            trajectories give shorter slices and the batch may be smaller.
        span: let slices start before / end after a trajectory, then clip them (more weight on
            the edges, shorter slices): ``True`` (at least one item kept), an int ``i`` (at most
            ``i`` items cut), or a ``(left, right)`` pair.
        pad: when set, slices shorter than ``slice_len`` are padded at their end with this value
            so that every batch has ``num_slices * slice_len`` items; ``"mask"`` marks real items.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data.replay_buffers.storages import LazyTensorStorage
        >>> storage = LazyTensorStorage(20)
        >>> done = torch.zeros(20, 1, dtype=torch.bool)
        >>> done[[4, 9, 19]] = True
        >>> storage.set(torch.arange(20), TensorDict({("next", "done"): done}, [20]))
        >>> index, info = SliceSampler(slice_len=5).sample(storage, 10)
        >>> slices = index.view(2, 5)  # each slice: 5 consecutive items of one trajectory
        >>> bool((slices.diff(dim=1) == 1).all()), info[("next", "truncated")].view(2, 5)[:, -1]
        (True, tensor([True, True]))
    """

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        end_key: NestedKey | None = None,
        traj_key: NestedKey | None = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        cache_values: bool = True,
        truncated_key: NestedKey = (NEXT, TRUNCATED),
        strict_length: bool = True,
        span: bool | int | tuple[bool | int, bool | int] = False,
        pad: float | None = None,
    ) -> None:
        if (num_slices is None) == (slice_len is None):
            raise ValueError("give exactly one of num_slices and slice_len")
        for name, value in (("num_slices", num_slices), ("slice_len", slice_len)):
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if end_key is not None and traj_key is not None:
            raise ValueError("end_key and traj_key are exclusive")
        if ends is not None and trajectories is not None:
            raise ValueError("ends and trajectories are exclusive")
        self.num_slices = num_slices
        self.slice_len = slice_len
        self.traj_key = traj_key
        self.end_key = end_key if end_key is not None or traj_key is not None else (NEXT, DONE)
        self._ends = ends
        self._traj_ids = trajectories
        self.cache_values = cache_values
        self.truncated_key = truncated_key
        self.strict_length = strict_length
        self.span = span
        _span_of(span, 2)  # validates the form early
        self.pad = pad
        self._cache: _Trajectories | None = None

    # -- geometry -----------------------------------------------------------------------------------
    def _shape(self, batch_size: int) -> tuple[int, int]:
        if self.num_slices is not None:
            if batch_size % self.num_slices:
                raise ValueError(
                    f"batch_size={batch_size} is not divisible by num_slices={self.num_slices}"
                )
            return self.num_slices, batch_size // self.num_slices
        slice_len = self.slice_len
        assert slice_len is not None  # one of the two is set (checked at construction)
        if batch_size % slice_len:
            raise ValueError(f"batch_size={batch_size} is not divisible by slice_len={slice_len}")
        return batch_size // slice_len, slice_len

    def _trajectories(self, storage: Storage) -> _Trajectories:
        check_not_empty(storage)
        signature = (id(storage), storage._version, len(storage), storage._cursor)
        cache = self._cache
        if cache is not None and cache.signature == signature:
            return cache
        traj = self._compute(storage, signature)
        if self.cache_values:
            self._cache = traj
        return traj

    def _compute(self, storage: Storage, signature: tuple[int, ...]) -> _Trajectories:
        n_rows = storage._lead_numel()
        slots = storage.slots
        filled = storage._filled
        wrap = filled >= slots
        t_len = slots if wrap else filled
        last = (storage._cursor - 1) % t_len if wrap else filled - 1
        nd = storage.ndim
        if self._ends is not None:
            ends = _end_flags(self._ends, n_rows, nd, t_len)
        elif self._traj_ids is not None:
            ends = _traj_id_ends(self._traj_ids, n_rows, nd, t_len, wrap)
        elif self.traj_key is not None:
            ends = _traj_id_ends(storage._column(self.traj_key), n_rows, nd, t_len, wrap)
        else:
            ends = _end_flags(storage._column(self.end_key), n_rows, nd, t_len)
        if not ends.flags.writeable:
            ends = ends.copy()
        # The newest item closes its trajectory: the next slot holds older data (or nothing).
        ends[:, last] = True
        end_key = np.flatnonzero(ends)
        row, t_end = np.divmod(end_key, t_len)
        k = end_key.size
        first = np.ones(k, dtype=bool)
        np.not_equal(row[1:], row[:-1], out=first[1:])
        last_in_row = np.ones(k, dtype=bool)
        np.not_equal(row[:-1], row[1:], out=last_in_row[:-1])
        start = np.empty(k, dtype=np.int64)
        start[1:] = t_end[:-1] + 1
        # The first trajectory of a row starts after the row's last end, wrapping when full.
        start[first] = (t_end[last_in_row] + 1 - t_len) if wrap else 0
        first_of_row = np.flatnonzero(first)
        return _Trajectories(
            row=row,
            start=start,
            length=t_end - start + 1,
            end_key=end_key,
            first_of_row=first_of_row,
            t_len=t_len,
            slots=slots,
            signature=signature,
        )

    def _no_trajectory_error(self, traj: _Trajectories, slice_len: int) -> ValueError:
        return ValueError(
            f"no stored trajectory has at least slice_len={slice_len} items (the longest has "
            f"{int(traj.length.max())}); store longer trajectories, lower slice_len or pass "
            f"strict_length=False"
        )

    def _positions(
        self,
        traj: _Trajectories,
        pick: np.ndarray,
        begin: np.ndarray,
        seg: np.ndarray,
        slice_len: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Flat indices of the slices ``[begin, begin + seg)`` of trajectories ``pick``.

        Returns ``(flat, is_last, mask)``: ``mask`` is None unless slices were padded.
        """
        steps = np.arange(slice_len)
        time = (traj.start[pick] + begin)[:, None] + steps
        flat = traj.row[pick][:, None] * traj.slots + time % traj.t_len
        is_last = steps == (seg - 1)[:, None]
        if (seg == slice_len).all():
            return flat.reshape(-1), is_last.reshape(-1), None
        valid = steps < seg[:, None]
        if self.pad is not None:
            last_flat = np.take_along_axis(flat, (seg - 1)[:, None], 1)
            flat = np.where(valid, flat, last_flat)
            return flat.reshape(-1), is_last.reshape(-1), valid.reshape(-1)
        return flat[valid], is_last[valid], None

    def _info(self, is_last: np.ndarray, mask: np.ndarray | None) -> dict[NestedKey, Any]:
        info: dict[NestedKey, Any] = {self.truncated_key: torch.from_numpy(is_last)}
        if mask is not None:
            info[MASK] = torch.from_numpy(mask)
        return info

    # -- sampling -----------------------------------------------------------------------------------
    def sample(self, storage: Storage, batch_size: int) -> tuple[Index, dict[NestedKey, Any]]:
        num_slices, slice_len = self._shape(batch_size)
        traj = self._trajectories(storage)
        eligible = traj.eligible(slice_len, self.strict_length)
        if eligible.size == 0:
            raise self._no_trajectory_error(traj, slice_len)
        choice = torch.randint(eligible.size, (num_slices,), generator=self._generator).numpy()
        pick = eligible[choice]
        length = traj.length[pick]
        left, right = _span_of(self.span, slice_len)
        lo = np.full(num_slices, -left)
        hi = np.minimum(np.maximum(length - slice_len, 0) + right, length - 1)
        u = torch.rand(num_slices, dtype=torch.float64, generator=self._generator).numpy()
        window = lo + np.floor(u * (hi - lo + 1)).astype(np.int64)
        begin = np.maximum(window, 0)
        seg = np.minimum(window + slice_len, length) - begin
        flat, is_last, mask = self._positions(traj, pick, begin, seg, slice_len)
        return storage._flat_to_index(torch.from_numpy(flat)), self._info(is_last, mask)

    def postprocess(self, data: Any, info: dict[NestedKey, Any]) -> Any:
        """Or-s slice ends into the truncated (and end) entries; fills padded items with ``pad``."""
        if not isinstance(data, TensorDictBase):
            return data
        is_last = info.get(self.truncated_key)
        if is_last is None:
            return data
        n = is_last.shape[0]
        mask = info.get(MASK)
        if mask is not None:
            keep = mask
            pad = self.pad

            def fill(x: torch.Tensor) -> torch.Tensor:
                m = keep.reshape(n, *([1] * (x.ndim - 1))).to(x.device)
                return torch.where(m, x, torch.as_tensor(pad, dtype=x.dtype, device=x.device))

            data = data.apply(fill)
            data.set(MASK, mask)
        keys = [self.truncated_key]
        # Without a traj_key the end_key is always set (``("next", "done")`` by default).
        if (
            self.traj_key is None
            and self.end_key is not None
            and self.end_key != self.truncated_key
        ):
            keys.append(self.end_key)
        for key in keys:
            current = data.get(key, None)
            if current is None:
                data.set(key, is_last.reshape(n, 1).to(data.device or "cpu"))
            else:
                flag = is_last.reshape(n, *([1] * (current.ndim - 1))).to(current.device)
                data.set(
                    key,
                    current | flag
                    if current.dtype == torch.bool
                    else (current.bool() | flag).to(current.dtype),
                )
        return data

    def _empty(self) -> None:
        self._cache = None

    def __repr__(self) -> str:
        what = (
            f"end_key={nested_key_str(self.end_key)}"
            if self.traj_key is None and self.end_key is not None
            else f"traj_key={self.traj_key!r}"
        )
        size = f"num_slices={self.num_slices}" if self.num_slices else f"slice_len={self.slice_len}"
        return f"{type(self).__name__}({size}, {what}, strict_length={self.strict_length})"


class SliceSamplerWithoutReplacement(SliceSampler):
    """Samples slices without replacement: no item is drawn twice within an epoch.

    An epoch cuts every eligible trajectory into consecutive non-overlapping windows of
    ``slice_len`` items (from a random offset when ``shuffle``), shuffles them, and serves
    ``num_slices`` per batch. The epoch restarts when exhausted or when the storage changes.

    Args:
        num_slices: slices per batch. Exclusive with ``slice_len``.
        slice_len: items per slice.
        drop_last: drop the last, smaller batch of an epoch (then an epoch with fewer windows
            than ``num_slices`` is an error).
        end_key: see :class:`SliceSampler`.
        traj_key: see :class:`SliceSampler`.
        ends: see :class:`SliceSampler`.
        trajectories: see :class:`SliceSampler`.
        truncated_key: see :class:`SliceSampler`.
        strict_length: trajectories shorter than ``slice_len`` give one short window when False.
        shuffle: random window order and offsets; storage order otherwise.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data.replay_buffers.storages import LazyTensorStorage
        >>> storage = LazyTensorStorage(8)
        >>> storage.set(torch.arange(8), TensorDict({("next", "done"): torch.zeros(8, 1,
        ...     dtype=torch.bool)}, [8]))
        >>> sampler = SliceSamplerWithoutReplacement(slice_len=2, shuffle=False)
        >>> [sampler.sample(storage, 4)[0].tolist() for _ in range(2)], sampler.ran_out
        ([[0, 1, 2, 3], [4, 5, 6, 7]], True)
    """

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        drop_last: bool = False,
        end_key: NestedKey | None = None,
        traj_key: NestedKey | None = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        truncated_key: NestedKey = (NEXT, TRUNCATED),
        strict_length: bool = True,
        shuffle: bool = True,
    ) -> None:
        super().__init__(
            num_slices=num_slices,
            slice_len=slice_len,
            end_key=end_key,
            traj_key=traj_key,
            ends=ends,
            trajectories=trajectories,
            truncated_key=truncated_key,
            strict_length=strict_length,
        )
        self.drop_last = drop_last
        self.shuffle = shuffle
        self._windows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._pos = 0
        self._epoch_key: tuple[int, ...] | None = None
        self._ran_out = False
        self._stale = False

    def extend(self, index: torch.Tensor) -> None:
        self._stale = True

    def _new_epoch(self, traj: _Trajectories, slice_len: int) -> None:
        eligible = traj.eligible(slice_len, self.strict_length)
        length = traj.length[eligible]
        counts = np.maximum(length // slice_len, 1 if not self.strict_length else 0)
        spare = length - counts * slice_len
        if self.shuffle:
            u = torch.rand(eligible.size, dtype=torch.float64, generator=self._generator).numpy()
            offset0 = np.floor(u * (np.maximum(spare, 0) + 1)).astype(np.int64)
        else:
            offset0 = np.zeros(eligible.size, dtype=np.int64)
        which = np.repeat(np.arange(eligible.size), counts)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        k = np.arange(which.size) - first
        begin = offset0[which] + k * slice_len
        seg = np.minimum(slice_len, length[which] - begin)
        if self.shuffle:
            order = torch.randperm(which.size, generator=self._generator).numpy()
        else:
            order = np.arange(which.size)
        self._windows = (eligible[which][order], begin[order], seg[order])
        self._pos = 0
        self._stale = False

    def sample(self, storage: Storage, batch_size: int) -> tuple[Index, dict[NestedKey, Any]]:
        num_slices, slice_len = self._shape(batch_size)
        traj = self._trajectories(storage)
        key = (len(storage), storage._cursor, slice_len)
        if self._windows is None or self._stale or self._epoch_key != key:
            self._new_epoch(traj, slice_len)
            self._epoch_key = key
        windows = self._windows
        assert windows is not None
        total = windows[0].size
        if total == 0:
            raise self._no_trajectory_error(traj, slice_len)
        if self.drop_last and num_slices > total:
            raise ValueError(
                f"{num_slices} slices per batch but an epoch has only {total} windows of "
                f"{slice_len} items: with drop_last=True no batch would be full"
            )
        remaining = total - self._pos
        if remaining <= 0 or (self.drop_last and remaining < num_slices):
            self._new_epoch(traj, slice_len)
            windows = self._windows
            assert windows is not None
        pick, begin, seg = (a[self._pos : self._pos + num_slices] for a in windows)
        self._pos += pick.size
        remaining = total - self._pos
        self._ran_out = remaining <= 0 or (self.drop_last and remaining < num_slices)
        flat, is_last, mask = self._positions(traj, pick, begin, seg, slice_len)
        return storage._flat_to_index(torch.from_numpy(flat)), self._info(is_last, mask)

    @property
    def ran_out(self) -> bool:
        return self._ran_out

    def _empty(self) -> None:
        super()._empty()
        self._windows = None
        self._pos = 0
        self._ran_out = False

    def state_dict(self) -> dict[str, Any]:
        windows = None if self._windows is None else [torch.from_numpy(a) for a in self._windows]
        return {
            "windows": windows,
            "pos": self._pos,
            "epoch_key": self._epoch_key,
            "ran_out": self._ran_out,
            "stale": self._stale,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._apply_state(self._check_state(state_dict))

    def _check_state(self, state_dict: dict[str, Any], plan: LoadPlan | None = None) -> Any:
        super()._check_state(state_dict)
        name = type(self).__name__
        windows, pos, key = (
            state_dict.get("windows"),
            state_dict.get("pos"),
            state_dict.get("epoch_key"),
        )
        arrays = None
        total = 0
        if windows is not None:
            ok = isinstance(windows, (list, tuple)) and len(windows) == 3
            ok = ok and all(
                isinstance(w, torch.Tensor) and w.ndim == 1 and not w.is_floating_point()
                for w in windows
            )
            ok = ok and len({w.shape[0] for w in windows}) == 1
            if not ok:
                raise ValueError(f"{name}: the saved windows must be three 1-D int tensors")
            arrays = tuple(w.numpy().copy() for w in windows)
            total = arrays[0].size
        if not isinstance(pos, int) or not 0 <= pos <= total:
            raise ValueError(f"{name}: the saved position {pos!r} is not in [0, {total}]")
        if key is not None and (
            not isinstance(key, (list, tuple)) or not all(isinstance(k, int) for k in key)
        ):
            raise ValueError(f"{name}: the saved epoch key {key!r} is not a tuple of ints")
        return (
            arrays,
            pos,
            None if key is None else tuple(key),
            bool(state_dict.get("ran_out", False)),
            bool(state_dict.get("stale", True)),
        )

    def _apply_state(self, checked: Any) -> None:
        self._windows, self._pos, self._epoch_key, self._ran_out, self._stale = checked


class PrioritizedSliceSampler(SliceSampler):
    """Samples slices whose first item is drawn by priority (prioritized replay of sequences).

    An item is drawn with probability ``p ** alpha / sum p ** alpha`` (as in
    :class:`PrioritizedSampler`, which this class uses underneath), and its slice starts there,
    moved back if needed to fit in its trajectory. Draws that land in a trajectory shorter than
    ``slice_len`` (with ``strict_length``) are drawn again. Every item of a slice gets its own
    importance weight in ``info["_weight"]``; priorities are updated per item.

    Args:
        max_capacity: the number of items the priority trees hold.
        alpha: prioritization exponent.
        beta: importance-sampling exponent.
        eps: added to priorities.
        dtype: the trees' float type.
        reduction: how multi-element priorities are reduced.
        num_slices: see :class:`SliceSampler`.
        slice_len: see :class:`SliceSampler`.
        end_key: see :class:`SliceSampler`.
        traj_key: see :class:`SliceSampler`.
        ends: see :class:`SliceSampler`.
        trajectories: see :class:`SliceSampler`.
        cache_values: see :class:`SliceSampler`.
        truncated_key: see :class:`SliceSampler`.
        strict_length: see :class:`SliceSampler`.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data.replay_buffers.storages import LazyTensorStorage
        >>> storage = LazyTensorStorage(10)
        >>> storage.set(torch.arange(10), TensorDict({("next", "done"): torch.zeros(10, 1,
        ...     dtype=torch.bool)}, [10]))
        >>> sampler = PrioritizedSliceSampler(10, alpha=1.0, beta=1.0, slice_len=3)
        >>> sampler.extend(torch.arange(10))
        >>> index, info = sampler.sample(storage, 6)
        >>> index.shape, info["_weight"].shape
        (torch.Size([6]), torch.Size([6]))
    """

    _MAX_REDRAWS = 64

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        end_key: NestedKey | None = None,
        traj_key: NestedKey | None = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        cache_values: bool = True,
        truncated_key: NestedKey = (NEXT, TRUNCATED),
        strict_length: bool = True,
    ) -> None:
        super().__init__(
            num_slices=num_slices,
            slice_len=slice_len,
            end_key=end_key,
            traj_key=traj_key,
            ends=ends,
            trajectories=trajectories,
            cache_values=cache_values,
            truncated_key=truncated_key,
            strict_length=strict_length,
        )
        self._prio = PrioritizedSampler(max_capacity, alpha, beta, eps, dtype, reduction)

    @property
    def alpha(self) -> float:
        """Prioritization exponent."""
        return self._prio.alpha

    @property
    def beta(self) -> float:
        """Importance-sampling exponent (settable)."""
        return self._prio.beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._prio.beta = float(value)

    def sample(self, storage: Storage, batch_size: int) -> tuple[Index, dict[NestedKey, Any]]:
        num_slices, slice_len = self._shape(batch_size)
        traj = self._trajectories(storage)
        self._prio._generator = self._generator
        anchors = self._prio._sample_flat(storage, num_slices)
        pick = traj.locate(anchors)
        if self.strict_length:
            for _ in range(self._MAX_REDRAWS):
                short = traj.length[pick] < slice_len
                if not short.any():
                    break
                redraw = self._prio._sample_flat(storage, int(short.sum()))
                anchors[short] = redraw
                pick[short] = traj.locate(redraw)
            else:
                if traj.eligible(slice_len, True).size == 0:
                    raise self._no_trajectory_error(traj, slice_len)
                raise RuntimeError(
                    f"could not draw {num_slices} slices of {slice_len} items in "
                    f"{self._MAX_REDRAWS} rounds: the priority mass sits on shorter trajectories"
                )
        length = traj.length[pick]
        time = anchors % traj.slots
        offset = (time - traj.start[pick]) % traj.t_len
        begin = np.minimum(offset, np.maximum(length - slice_len, 0))
        seg = np.minimum(slice_len, length - begin)
        flat, is_last, mask = self._positions(traj, pick, begin, seg, slice_len)
        info = self._info(is_last, mask)
        info[WEIGHT] = self._prio._weights(flat)
        return storage._flat_to_index(torch.from_numpy(flat)), info

    def extend(self, index: torch.Tensor) -> None:
        self._prio.extend(index)

    def update_priority(
        self, index: IndexLike, priority: float | torch.Tensor, *, storage: Storage | None = None
    ) -> None:
        """Sets per-item priorities; see :meth:`PrioritizedSampler.update_priority`."""
        self._prio.update_priority(index, priority, storage=storage)

    def _empty(self) -> None:
        super()._empty()
        self._prio._empty()

    def state_dict(self) -> dict[str, Any]:
        return self._prio.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._prio.load_state_dict(state_dict)

    def _check_state(self, state_dict: dict[str, Any], plan: LoadPlan | None = None) -> Any:
        return self._prio._check_state(state_dict, plan)

    def _apply_state(self, checked: Any) -> None:
        self._prio._apply_state(checked)


class ConsumingSampler(Sampler):
    """Samples stored items uniformly; an item is consumed after ``max_sample_count`` draws.

    A consumed item can no longer be drawn and no longer counts in ``len(buffer)``; its slot
    becomes free again. A :class:`~torchrl.data.ReplayBuffer` writes new items into free slots
    first (oldest consumed first), then continues with its writer. Overwriting a slot gives the new
    item a fresh count. Within one batch an item appears at most once; when fewer items are left
    than asked for, the batch holds the remaining ones, and sampling with nothing left raises
    ``RuntimeError``. Only storages with ``ndim == 1`` are supported.

    Args:
        max_sample_count: how many times an item can be drawn before it is consumed.

    Examples:
        >>> from torchrl.data import ConsumingSampler, ListStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=ListStorage(10), sampler=ConsumingSampler(), batch_size=3)
        >>> rb.extend([torch.tensor(i) for i in range(4)]).tolist()
        [0, 1, 2, 3]
        >>> len(rb.sample()), len(rb)
        (3, 1)
    """

    def __init__(self, max_sample_count: int = 1) -> None:
        if isinstance(max_sample_count, bool) or not isinstance(max_sample_count, int):
            raise TypeError(f"max_sample_count must be an int, got {max_sample_count!r}")
        if max_sample_count < 1:
            raise ValueError(f"max_sample_count must be >= 1, got {max_sample_count}")
        self.max_sample_count = max_sample_count
        self._counts = torch.zeros(0, dtype=torch.long)
        self._live = torch.zeros(0, dtype=torch.bool)
        # Consumed slots, oldest first (a dict keeps insertion order and removes in O(1)).
        self._free: dict[int, None] = {}
        self._n_live = 0

    def _grow(self, size: int) -> None:
        if size > self._live.numel():
            extra = size - self._live.numel()
            self._counts = torch.cat([self._counts, torch.zeros(extra, dtype=torch.long)])
            self._live = torch.cat([self._live, torch.zeros(extra, dtype=torch.bool)])

    @staticmethod
    def _check_storage(storage: Storage) -> None:
        if storage.ndim != 1:
            raise ValueError(
                f"ConsumingSampler supports storages with ndim=1 only, got ndim={storage.ndim}"
            )

    def extend(self, index: torch.Tensor) -> None:
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1)
        if not index.numel():
            return
        self._grow(int(index.max()) + 1)
        # Overwritten consumed slots leave the free list (found without a loop over the writes).
        consumed = ~self._live[index] & (self._counts[index] >= self.max_sample_count)
        for i in index[consumed].tolist():
            self._free.pop(i, None)
        self._n_live += int((~self._live[torch.unique(index)]).sum())
        self._counts[index] = 0
        self._live[index] = True

    def _available(self, n: int) -> torch.Tensor:
        self._grow(n)
        return torch.nonzero(self._live[:n]).reshape(-1)

    def sample(self, storage: Storage, batch_size: int) -> tuple[Index, dict[NestedKey, Any]]:
        self._check_storage(storage)
        n = check_not_empty(storage)
        self._grow(n)
        if not self._n_live:
            raise RuntimeError(
                f"ConsumingSampler: all {n} stored items were consumed (each can be sampled "
                f"{self.max_sample_count} time(s)); extend the buffer before sampling again"
            )
        k = min(batch_size, self._n_live)
        index = None
        if 4 * self._n_live >= n:
            # Mostly live: draw uniform candidates, keep distinct live ones, pick k at random
            # (a uniform k-subset), instead of listing every live slot.
            cand = torch.randint(n, (4 * k + 16,), generator=self._generator)
            cand = torch.unique(cand[self._live[cand]])
            if cand.numel() >= k:
                index = cand[torch.randperm(cand.numel(), generator=self._generator)[:k]]
        if index is None:
            available = self._available(n)
            index = available[torch.randperm(available.numel(), generator=self._generator)[:k]]
        self._counts[index] += 1
        consumed = index[self._counts[index] >= self.max_sample_count]
        self._live[consumed] = False
        self._n_live -= consumed.numel()
        for i in consumed.tolist():
            self._free[i] = None
        return index, {}

    def can_sample(self, storage: Storage, batch_size: int) -> bool:
        """Whether ``batch_size`` unconsumed items are stored.

        Args:
            storage: the buffer's storage.
            batch_size: the number of items wanted.
        """
        return self._n_live >= batch_size

    @property
    def ran_out(self) -> bool:
        return not self._n_live

    def _visible_len(self, storage: Storage) -> int:
        return self._n_live

    def _free_slots(self) -> torch.Tensor:
        return torch.tensor(list(self._free), dtype=torch.long)

    def _empty(self) -> None:
        self._counts = torch.zeros(0, dtype=torch.long)
        self._live = torch.zeros(0, dtype=torch.bool)
        self._free = {}
        self._n_live = 0

    def state_dict(self) -> dict[str, Any]:
        return {
            "counts": self._counts.clone(),
            "live": self._live.clone(),
            "free": list(self._free),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._apply_state(self._check_state(state_dict))

    def _check_state(self, state_dict: dict[str, Any], plan: LoadPlan | None = None) -> Any:
        super()._check_state(state_dict)
        counts, live, free = (
            state_dict.get("counts"),
            state_dict.get("live"),
            state_dict.get("free"),
        )
        if (
            not isinstance(counts, torch.Tensor)
            or not isinstance(live, torch.Tensor)
            or counts.shape != live.shape
            or counts.ndim != 1
            or live.dtype != torch.bool
            or counts.is_floating_point()
        ):
            raise ValueError(
                "ConsumingSampler: the saved state needs 'counts' (int) and 'live' (bool) "
                "tensors of one equal 1-dim shape"
            )
        if not isinstance(free, list) or any(
            not isinstance(i, int) or not 0 <= i < live.numel() or bool(live[i]) for i in free
        ):
            raise ValueError(
                "ConsumingSampler: the saved 'free' list must hold indices of consumed slots"
            )
        return counts.clone(), live.clone(), dict.fromkeys(free)

    def _apply_state(self, checked: Any) -> None:
        self._counts, self._live, self._free = checked
        self._n_live = int(self._live.sum())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_sample_count={self.max_sample_count})"


def _default_staleness_weight(staleness: torch.Tensor) -> torch.Tensor:
    """``1 / (staleness + 1)``: fresh items weigh 1, an item one version old weighs 1/2, ..."""
    return 1.0 / (staleness.double() + 1.0)


class StalenessAwareSampler(Sampler):
    """Samples items in proportion to their freshness, and leaves out items that are too stale.

    Every stored item carries the version of the policy that collected it (``version_key``);
    the trainer sets :attr:`consumer_version` (e.g. after each weight update). An item's
    staleness is ``consumer_version - version`` (negative values count as 0); items staler than
    ``max_staleness`` are never sampled, the others with probability proportional to
    ``staleness_weight_fn(staleness)``. Sampling is with replacement. The storage must hold
    TensorDicts with the version entry.

    Args:
        max_staleness: the largest staleness sampled; ``-1`` (default) for no limit.
        staleness_weight_fn: maps the ``int64`` staleness tensor to non-negative weights;
            ``1 / (staleness + 1)`` by default.
        version_key: the entry holding the policy version. Defaults to ``"policy_version"``.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data.replay_buffers import LazyTensorStorage, TensorDictReplayBuffer
        >>> sampler = StalenessAwareSampler(max_staleness=1)
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler)
        >>> _ = rb.extend(TensorDict(policy_version=torch.tensor([0, 1, 2, 3]), batch_size=[4]))
        >>> sampler.consumer_version = 3
        >>> sorted(set(rb.sample(50)["policy_version"].tolist()))
        [2, 3]
    """

    def __init__(
        self,
        max_staleness: int = -1,
        staleness_weight_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        version_key: NestedKey = POLICY_VERSION,
    ) -> None:
        if not isinstance(max_staleness, int) or max_staleness < -1:
            raise ValueError(f"max_staleness must be an int >= -1, got {max_staleness!r}")
        if staleness_weight_fn is not None and not callable(staleness_weight_fn):
            raise TypeError("staleness_weight_fn must be callable")
        self.max_staleness = max_staleness
        self.staleness_weight_fn = staleness_weight_fn or _default_staleness_weight
        self.version_key = version_key
        self._consumer_version = 0

    @property
    def consumer_version(self) -> int:
        """The policy version the trainer is at; staleness is measured from it."""
        return self._consumer_version

    @consumer_version.setter
    def consumer_version(self, value: int) -> None:
        if isinstance(value, torch.Tensor):
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"consumer_version must be an int, got {value!r}")
        self._consumer_version = value

    def _versions(self, storage: Storage) -> torch.Tensor:
        """The version of every stored item, in the storage's dense order."""
        column = storage._column(self.version_key)
        nb = storage.ndim
        filled = storage._filled if nb > 1 else len(storage)
        column = column[(slice(None),) * (nb - 1) + (slice(0, filled),)]
        values = column.reshape(*column.shape[:nb], -1)[..., 0]
        if nb > 1:
            # Dense order is time-major: d = t * n_rows + row (see Storage._dense_to_index).
            values = values.reshape(-1, filled).T
        return values.reshape(-1).long()

    def staleness(self, storage: Storage) -> torch.Tensor:
        """The staleness of every stored item (``>= 0``), in the storage's dense order.

        Args:
            storage: the storage sampled from.

        Returns:
            An ``int64`` tensor of ``len(storage)`` values.
        """
        return (self._consumer_version - self._versions(storage)).clamp_min(0)

    def sample(self, storage: Storage, batch_size: int) -> tuple[Index, dict[NestedKey, Any]]:
        check_not_empty(storage)
        staleness = self.staleness(storage)
        weights = torch.as_tensor(self.staleness_weight_fn(staleness)).double().reshape(-1)
        if (
            weights.shape != staleness.shape
            or bool((weights < 0).any())
            or not bool(torch.isfinite(weights).all())
        ):
            raise ValueError(
                f"staleness_weight_fn must return {staleness.numel()} finite weights >= 0, got "
                f"a tensor of shape {tuple(weights.shape)}"
            )
        if self.max_staleness >= 0:
            weights = torch.where(staleness > self.max_staleness, 0.0, weights)
        if not bool((weights > 0).any()):
            raise RuntimeError(
                f"no stored item can be sampled: every item has staleness > max_staleness="
                f"{self.max_staleness} (or weight 0) at consumer_version={self._consumer_version} "
                f"(least stale: {int(staleness.min())})"
            )
        dense = torch.multinomial(weights, batch_size, replacement=True, generator=self._generator)
        return storage._dense_to_index(dense), {"staleness": staleness[dense]}

    def state_dict(self) -> dict[str, Any]:
        return {"consumer_version": self._consumer_version}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._apply_state(self._check_state(state_dict))

    def _check_state(self, state_dict: dict[str, Any], plan: LoadPlan | None = None) -> Any:
        value = state_dict.get("consumer_version") if isinstance(state_dict, dict) else None
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(
                f"a StalenessAwareSampler state is {{'consumer_version': int}}, got {state_dict!r}"
            )
        return value

    def _apply_state(self, checked: Any) -> None:
        self._consumer_version = int(checked)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_staleness={self.max_staleness}, "
            f"version_key={self.version_key!r}, consumer_version={self._consumer_version})"
        )
