"""Sum and min segment trees for prioritized sampling: C++ kernels with a pure-NumPy fallback.

``SumSegmentTree`` and ``MinSegmentTree`` run on the torch-free C++ extension ``torchrl._C`` when
it is built, and on a vectorized NumPy implementation otherwise (announced once with a warning).
Both backends give bit-identical results: they store the same complete binary tree (leaves padded
to a power of two with the identity of the reduction) and add in the same order.
"""

from __future__ import annotations

import operator
import threading
from typing import Any, Literal

import numpy as np
import torch

from torchrl._utils import warn_once

try:
    # the compiled leaf itself, not the top package's namespace (data sits below ``torchrl``)
    import torchrl._C as _C
except ImportError as _err:  # the pure-NumPy trees take over; see _resolve_backend
    _C = None
    _C_IMPORT_ERROR: ImportError | None = _err
else:
    _C_IMPORT_ERROR = None

_HAS_C = _C is not None

__all__ = [
    "MinSegmentTree",
    "NumpyMinSegmentTree",
    "NumpySumSegmentTree",
    "SumSegmentTree",
]

Backend = Literal["cpp", "numpy"]
ArrayLike = Any  # int, float, sequences, numpy arrays, torch tensors

# Above 2**50 leaves the tree fits in no memory (same bound as the C++ side).
_MAX_CAPACITY = 1 << 50

_OVERFLOW_MESSAGE = (
    "scan_lower_bound needs a finite total, but the sum of the values overflows the tree's "
    "dtype (use a float64 tree or smaller values)"
)

_REBUILD_HINT = (
    "rebuild it from the torchrl source folder with `python setup.py build_ext --inplace` "
    "(or `make build`)"
)


def _resolve_backend(backend: Backend | None) -> Backend:
    if backend is None:
        if _C is not None:
            return "cpp"
        warn_once(
            f"torchrl._C did not build or cannot be imported ({_C_IMPORT_ERROR}); the segment "
            f"trees use the slower pure-NumPy implementation. To get the C++ trees, "
            f"{_REBUILD_HINT}."
        )
        return "numpy"
    if backend == "cpp":
        if _C is None:
            raise ImportError(
                f"backend='cpp' needs the C++ extension torchrl._C, which cannot be imported; "
                f"{_REBUILD_HINT}."
            ) from _C_IMPORT_ERROR
        return "cpp"
    if backend == "numpy":
        return "numpy"
    raise ValueError(f"backend must be 'cpp', 'numpy' or None, got {backend!r}")


def _resolve_dtype(dtype: Any) -> np.dtype:
    resolved: np.dtype | None
    if isinstance(dtype, torch.dtype):
        names = {torch.float64: "float64", torch.float32: "float32"}
        resolved = np.dtype(names[dtype]) if dtype in names else None
    else:
        try:
            resolved = np.dtype(dtype)
        except TypeError:
            resolved = None
    # ``is None`` first: numpy compares None equal to float64.
    if resolved is None or resolved not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise ValueError(f"dtype must be float64 or float32 (torch or numpy), got {dtype!r}")
    return resolved


def _to_numpy(x: ArrayLike) -> np.ndarray:
    """Returns ``x`` as a numpy array, without copying CPU tensors and arrays."""
    if isinstance(x, torch.Tensor):
        if x.requires_grad:
            x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        if x.dtype == torch.bfloat16:  # numpy has no bfloat16
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def _as_indices(index: ArrayLike, capacity: int) -> np.ndarray:
    if isinstance(index, slice):
        return np.arange(*index.indices(capacity), dtype=np.int64)
    idx = _to_numpy(index)
    if idx.size == 0 and idx.dtype.kind not in "iu":  # e.g. ``[]`` comes as float64
        idx = idx.astype(np.int64)
    return idx


# ---------------------------------------------------------------------------------------------
# NumPy backend: the same checks, layout and arithmetic as csrc/segment_tree.{h,cpp}.
# ---------------------------------------------------------------------------------------------


def _check_indices(obj: ArrayLike, capacity: int) -> np.ndarray:
    arr = np.asarray(obj)
    if arr.ndim != 1:
        raise ValueError(f"indices must be a 1-D array, got {arr.ndim} dimensions")
    if arr.size > 0 and arr.dtype.kind not in "iu":
        raise TypeError(f"indices must be integers, got dtype {arr.dtype}")
    idx = arr.astype(np.int64, copy=False)
    if idx.size > 0:
        bad = (idx < 0) | (idx >= capacity)
        if bad.any():
            first = int(idx[np.flatnonzero(bad)[0]])
            raise IndexError(f"index {first} is out of range for a tree of capacity {capacity}")
    return idx


