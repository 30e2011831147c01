"""Samplers: which stored items a batch is made of.

A sampler answers ``sample(storage, batch_size) -> (index, info)``. The replay buffer tells it about
writes (``extend``, ``add``, ``mark_update``) and forwards ``update_priority``. Every sampler saves
and restores its state with ``state_dict`` / ``load_state_dict``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np
import torch

from torchrl._keys import WEIGHT
from torchrl._types import IndexLike, NestedKey
from torchrl.data._segment_tree import MinSegmentTree, SumSegmentTree
from torchrl.data.replay_buffers.storages import Index, LoadPlan, Storage
from torchrl.data.replay_buffers.utils import (
    as_long_tensor,
    atomic_torch_save,
    check_reduction,
    reduce_trailing,
    safe_torch_load,
)

__all__ = [
    "PrioritizedSampler",
    "RandomSampler",
    "Sampler",
    "SamplerWithoutReplacement",
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
