"""Stacks of specs: ``stack_specs`` (also behind ``torch.stack``), and the lazy ``Stacked`` and
``StackedComposite`` for specs that differ (different bounds, shapes or keys)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

from torchrl._types import DeviceLike, NestedKey, ShapeLike
from torchrl.data.specs.base import (
    TensorSpec,
    as_raw_tensor,
    as_size,
    describe_value,
    expand_ellipsis,
)

if TYPE_CHECKING:
    from typing_extensions import Self


def stack_specs(specs: Sequence[TensorSpec], dim: int = 0) -> TensorSpec:
    """Stacks specs along a new batch dim, like ``torch.stack`` (which calls this).

    Equal specs give a plain spec of the same class with the new dim; specs that differ give a
    lazy ``Stacked`` (or ``StackedComposite`` for Composites), where sizes that differ read ``-1``
    in the stacked shape.

    Args:
        specs: specs of one kind (all Composites, or all of one leaf class) and one ndim.
        dim: where the new dim goes, among the batch dims (negative counts from the end).

    Returns:
        The stacked spec.

    Raises:
        ValueError: for an empty list, mixed kinds, different ndims or dtypes, or a bad dim.

    Examples:
        >>> import torch
        >>> from torchrl.data import Bounded, Composite, Unbounded
        >>> torch.stack([Bounded(0, 1, shape=(3,)), Bounded(0, 1, shape=(3,))], 0)
        Bounded(shape=torch.Size([2, 3]), low=0.0, high=1.0, dtype=torch.float32, device=None)
        >>> spec = torch.stack([Bounded(0, 1, shape=(3,)), Bounded(0, 1, shape=(4,))], 0)
        >>> type(spec).__name__, spec.shape
        ('Stacked', torch.Size([2, -1]))
        >>> spec[1].shape
        torch.Size([4])
        >>> agents = torch.stack([Composite(obs=Unbounded(3)), Composite(obs=Unbounded(4))], 0)
        >>> type(agents.rand()).__name__
        'LazyStackedTensorDict'
    """
    specs = list(specs)
    if not specs:
        raise ValueError("stack_specs: there is nothing to stack")
    first = specs[0]
    for s in specs:
        if not isinstance(s, TensorSpec):
            raise TypeError(f"stack_specs: expected specs, got a {type(s).__name__}")
        same_kind = s._is_composite == first._is_composite and (
            s._is_composite or isinstance(s, type(first)) or isinstance(first, type(s))
        )
        if not same_kind:
            raise ValueError(
                f"stack_specs: cannot stack specs of different kinds: {first!r} and {s!r}"
            )
        if s.ndim != first.ndim:
            raise ValueError(
                f"stack_specs: cannot stack specs with different numbers of dims: "
                f"{tuple(first.shape)} and {tuple(s.shape)}"
            )
    d = first._batch_dim(dim, extra=1)
    if all(s == first for s in specs[1:]):
        out = first.unsqueeze(d)
        shape = list(out.shape)
        shape[d] = len(specs)
        return out.expand(*shape)
    if first._is_composite:
        return StackedComposite(*specs, dim=d)
    return Stacked(*specs, dim=d)


def _stacked_shape(specs: Sequence[TensorSpec], dim: int) -> torch.Size:
    first = specs[0].shape
    shape = [n if all(s.shape[i] == n for s in specs) else -1 for i, n in enumerate(first)]
    shape.insert(dim, len(specs))
    return torch.Size(shape)


class Stacked(TensorSpec):
    """A lazy stack of leaf specs of one class that differ (bounds, masks or shapes).

    ``shape`` has ``len(specs)`` at ``dim`` and ``-1`` where the specs' sizes differ.
    ``spec[i]`` (for ``dim == 0``) is the i-th spec. ``rand`` stacks the specs' samples (a nested
    tensor when their shapes differ); ``is_in``/``project`` check each slice against its spec.

    Args:
        *specs: the specs (or one list of them), same class, ndim, dtype and device.
        dim: the stacking dim, among the batch dims.

    Examples:
        >>> import torch
        >>> from torchrl.data import Bounded
        >>> spec = Stacked(Bounded(0, 1, shape=(2,)), Bounded(5, 6, shape=(2,)), dim=0)
        >>> spec.shape
        torch.Size([2, 2])
        >>> spec.is_in(torch.tensor([[0.5, 0.5], [5.5, 5.5]]))
        True
        >>> spec.project(torch.zeros(2, 2))
        tensor([[0., 0.],
                [5., 5.]])
    """

    def __init__(self, *specs: TensorSpec | Sequence[TensorSpec], dim: int = 0) -> None:
        if len(specs) == 1 and isinstance(specs[0], (list, tuple)):
            specs = tuple(specs[0])
        specs_l: list[TensorSpec] = list(specs)  # type: ignore[arg-type]
        if not specs_l:
            raise ValueError(f"{type(self).__name__}: there is nothing to stack")
        first = specs_l[0]
        for s in specs_l:
            if s.ndim != first.ndim:
                raise ValueError(
                    f"{type(self).__name__}: the specs have different numbers of dims: "
                    f"{tuple(first.shape)} and {tuple(s.shape)}"
                )
            if not self._is_composite and s.dtype != first.dtype:
                raise ValueError(
                    f"{type(self).__name__}: the specs have different dtypes: "
                    f"{first.dtype} and {s.dtype}"
                )
            if s.device != first.device:
                raise ValueError(
                    f"{type(self).__name__}: the specs are on different devices: "
                    f"{first.device} and {s.device}"
                )
        self._feature_ndim = first._feature_ndim  # type: ignore[misc]
        self.dim = first._batch_dim(dim, extra=1)
        self._specs = specs_l
        self.shape = _stacked_shape(specs_l, self.dim)
        dtypes = {s.dtype for s in specs_l}
        self.dtype = dtypes.pop() if len(dtypes) == 1 else None
        self.device = first.device

    @property
    def specs(self) -> list[TensorSpec]:
        """The stacked specs, in order."""
        return list(self._specs)

    @property
    def _name(self) -> str:
        return f"{type(self).__name__}(shape={tuple(self.shape)}, dim={self.dim})"

    def _stack_dim(self, ndim: int) -> int | str:
        """Where the stack dim of a value with ``ndim`` dims is, or why it has none."""
        extra = ndim - self.ndim
        if extra < 0:
            return f"wrong shape: expected at least {self.ndim} dims, got {ndim}"
        return extra + self.dim

    def _split(self, val: Any) -> tuple[list[Any], int | None] | str:
        """The per-spec slices of ``val`` and the dim they came from (``None``: a list)."""
        p: int | None = None
        if isinstance(val, (list, tuple)):
            elements = list(val)
        elif isinstance(val, torch.Tensor) and val.is_nested:
            elements = list(val.unbind())
        elif isinstance(val, torch.Tensor):
            where = self._stack_dim(val.dim())
            if isinstance(where, str):
                return where
            if val.shape[where] != len(self._specs):
                return (
                    f"wrong shape: expected {len(self._specs)} entries along the stack dim "
                    f"{where}, got shape {tuple(val.shape)}"
                )
            p, elements = where, list(val.unbind(where))
        else:
            return f"expected a tensor, got {describe_value(val)}"
        if len(elements) != len(self._specs):
            return f"expected {len(self._specs)} stacked values, got {len(elements)}"
        return elements, p

    def _combine(self, values: list[Any], p: int | None) -> Any:
        if p is None:
            p = self.dim
        if all(v.shape == values[0].shape for v in values):
            return torch.stack(values, p)
        if p != 0:
            raise ValueError(
                f"{self._name}: the stacked specs have different shapes, so their values can "
                "only be gathered in a nested tensor along dim 0 (no extra leading dims)"
            )
        with warnings.catch_warnings():
            # torch flags strided nested tensors as a prototype on every construction.
            warnings.simplefilter("ignore", UserWarning)
            return torch.nested.as_nested_tensor(values)

    def _sample(self, method: str, shape: ShapeLike | None) -> Any:
        lead = as_size(shape)
        values = [getattr(s, method)(lead) for s in self._specs]
        return self._combine(values, self.dim + len(lead))

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor | TensorDictBase:
        """Each spec's sample, stacked at ``dim`` (a nested tensor when their shapes differ).

        Args:
            shape: extra leading batch dims.
        """
        return self._sample("rand", shape)

    def zero(self, shape: ShapeLike | None = None) -> torch.Tensor | TensorDictBase:
        """Each spec's ``zero``, stacked at ``dim``."""
        return self._sample("zero", shape)

    def one(self, shape: ShapeLike | None = None) -> torch.Tensor | TensorDictBase:
        """Each spec's ``one``, stacked at ``dim``."""
        return self._sample("one", shape)

    def _why_not_in(self, val: Any) -> str | None:
        split = self._split(val)
        if isinstance(split, str):
            return split
        for i, (spec, element) in enumerate(zip(self._specs, split[0])):
            reason = spec._why_not_in(element)
            if reason is not None:
                return f"stack entry {i} ({spec._name}): {reason}"
        return None

    def project(self, val: Any) -> Any:
        """Projects each slice of ``val`` with its spec and stacks the results back.

        Args:
            val: a value with ``len(specs)`` entries along the stack dim, or a list of them.

        Returns:
            The projected value (a list for a list).

        Raises:
            ValueError: naming the stack entry, when a slice cannot be projected (its shape).
        """
        split = self._split(val)
        if isinstance(split, str):
            raise ValueError(f"{self._name}: cannot project: {split}")
        elements, p = split
        out = []
        for i, (spec, element) in enumerate(zip(self._specs, elements)):
            try:
                out.append(spec.project(element))
            except (ValueError, KeyError) as err:
                raise type(err)(f"{self._name}: stack entry {i}: {err}") from err
        return out if isinstance(val, (list, tuple)) else self._combine(out, p)

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor | TensorDictBase:
        """Encodes each slice (or each item of a list) with its spec and stacks the results."""
        if isinstance(val, np.ndarray):
            val = as_raw_tensor(val)
        split = self._split(val)
        if isinstance(split, str):
            raise ValueError(f"{self._name}: cannot encode: {split}")
        elements, p = split
        out = [s.encode(e, ignore_device=ignore_device) for s, e in zip(self._specs, elements)]
        return self._combine(out, p)

    def to_numpy(self, val: Any, safe: bool = False) -> np.ndarray | list[np.ndarray]:
        """A numpy array, or a list of arrays for a nested tensor."""
        if safe:
            self.assert_is_in(val)
        if isinstance(val, torch.Tensor) and val.is_nested:
            return [v.detach().cpu().numpy() for v in val.unbind()]
        return super().to_numpy(val)

    # ----------------------------------------------------------------- conversions, shape ops
    def _remake(self, specs: list[TensorSpec], dim: int | None = None) -> Any:
        return type(self)(*specs, dim=self.dim if dim is None else dim)

    def to(self, dest: torch.dtype | DeviceLike) -> Self:
        """Every stacked spec moved or cast (see ``TensorSpec.to``)."""
        return self._remake([s.to(dest) for s in self._specs])

    def clone(self) -> Self:
        """A deep copy."""
        return self._remake([s.clone() for s in self._specs])

    def expand(self, *shape: int | Sequence[int]) -> Self:
        """Prepends batch dims (``-1`` keeps a size; sizes that differ must stay ``-1``)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])  # type: ignore[arg-type]
        new = [int(s) for s in shape]  # type: ignore[arg-type]
        lead = len(new) - self.ndim
        if lead < 0:
            raise ValueError(f"{self._name}: cannot expand to the shorter shape {tuple(new)}")
        p = lead + self.dim
        if new[p] not in (-1, len(self._specs)):
            raise ValueError(
                f"{self._name}: the stack dim {p} of {tuple(new)} must stay {len(self._specs)}"
            )
        sub = new[:p] + new[p + 1 :]
        return self._remake([s.expand(*sub) for s in self._specs], p)

    def unsqueeze(self, dim: int) -> Self:
        """Inserts a batch dim of size 1 (the stacked specs get it too)."""
        d = self._batch_dim(dim, extra=1)
        if d <= self.dim:
            return self._remake([s.unsqueeze(d) for s in self._specs], self.dim + 1)
        return self._remake([s.unsqueeze(d - 1) for s in self._specs])

    def squeeze(self, dim: int | None = None) -> TensorSpec:
        """Removes singleton batch dims; squeezing a stack of one spec gives that spec."""
        if dim is None:
            dims = [i for i in range(self._batch_ndim) if self.shape[i] == 1]
        else:
            d = self._batch_dim(dim)
            dims = [d] if self.shape[d] == 1 else []
        out: Any = self
        for d in sorted(dims, reverse=True):
            if not isinstance(out, Stacked):
                out = out.squeeze(d)
            elif d == out.dim:
                out = out._specs[0]
            elif d > out.dim:
                out = out._remake([s.squeeze(d - 1) for s in out._specs])
            else:
                out = out._remake([s.squeeze(d) for s in out._specs], out.dim - 1)
        return out if dims else self.clone()

    def __getitem__(self, idx: Any) -> Any:
        """Indexes the batch dims; an int at the stack dim picks one spec (ints/slices only)."""
        return self._index(idx)

    def _index(self, idx: Any) -> Any:
        idx = expand_ellipsis(idx, self._batch_ndim)
        if any(not isinstance(i, (int, np.integer, slice)) for i in idx):
            raise IndexError(
                f"{self._name}: only ints, slices and ... can index a stack, got {idx!r}"
            )
        if len(idx) > self._batch_ndim:
            raise IndexError(f"{self._name}: too many indices {idx!r}")
        pre, post = idx[: self.dim], idx[self.dim + 1 :]
        at = idx[self.dim] if len(idx) > self.dim else slice(None)
        rest = pre + post

        def sub(s: TensorSpec) -> TensorSpec:
            return s[rest] if rest else s

        if isinstance(at, (int, np.integer)):
            return sub(self._specs[at])
        chosen = [sub(s) for s in self._specs[at]]
        if not chosen:
            raise IndexError(f"{self._name}: the index {idx!r} selects no spec")
        return stack_specs(chosen, self.dim - sum(isinstance(i, (int, np.integer)) for i in pre))

    # ----------------------------------------------------------------- comparison, display
    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and other.dim == self.dim  # type: ignore[attr-defined]
            and len(other._specs) == len(self._specs)  # type: ignore[attr-defined]
            and all(a == b for a, b in zip(self._specs, other._specs))  # type: ignore[attr-defined]
        )

    def __repr__(self) -> str:
        inner = ",\n".join(f"    {s!r}".replace("\n", "\n    ") for s in self._specs)
        return (
            f"{type(self).__name__}(dim={self.dim}, shape={self.shape}, dtype={self.dtype}, "
            f"device={self.device}, specs=[\n{inner}])"
        )


class StackedComposite(Stacked):
    """A lazy stack of Composites that differ (e.g. agents with different observations).

    It reads like a Composite: ``keys``/``items``/``values`` list the keys all stacked Composites
    share, ``spec[key]`` stacks their entries, and ``spec[i]`` (for ``dim == 0``) is the i-th
    Composite. ``rand``/``zero``/``one`` return a ``LazyStackedTensorDict``.

    Args:
        *specs: the Composites (or one list of them), same ndim and device.
        dim: the stacking dim, among the Composites' batch dims.

    Examples:
        >>> import torch
        >>> from torchrl.data import Composite, Unbounded
        >>> a = Composite(obs=Unbounded(3), extra=Unbounded(1))
        >>> spec = torch.stack([a, Composite(obs=Unbounded(4))], 0)
        >>> list(spec.keys()), spec["obs"].shape
        (['obs'], torch.Size([2, -1]))
        >>> td = spec.rand()
        >>> td.batch_size, spec.is_in(td), spec[0] is a
        (torch.Size([2]), True, True)
    """

    _is_composite = True

    def _stack_dim_td(self, val: TensorDictBase) -> int | str:
        p = self._stack_dim(val.batch_dims)
        if isinstance(p, str):
            return p.replace("shape", "batch size").replace("dims", "batch dims")
        if val.batch_size[p] != len(self._specs):
            return (
                f"wrong batch size: expected {len(self._specs)} entries along the stack dim {p}, "
                f"got {tuple(val.batch_size)}"
            )
        return p

    def _split(self, val: Any) -> tuple[list[Any], int | None] | str:
        p: int | None = None
        if isinstance(val, (list, tuple)):
            elements = list(val)
        elif isinstance(val, TensorDictBase):
            where = self._stack_dim_td(val)
            if isinstance(where, str):
                return where
            p, elements = where, list(val.unbind(where))
        else:
            return f"expected a TensorDict, got {describe_value(val)}"
        if len(elements) != len(self._specs):
            return f"expected {len(self._specs)} stacked values, got {len(elements)}"
        return elements, p

    def _combine(self, values: list[Any], p: int | None) -> Any:
        return LazyStackedTensorDict.lazy_stack(values, self.dim if p is None else p)

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor | TensorDictBase:
        """Encodes a list of dicts (one per stacked Composite) into a lazy stack."""
        return super().encode(val, ignore_device=ignore_device)

    def to_numpy(self, val: Any, safe: bool = False) -> list[Any]:
        """A list of nested dicts of numpy arrays, one per stacked Composite."""
        if safe:
            self.assert_is_in(val)
        split = self._split(val)
        if isinstance(split, str):
            raise ValueError(f"{self._name}: {split}")
        return [s.to_numpy(e) for s, e in zip(self._specs, split[0])]

    # ----------------------------------------------------------------- dict interface
    def _common_keys(self) -> list[str]:
        specs: list[Any] = self._specs
        return [k for k in specs[0].keys() if all(k in s for s in specs[1:])]

    def __getitem__(self, key: Any) -> Any:
        """The stacked entry at a (nested) key, or the stack indexed on its batch dims."""
        specs: list[Any] = self._specs
        if type(key) is str:
            if not all(key in s for s in specs):
                raise KeyError(f"key {key!r} is not in every stacked Composite")
            return stack_specs([s[key] for s in self._specs], self.dim)
        if type(key) is tuple and key and all(type(k) is str for k in key):
            out: Any = self
            for k in key:
                if not out._is_composite:
                    raise KeyError(f"key {key!r}: {k!r} is below a leaf")
                out = out[k]
            return out
        return self._index(key)

    def __contains__(self, key: object) -> bool:
        specs: list[Any] = self._specs
        return all(key in s for s in specs)

    def get(self, key: NestedKey, default: Any = None) -> Any:
        """The stacked entry at ``key``, or ``default`` when a Composite lacks it."""
        return self[key] if key in self else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._common_keys())

    def __len__(self) -> int:
        return len(self._common_keys())

    def _walk(
        self, prefix: tuple[str, ...], include_nested: bool, leaves_only: bool
    ) -> Iterator[tuple[tuple[str, ...], TensorSpec]]:
        for k in self._common_keys():
            v = self[k]
            path = (*prefix, k)
            if not (leaves_only and v._is_composite):
                yield path, v
            if include_nested and v._is_composite:
                yield from v._walk(path, include_nested, leaves_only)

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[Any]:
        """The keys shared by all stacked Composites (nested keys as tuples)."""
        return [p[0] if len(p) == 1 else p for p, _ in self._walk((), include_nested, leaves_only)]

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> list[Any]:
        """The stacked entries, in the order of ``keys``."""
        return [v for _, v in self._walk((), include_nested, leaves_only)]

    def items(self, include_nested: bool = False, leaves_only: bool = False) -> list[Any]:
        """``(key, stacked entry)`` pairs, in the order of ``keys``."""
        return [
            (p[0] if len(p) == 1 else p, v) for p, v in self._walk((), include_nested, leaves_only)
        ]