def _as_values(obj: ArrayLike, dtype: np.dtype, what: str) -> np.ndarray:
    arr = np.asarray(obj)
    if arr.size > 0 and arr.dtype.kind not in "fiu":
        raise TypeError(f"{what} must be real numbers, got dtype {arr.dtype}")
    # Like the C++ cast: a float64 too large for float32 becomes inf (numpy warns).
    return arr.astype(dtype, copy=False)


class _NumpyTree:
    """Pure-NumPy twin of the C++ trees (``torchrl._C.SumSegmentTreeFp64`` and friends)."""

    def __init__(self, capacity: int, dtype: np.dtype, op: Literal["sum", "min"]) -> None:
        capacity = operator.index(capacity)
        if capacity <= 0:
            raise ValueError(f"capacity must be a positive integer, got {capacity}")
        if capacity > _MAX_CAPACITY:
            raise ValueError(f"capacity {capacity} is too large")
        self._capacity = capacity
        self._size = 1 << (capacity - 1).bit_length()
        self._depth = self._size.bit_length() - 1
        self._dtype = np.dtype(dtype)
        self._is_sum = op == "sum"
        self._identity = 0.0 if self._is_sum else float("inf")
        self._combine = np.add if self._is_sum else np.minimum
        self._tree = np.full(2 * self._size, self._identity, dtype=self._dtype)
        # Multi-step updates must not interleave across threads (the C++ trees hold a mutex).
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return self._capacity

    def _check_values(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        if self._is_sum:
            if not (np.isfinite(values) & (values >= 0)).all():
                bad = values[~(np.isfinite(values) & (values >= 0))].flat[0]
                raise ValueError(
                    f"values of a sum tree must be finite and non-negative, got {float(bad)}"
                )
        elif np.isnan(values).any():
            raise ValueError("values of a min tree must not be NaN")

    def update(self, indices: ArrayLike, values: ArrayLike) -> None:
        idx = _check_indices(indices, self._capacity)
        val = _as_values(values, self._dtype, "values")
        n = idx.size
        if val.ndim != 0:
            if val.ndim != 1:
                raise ValueError(
                    f"values must be a scalar or a 1-D array, got {val.ndim} dimensions"
                )
            if val.size != n:
                raise ValueError(f"got {n} indices but {val.size} values")
        self._check_values(val)
        if n == 0:
            return
        # A stable sort keeps the call order among equal indices, so the last entry of each run
        # is the last write, as in the C++ loop.
        order = np.argsort(idx, kind="stable")
        sorted_idx = idx[order]
        last = np.empty(n, dtype=bool)
        last[-1] = True
        np.not_equal(sorted_idx[1:], sorted_idx[:-1], out=last[:-1])
        nodes = sorted_idx[last] + self._size
        tree, combine = self._tree, self._combine
        # Row k of this (size, 2) view holds the children 2k and 2k + 1 of node k.
        children = tree.reshape(-1, 2)
        # A float32 sum may overflow to inf, silently as in C++; scan_lower_bound then refuses.
        with self._lock, np.errstate(over="ignore"):
            tree[nodes] = val if val.ndim == 0 else val[order[last]]
            # Parents level by level, so every child is final before its parent is recomputed.
            # Shared ancestors are recomputed more than once, always to the same value. Once a
            # level has no more nodes than the batch, recomputing all of it in one strided call
            # is cheaper than gathering and scattering.
            lo = self._size >> 1
            while lo > nodes.size:
                nodes >>= 1
                pairs = children[nodes]
                tree[nodes] = combine(pairs[:, 0], pairs[:, 1])
                lo >>= 1
            while lo >= 1:
                combine(
                    tree[2 * lo : 4 * lo : 2], tree[2 * lo + 1 : 4 * lo : 2], out=tree[lo : 2 * lo]
                )
                lo >>= 1

    def at(self, indices: ArrayLike) -> np.ndarray:
        idx = _check_indices(indices, self._capacity)
        with self._lock:
            return self._tree[idx + self._size]

    def total(self) -> float:
        return float(self._tree[1])

    def query(self, start: int, end: int) -> float:
        cap = self._capacity
        if start < 0 or start > cap or end < 0 or end > cap:
            raise IndexError(
                f"query range [{start}, {end}) is out of range for a tree of capacity {cap}"
            )
        if start > end:
            raise ValueError(f"query start {start} is greater than end {end}")
        with self._lock:
            return self._query(start, end)

    def _query(self, start: int, end: int) -> float:
        tree = self._tree
        if start == 0 and end == self._capacity:
            return float(tree[1])
        left = right = self._identity
        lo, hi = start + self._size, end + self._size
        # Same visiting and addition order as SegmentTree::query in C++ (Python floats are
        # doubles), so sums agree to the last bit.
        if self._is_sum:
            while lo < hi:
                if lo & 1:
                    left = left + float(tree[lo])
                    lo += 1
                if hi & 1:
                    hi -= 1
                    right = float(tree[hi]) + right
                lo >>= 1
                hi >>= 1
            return left + right
        while lo < hi:
            if lo & 1:
                left = min(left, float(tree[lo]))
                lo += 1
            if hi & 1:
                hi -= 1
                right = min(float(tree[hi]), right)
            lo >>= 1
            hi >>= 1
        return min(left, right)

    def scan_lower_bound(self, prefix_sums: ArrayLike) -> np.ndarray:
        arr = np.asarray(prefix_sums)
        if arr.ndim != 1:
            raise ValueError(f"prefix_sums must be a 1-D array, got {arr.ndim} dimensions")
        if arr.size > 0 and arr.dtype.kind not in "fiu":
            raise TypeError(f"prefix_sums must be real numbers, got dtype {arr.dtype}")
        v = arr.astype(np.float64, copy=False)
        if np.isnan(v).any():
            raise ValueError("prefix_sums must not contain NaN")
        with self._lock:
            return self._scan(v)

    def _scan(self, prefix_sums: np.ndarray) -> np.ndarray:
        tree = self._tree
        if not tree[1] > 0:
            raise ValueError("scan_lower_bound needs a positive total, but every value is 0")
        if np.isinf(tree[1]):
            raise ValueError(_OVERFLOW_MESSAGE)
        # All queries descend together, one tree level per step, with the plain rule "go right
        # iff v >= left sum" (negative v start at 0, which ends on the same leaf). As in C++, the
        # queries that end on a leaf of value 0 stepped into an empty subtree and are redone
        # with the careful rule; every other query took the careful rule's path.
        v = np.maximum(prefix_sums, 0.0)
        nodes = np.ones(v.size, dtype=np.int64)
        for _ in range(self._depth):
            nodes <<= 1
            lv = tree[nodes]
            go_right = v >= lv
            v -= lv * go_right  # exact: lv * 1 is lv, lv * 0 is 0 (every node sum is finite)
            nodes += go_right
        redo = ~(tree[nodes] > 0)
        if redo.any():
            nodes[redo] = self._careful_descent(prefix_sums[redo])
        return nodes - self._size

    def _careful_descent(self, v: np.ndarray) -> np.ndarray:
        # Go left iff the left subtree is non-empty and v falls in it, or the right subtree is
        # empty: a subtree of sum 0 is never entered.
        tree = self._tree
        v = v.copy()
        nodes = np.ones(v.size, dtype=np.int64)
        for _ in range(self._depth):
            nodes <<= 1
            lv = tree[nodes]
            rv = tree[nodes + 1]
            go_right = ~((lv > 0) & ((v < lv) | ~(rv > 0)))
            np.subtract(v, lv, out=v, where=go_right)
            nodes += go_right
        return nodes

    def get_values(self) -> np.ndarray:
        with self._lock:
            return self._tree[self._size : self._size + self._capacity].copy()

    def set_values(self, values: ArrayLike) -> None:
        val = _as_values(values, self._dtype, "values")
        if val.ndim != 1 or val.size != self._capacity:
            raise ValueError(f"set_values expects a 1-D array of {self._capacity} values")
        self._check_values(val)
        tree, combine = self._tree, self._combine
        with self._lock, np.errstate(over="ignore"):
            tree[self._size : self._size + self._capacity] = val
            lo = self._size >> 1
            while lo >= 1:
                combine(
                    tree[2 * lo : 4 * lo : 2], tree[2 * lo + 1 : 4 * lo : 2], out=tree[lo : 2 * lo]
                )
                lo >>= 1


# ---------------------------------------------------------------------------------------------
# Public face
# ---------------------------------------------------------------------------------------------


class _SegmentTree:
    """Shared Python face of the sum and min trees; subclasses set ``_op``."""

    _op: Literal["sum", "min"]

    def __init__(
        self,
        capacity: int,
        dtype: torch.dtype | np.dtype | type | str = torch.float64,
        *,
        backend: Backend | None = None,
    ) -> None:
        capacity = operator.index(capacity)
        self._dtype = _resolve_dtype(dtype)
        self._backend = _resolve_backend(backend)
        if self._backend == "cpp":
            suffix = "Fp64" if self._dtype == np.float64 else "Fp32"
            cls = getattr(_C, f"{self._op.capitalize()}SegmentTree{suffix}")
            self._core = cls(capacity)
        else:
            self._core = _NumpyTree(capacity, self._dtype, self._op)

    @property
    def capacity(self) -> int:
        """The number of leaves."""
        return self._core.capacity

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of the stored values (float64 or float32)."""
        return self._dtype

    @property
    def backend(self) -> Backend:
        """``"cpp"`` or ``"numpy"``: the implementation behind this tree."""
        return self._backend

    def __len__(self) -> int:
        return self._core.capacity

    def update(self, index: ArrayLike, value: ArrayLike) -> None:
        """Sets the values at ``index``; when an index repeats, its last value is kept.

        Args:
            index: an int, a slice, or integer indices of any shape (list, numpy array or torch
                tensor) in ``[0, capacity)``.
            value: a scalar (broadcast to every index), or as many values as indices (any shape
                with that many elements, or one that broadcasts to the shape of ``index``).

        Examples:
            >>> tree = SumSegmentTree(4)
            >>> tree.update(torch.tensor([0, 2, 2]), torch.tensor([1.0, 5.0, 2.0]))
            >>> tree.total()
            3.0
        """
        idx = _as_indices(index, self._core.capacity)
        val = _to_numpy(value)
        if val.ndim != 0 and val.shape != idx.shape:
            if val.size == idx.size:
                val = val.reshape(idx.shape)
            else:
                try:
                    val = np.broadcast_to(val, idx.shape)
                except ValueError:
                    raise ValueError(
                        f"got indices of shape {tuple(idx.shape)} but values of shape "
                        f"{tuple(val.shape)}"
                    ) from None
        self._core.update(idx.reshape(-1), val.reshape(-1) if val.ndim else val)

    def __setitem__(self, index: ArrayLike, value: ArrayLike) -> None:
        self.update(index, value)

    def __getitem__(self, index: ArrayLike) -> float | np.ndarray:
        """The values at ``index``: a float for an int index, else an array of its shape."""
        idx = _as_indices(index, self._core.capacity)
        out = self._core.at(idx.reshape(-1))
        if idx.ndim == 0:
            return float(out[0])
        return out.reshape(idx.shape)

    def query(self, start: int = 0, end: int | None = None) -> float:
        """The reduction over ``values[start:end]`` (the whole tree by default).

        Args:
            start: first index, in ``[0, capacity]``.
            end: one past the last index, in ``[start, capacity]``; ``None`` means ``capacity``.

        Returns:
            The sum (sum tree) or minimum (min tree) as a Python float; an empty range gives
            0.0 for a sum tree and ``inf`` for a min tree.

        Examples:
            >>> tree = MinSegmentTree(4)
            >>> tree[[0, 1, 2]] = [3.0, 1.0, 2.0]
            >>> tree.query(0, 1), tree.query(1, 4), tree.query(3)
            (3.0, 1.0, inf)
        """
        start = operator.index(start)
        end = self._core.capacity if end is None else operator.index(end)
        return self._core.query(start, end)

    def total(self) -> float:
        """The reduction over all values: their sum, or their minimum (``inf`` when empty)."""
        return self._core.total()

    def reduce(self, start: int = 0, end: int | None = None) -> float:
        """Alias of :meth:`query`; with no argument, the same as :meth:`total`."""
        return self.query(start, end)

    def state_dict(self) -> dict[str, Any]:
        """The capacity, dtype and a copy of the values (a CPU tensor), for ``torch.save``."""
        return {
            "capacity": self._core.capacity,
            "dtype": str(self._dtype),
            "values": torch.from_numpy(self._core.get_values()),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the values saved by :meth:`state_dict`; the capacity must match."""
        capacity = int(state_dict["capacity"])
        if capacity != self._core.capacity:
            raise ValueError(
                f"cannot load a state of capacity {capacity} into a tree of capacity "
                f"{self._core.capacity}"
            )
        values = _to_numpy(state_dict["values"]).reshape(-1)
        self._core.set_values(values)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(capacity={self._core.capacity}, dtype={self._dtype}, "
            f"backend={self._backend!r}, total={self._core.total()})"
        )


class SumSegmentTree(_SegmentTree):
    """A sum tree over ``capacity`` non-negative values: O(log n) updates, sums and sampling.

    Values start at 0. Runs on the C++ extension ``torchrl._C`` when it is built and on a
    vectorized NumPy implementation otherwise (same results; a one-time warning says so).
    Indices and values may be ints, lists, numpy arrays or torch tensors (CPU ones are read
    without copy); results come back as numpy arrays or Python floats.

    Args:
        capacity: number of leaves, any positive int.
        dtype: ``torch.float64`` (default) or ``torch.float32``; numpy dtypes and their names
            are accepted too.
        backend: ``"cpp"``, ``"numpy"``, or ``None`` for the C++ one when available.

    Raises:
        IndexError: an index outside ``[0, capacity)``, negative ones included.
        ValueError: a negative, infinite or NaN value, or as many values as indices.

    Examples:
        >>> tree = SumSegmentTree(5)
        >>> tree[[0, 1, 3]] = [1.0, 0.0, 3.0]
        >>> tree.total(), tree.query(1, 4), tree[3]
        (4.0, 3.0, 3.0)
        >>> tree.scan_lower_bound([0.0, 0.999, 1.0, 3.5]).tolist()
        [0, 0, 3, 3]
    """

    _op = "sum"

    def scan_lower_bound(self, values: ArrayLike) -> int | np.ndarray:
        """For each ``v``, the smallest index ``i`` with ``sum(tree[:i + 1]) > v``.

        Sampling with priorities is ``scan_lower_bound(uniform(size) * tree.total())``. An index
        whose value is 0 is never returned. A ``v`` at or past the total (rounding) gives the
        last index with a positive value, a negative ``v`` the first.

        Args:
            values: a float, or prefix sums of any shape.

        Returns:
            An int for a float, else an int64 array of the shape of ``values``.

        Raises:
            ValueError: every value of the tree is 0, or ``values`` holds a NaN.

        Examples:
            >>> tree = SumSegmentTree(3, dtype=torch.float32)
            >>> tree.update([0, 2], 2.0)
            >>> tree.scan_lower_bound(1.5), tree.scan_lower_bound(torch.tensor([2.5, 9.0])).tolist()
            (0, [2, 2])
        """
        v = _to_numpy(values)
        out = self._core.scan_lower_bound(v.reshape(-1))
        if v.ndim == 0:
            return int(out[0])
        return out.reshape(v.shape)


class MinSegmentTree(_SegmentTree):
    """A min tree over ``capacity`` values: O(log n) updates and range minima.

    Values start at ``+inf`` (empty). Used by prioritized replay for the smallest priority,
    which scales the importance weights. Same backends and input types as
    :class:`SumSegmentTree`; values may be any float but NaN.

    Args:
        capacity: number of leaves, any positive int.
        dtype: ``torch.float64`` (default) or ``torch.float32``; numpy dtypes and their names
            are accepted too.
        backend: ``"cpp"``, ``"numpy"``, or ``None`` for the C++ one when available.

    Examples:
        >>> tree = MinSegmentTree(3)
        >>> tree.total()
        inf
        >>> tree.update(np.array([0, 1]), np.array([0.5, 0.25]))
        >>> tree.total(), tree[0:2].tolist()
        (0.25, [0.5, 0.25])
    """

    _op = "min"


class NumpySumSegmentTree(SumSegmentTree):
    """:class:`SumSegmentTree` on the pure-NumPy backend, whether or not the C++ one is built.

    Args:
        capacity: number of leaves, any positive int.
        dtype: ``torch.float64`` (default) or ``torch.float32``, or a numpy dtype.

    Examples:
        >>> tree = NumpySumSegmentTree(3)
        >>> tree[[0, 2]] = [1.0, 2.0]
        >>> tree.backend, tree.total(), tree.scan_lower_bound(1.0)
        ('numpy', 3.0, 2)
    """

    def __init__(
        self, capacity: int, dtype: torch.dtype | np.dtype | type | str = torch.float64
    ) -> None:
        super().__init__(capacity, dtype, backend="numpy")


class NumpyMinSegmentTree(MinSegmentTree):
    """:class:`MinSegmentTree` on the pure-NumPy backend, whether or not the C++ one is built.

    Args:
        capacity: number of leaves, any positive int.
        dtype: ``torch.float64`` (default) or ``torch.float32``, or a numpy dtype.

    Examples:
        >>> tree = NumpyMinSegmentTree(3)
        >>> tree[[0, 2]] = [1.0, 2.0]
        >>> tree.backend, tree.total(), tree.query(1, 3)
        ('numpy', 1.0, 2.0)
    """

    def __init__(
        self, capacity: int, dtype: torch.dtype | np.dtype | type | str = torch.float64
    ) -> None:
        super().__init__(capacity, dtype, backend="numpy")
