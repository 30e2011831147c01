"""``Composite``: a dict of specs with nested keys and a batch shape, the spec of a TensorDict."""

from __future__ import annotations

import textwrap
from collections.abc import (
    ItemsView,
    Iterator,
    KeysView,
    Mapping,
    MutableMapping,
    Sequence,
    ValuesView,
)
from typing import Any, Literal, overload

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._types import DeviceLike, NestedKey, ShapeLike
from torchrl.data.specs.base import (
    TensorSpec,
    as_device,
    as_size,
    as_spec_shape,
    checked_expand_shape,
    describe_value,
    expand_ellipsis,
    indexed_shape,
)

_NO_DEFAULT = object()


def _as_key_path(key: Any) -> tuple[str, ...] | None:
    """A nested key as a flat tuple of strings, or ``None`` when ``key`` is not a key."""
    if type(key) is str:
        return (key,)
    if type(key) is not tuple or not key:
        return None
    out: list[str] = []
    for k in key:
        if type(k) is str:
            out.append(k)
        elif type(k) is tuple and (sub := _as_key_path(k)) is not None:
            out.extend(sub)
        else:
            return None
    return tuple(out)


def _key_repr(path: tuple[str, ...]) -> str:
    return repr(path[0]) if len(path) == 1 else repr(path)


class Composite(TensorSpec):
    """A dict of specs (nested keys allowed) with its own batch ``shape``: a TensorDict's spec.

    Every entry's shape starts with the Composite's shape; nested dicts become nested
    Composites. ``rand``/``zero``/``one`` return a ``TensorDict`` of batch size
    ``[*shape, *self.shape]``. ``keys``, ``items`` and ``values`` take ``include_nested`` and
    ``leaves_only``; nested keys are tuples of strings.

    Args:
        *args: at most one dict (or Composite) of entries.
        shape: the batch shape (default ``()``).
        device: the device of every entry (``None``: entries may be anywhere).
        **kwargs: more entries, by name.

    Raises:
        ValueError: when an entry's shape does not start with ``shape``, or it lives on another
            device than ``device``.

    Examples:
        >>> import torch
        >>> from torchrl.data import CompositeSpec, Unbounded, UnboundedContinuousTensorSpec
        >>> spec = CompositeSpec(obs=UnboundedContinuousTensorSpec(shape=(3, 4)), shape=(3,), device="cpu")
        >>> td = spec.rand()
        >>> td.batch_size, td["obs"].shape
        (torch.Size([3]), torch.Size([3, 4]))
        >>> spec["next", "reward"] = Unbounded(shape=(3, 1))
        >>> sorted(spec.keys(include_nested=True, leaves_only=True), key=str)
        [('next', 'reward'), 'obs']
        >>> spec.is_in(spec.zero())
        True
    """

    _is_composite = True

    def __init__(
        self,
        *args: Mapping[NestedKey, Any] | None,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        **kwargs: Any,
    ) -> None:
        if len(args) > 1:
            raise TypeError(f"Composite takes at most one dict of entries, got {len(args)}")
        self._shape = torch.Size(()) if shape is None else as_spec_shape(shape, "Composite")
        self._device = as_device(device)
        self._specs: dict[str, TensorSpec] = {}
        entries: dict[Any, Any] = {}
        if args and args[0] is not None:
            if not isinstance(args[0], (Mapping, Composite)):
                raise TypeError(
                    f"Composite: expected a dict of specs, got {type(args[0]).__name__}"
                )
            entries.update(args[0].items())
        entries.update(kwargs)
        for key, value in entries.items():
            self[key] = value

    # ----------------------------------------------------------------- attributes
    @property
    def shape(self) -> torch.Size:  # type: ignore[override]
        """The batch shape; every entry's shape starts with it. Settable when entries agree."""
        return self._shape

    @shape.setter
    def shape(self, value: ShapeLike | None) -> None:
        new = as_spec_shape(value, "Composite")
        for key, spec in self._specs.items():
            self._check_shape(key, spec, new)
        self._shape = new

    @property
    def device(self) -> torch.device | None:  # type: ignore[override]
        """The device of every entry (``None``: unconstrained)."""
        return self._device

    @property
    def dtype(self) -> torch.dtype | None:  # type: ignore[override]
        """The dtype shared by all leaves, or ``None`` when they differ (or there are none)."""
        dtypes = {spec.dtype for _, spec in self._walk((), True, True)}
        return dtypes.pop() if len(dtypes) == 1 else None

    @property
    def _name(self) -> str:
        return f"Composite(shape={tuple(self._shape)})"

    # ----------------------------------------------------------------- dict interface
    @staticmethod
    def _check_shape(key: Any, spec: TensorSpec, shape: torch.Size) -> None:
        n = len(shape)
        sshape = spec.shape
        if len(sshape) < n or any(a != b and a != -1 for a, b in zip(sshape[:n], shape)):
            raise ValueError(
                f"Composite: the spec for key {key!r} has shape {tuple(sshape)}, which does not "
                f"start with the Composite's batch shape {tuple(shape)}: {spec!r}"
            )

    def _validate(self, key: str, value: Any) -> TensorSpec:
        if isinstance(value, Mapping):
            value = Composite(value, shape=self._shape, device=self._device)
        if not isinstance(value, TensorSpec):
            raise TypeError(
                f"Composite: the value for key {key!r} must be a TensorSpec or a dict of specs, "
                f"got {type(value).__name__}"
            )
        self._check_shape(key, value, self._shape)
        if self._device is not None and value.device != self._device:
            if value.device is not None:
                raise ValueError(
                    f"Composite: the spec for key {key!r} is on {value.device}, but the "
                    f"Composite is on {self._device}: {value!r}"
                )
            value = value.to(self._device)
        return value

    def _missing(self, key: Any) -> str:
        return f"key {key!r} is not in the Composite (keys: {list(self._specs)})"

    def __getitem__(self, key: Any) -> Any:
        """A sub-spec by key (``"a"``, ``("a", "b")``), or the spec indexed on its batch dims."""
        if type(key) is str:
            try:
                return self._specs[key]
            except KeyError:
                raise KeyError(self._missing(key)) from None
        path = _as_key_path(key)
        if path is None:
            return self._index(key)
        spec: Any = self
        for i, k in enumerate(path):
            if not spec._is_composite:
                raise KeyError(
                    f"key {path!r}: {path[:i]!r} is a leaf {spec._name}, not a Composite"
                )
            try:
                spec = spec[k]
            except KeyError:
                raise KeyError(
                    f"key {path!r} is not in the Composite ({path[: i + 1]!r} is missing)"
                ) from None
        return spec

    def _index(self, idx: Any) -> Composite:
        idx = expand_ellipsis(idx, self.ndim)
        out = Composite(shape=indexed_shape(self._shape, idx, self._name), device=self._device)
        out._specs = {k: v[idx] for k, v in self._specs.items()}
        return out

    def __setitem__(self, key: NestedKey, value: TensorSpec | Mapping) -> None:
        """Sets an entry; intermediate Composites of a nested key are created as needed."""
        if type(key) is str:
            self._specs[key] = self._validate(key, value)
            return
        path = _as_key_path(key)
        if path is None:
            raise TypeError(f"Composite: keys are strings or tuples of strings, got {key!r}")
        parent = self
        for k in path[:-1]:
            child = parent._specs.get(k)
            if child is None:
                child = Composite(shape=parent._shape, device=parent._device)
                parent._specs[k] = child
            elif not isinstance(child, Composite):
                raise KeyError(f"Composite: cannot set {path!r}: {k!r} is a leaf {child._name}")
            parent = child
        parent[path[-1]] = value

    def set(self, key: NestedKey, value: TensorSpec | Mapping) -> Composite:
        """Sets an entry (like ``spec[key] = value``) and returns the Composite."""
        self[key] = value
        return self

    def __delitem__(self, key: NestedKey) -> None:
        path = _as_key_path(key)
        if path is None:
            raise TypeError(f"Composite: keys are strings or tuples of strings, got {key!r}")
        parent = self[path[:-1]] if len(path) > 1 else self
        if not isinstance(parent, Composite) or path[-1] not in parent._specs:
            raise KeyError(self._missing(key))
        del parent._specs[path[-1]]

    def pop(self, key: NestedKey, default: Any = _NO_DEFAULT) -> Any:
        """Removes an entry and returns it (or ``default`` when missing)."""
        if key not in self:
            if default is _NO_DEFAULT:
                raise KeyError(self._missing(key))
            return default
        value = self[key]
        del self[key]
        return value

    def __contains__(self, key: object) -> bool:
        if type(key) is str:
            return key in self._specs
        path = _as_key_path(key)
        if path is None:
            return False
        spec: Any = self
        for k in path:
            if not spec._is_composite or k not in spec:
                return False
            spec = spec[k]
        return True

    def get(self, key: NestedKey, default: Any = _NO_DEFAULT) -> Any:
        """The entry at ``key``, or ``default`` when missing (``KeyError`` without default)."""
        try:
            return self[key]
        except KeyError:
            if default is _NO_DEFAULT:
                raise
            return default

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def _walk(
        self, prefix: tuple[str, ...], include_nested: bool, leaves_only: bool
    ) -> Iterator[tuple[tuple[str, ...], TensorSpec]]:
        for k, v in self._specs.items():
            path = (*prefix, k)
            if not (leaves_only and v._is_composite):
                yield path, v
            if include_nested and v._is_composite:
                yield from v._walk(path, include_nested, leaves_only)  # type: ignore[attr-defined]

    @overload
    def keys(
        self, include_nested: Literal[False] = False, leaves_only: Literal[False] = False
    ) -> KeysView[str]: ...

    @overload
    def keys(
        self, include_nested: bool = False, leaves_only: bool = False
    ) -> KeysView[str] | list[NestedKey]: ...

    def keys(
        self, include_nested: bool = False, leaves_only: bool = False
    ) -> KeysView[str] | list[NestedKey]:
        """The keys: top-level names, or also nested ones as tuples.

        Args:
            include_nested: also list the keys inside nested Composites, as tuples.
            leaves_only: skip the keys of Composites.

        Returns:
            The dict's keys view when both flags are off, else a list.
        """
        if not include_nested and not leaves_only:
            return self._specs.keys()
        return [p[0] if len(p) == 1 else p for p, _ in self._walk((), include_nested, leaves_only)]

    def values(
        self, include_nested: bool = False, leaves_only: bool = False
    ) -> ValuesView[TensorSpec] | list[TensorSpec]:
        """The specs, in the order of ``keys`` with the same flags."""
        if not include_nested and not leaves_only:
            return self._specs.values()
        return [v for _, v in self._walk((), include_nested, leaves_only)]

    def items(
        self, include_nested: bool = False, leaves_only: bool = False
    ) -> ItemsView[str, TensorSpec] | list[tuple[NestedKey, TensorSpec]]:
        """``(key, spec)`` pairs, in the order of ``keys`` with the same flags."""
        if not include_nested and not leaves_only:
            return self._specs.items()
        return [
            (p[0] if len(p) == 1 else p, v) for p, v in self._walk((), include_nested, leaves_only)
        ]

    def update(self, other: Mapping | Composite) -> Composite:
        """Sets every entry of ``other``, merging nested Composites; returns the Composite."""
        for key, value in other.items():
            current = self._specs.get(key) if type(key) is str else self.get(key, None)
            if isinstance(current, Composite) and isinstance(value, (Composite, Mapping)):
                current.update(value)
            else:
                self[key] = value
        return self

    def empty(self) -> Composite:
        """A Composite with the same shape and device and no entries."""
        return Composite(shape=self._shape, device=self._device)

    def _skeleton(self) -> Composite:
        """A copy of the nested dict structure that shares the leaf specs."""
        out = self.empty()
        out._specs = {
            k: v._skeleton() if isinstance(v, Composite) else v for k, v in self._specs.items()
        }
        return out

    def select(self, *keys: NestedKey, strict: bool = True) -> Composite:
        """A Composite with only ``keys`` (leaf specs are shared, not copied).

        Args:
            *keys: keys to keep; nested keys keep their intermediate Composites' shapes.
            strict: raise a ``KeyError`` for a missing key (else skip it).
        """
        out = self.empty()
        for key in keys:
            path = _as_key_path(key)
            if path is None or path not in self:
                if strict:
                    raise KeyError(self._missing(key))
                continue
            src: Any = self
            dst: Any = out
            for k in path[:-1]:
                src = src[k]
                if not isinstance(src, Composite):
                    # Below a StackedComposite: keep the whole stacked entry.
                    dst._specs[k] = src
                    break
                if k not in dst._specs:
                    dst._specs[k] = src.empty()
                dst = dst._specs[k]
            else:
                dst._specs[path[-1]] = src[path[-1]]
        return out

    def exclude(self, *keys: NestedKey) -> Composite:
        """A Composite without ``keys`` (missing keys are ignored; leaf specs are shared)."""
        out = self._skeleton()
        for key in keys:
            if key in out:
                del out[key]
        return out

    def is_empty(self, recurse: bool = False) -> bool:
        """Whether there is no entry (with ``recurse``, whether there is no leaf at any depth)."""
        if not recurse:
            return not self._specs
        return all(isinstance(v, Composite) and v.is_empty(True) for v in self._specs.values())

    # ----------------------------------------------------------------- values
    def _build(self, method: str, shape: ShapeLike | None) -> TensorDict:
        lead = as_size(shape)
        source = {k: getattr(v, method)(lead) for k, v in self._specs.items()}
        return TensorDict(source, batch_size=lead + self._shape, device=self._device)

    def rand(self, shape: ShapeLike | None = None) -> TensorDict:
        """A TensorDict of random values of every entry.

        Args:
            shape: extra leading batch dims.

        Returns:
            A ``TensorDict`` of batch size ``[*shape, *self.shape]``.
        """
        return self._build("rand", shape)

    def zero(self, shape: ShapeLike | None = None) -> TensorDict:
        """A TensorDict of every entry's ``zero`` (batch size ``[*shape, *self.shape]``)."""
        return self._build("zero", shape)

    def one(self, shape: ShapeLike | None = None) -> TensorDict:
        """A TensorDict of every entry's ``one`` (batch size ``[*shape, *self.shape]``)."""
        return self._build("one", shape)

    def _failure(
        self, val: Any, prefix: tuple[str, ...]
    ) -> tuple[tuple[str, ...], TensorSpec, str] | None:
        """The first entry of ``val`` that does not fit: ``(key, spec, reason)``."""
        if not isinstance(val, (TensorDictBase, Mapping)):
            return prefix, self, f"expected a TensorDict, got {describe_value(val)}"
        for k, spec in self._specs.items():
            path = (*prefix, k)
            sub = val.get(k, None)
            if sub is None:
                return path, spec, "missing key"
            if isinstance(spec, Composite):
                failure = spec._failure(sub, path)
                if failure is not None:
                    return failure
            else:
                reason = spec._why_not_in(sub)
                if reason is not None:
                    return path, spec, reason
        return None

    @staticmethod
    def _message(failure: tuple[tuple[str, ...], TensorSpec, str]) -> str:
        path, spec, reason = failure
        if not path:
            return reason
        if reason == "missing key":
            return f"key {_key_repr(path)} is missing: its spec is {spec!r}"
        return f"key {_key_repr(path)} does not fit its spec {spec._name}: {reason}"

    def _why_not_in(self, val: Any) -> str | None:
        failure = self._failure(val, ())
        return None if failure is None else self._message(failure)

    def assert_is_in(self, val: Any) -> None:
        """Raises an ``AssertionError`` naming the first key of ``val`` that does not fit.

        Args:
            val: a TensorDict (or dict); keys that the spec does not have are ignored.

        Raises:
            AssertionError: naming the key, its spec and why (missing, shape, dtype, range).
        """
        failure = self._failure(val, ())
        if failure is not None:
            raise AssertionError(self._message(failure))

    def project(self, val: TensorDictBase) -> TensorDictBase:
        """Projects, in place, every entry of ``val`` that is not in its spec; returns ``val``.

        Args:
            val: a TensorDict (or dict) with every key of the spec.

        Returns:
            ``val``, whose entries are now in their specs (keys the spec lacks are kept as is).

        Raises:
            KeyError: when ``val`` lacks a key of the spec (nothing can be projected there).
            ValueError: naming the key, when an entry cannot be projected (e.g. its shape).
        """
        return self._project(val, ())

    def _project(self, val: Any, prefix: tuple[str, ...]) -> Any:
        if not isinstance(val, (TensorDictBase, MutableMapping)):
            where = f" at key {_key_repr(prefix)}" if prefix else ""
            raise ValueError(
                f"{self._name}.project: expected a TensorDict{where}, got {describe_value(val)}"
            )
        for k, spec in self._specs.items():
            path = (*prefix, k)
            sub = val.get(k, None)
            if sub is None:
                raise KeyError(
                    f"{self._name}.project: key {_key_repr(path)} is missing: its spec is "
                    f"{spec._name}"
                )
            if isinstance(spec, Composite):
                new = spec._project(sub, path)
            elif spec._why_not_in(sub) is None:
                continue
            else:
                try:
                    new = spec.project(sub)
                except ValueError as err:
                    raise ValueError(f"key {_key_repr(path)}: {err}") from err
            if new is not sub:
                val[k] = new
        return val

    def encode(self, val: Mapping, *, ignore_device: bool = False) -> TensorDict:
        """Encodes a (nested) dict of numpy arrays / python values into a TensorDict.

        Args:
            val: a mapping whose keys are in the spec (entries set to ``None`` are skipped).
            ignore_device: keep the values' devices.

        Returns:
            A ``TensorDict`` of batch size ``self.shape``.

        Raises:
            KeyError: for a key the spec does not have.
        """
        out = {}
        for k, v in val.items():
            spec = self._specs.get(k)
            if spec is None:
                raise KeyError(f"Composite.encode: {self._missing(k)}")
            if v is not None:
                out[k] = spec.encode(v, ignore_device=ignore_device)
        device = None if ignore_device else self._device
        return TensorDict(out, batch_size=self._shape, device=device)

    def to_numpy(self, val: TensorDictBase, safe: bool = False) -> dict[str, Any]:
        """Converts a TensorDict of this spec to a nested dict of numpy arrays."""
        if safe:
            self.assert_is_in(val)
        out: dict[str, np.ndarray | Any] = {}
        for k, spec in self._specs.items():
            sub = val.get(k, None)
            if sub is not None:
                out[k] = spec.to_numpy(sub)
        return out

    # ----------------------------------------------------------------- conversions, shape ops
    def _map(self, shape: torch.Size, device: Any, fn: Any) -> Composite:
        out = Composite(shape=shape, device=device)
        out._specs = {k: fn(v) for k, v in self._specs.items()}
        return out

    def to(self, dest: torch.dtype | DeviceLike) -> Composite:
        """The Composite on another device, or with its float leaves cast to a float dtype.

        Args:
            dest: a device, or a floating dtype (discrete and non-tensor leaves keep theirs).
        """
        if isinstance(dest, torch.dtype):
            if not dest.is_floating_point:
                raise ValueError(f"Composite.to: only floating dtypes can be applied, got {dest}")

            def cast(v: TensorSpec) -> TensorSpec:
                if v._is_composite or (v.dtype is not None and v.dtype.is_floating_point):
                    return v.to(dest)
                return v

            return self._map(self._shape, self._device, cast)
        device = as_device(dest)
        if device == self._device:
            return self
        return self._map(self._shape, device, lambda v: v.to(device))

    def clone(self) -> Composite:
        """A deep copy (no spec or tensor is shared)."""
        return self._map(self._shape, self._device, lambda v: v.clone())

    def expand(self, *shape: int | Sequence[int]) -> Composite:
        """The Composite with a new batch shape; every entry is expanded alike.

        Args:
            *shape: the full new batch shape, ending with the current one (``-1`` keeps a size,
                singletons may grow).
        """
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])  # type: ignore[arg-type]
        new = checked_expand_shape(self._shape, shape, 0, self._name)  # type: ignore[arg-type]
        n = self.ndim
        return self._map(new, self._device, lambda v: v.expand(*new, *v.shape[n:]))

    def squeeze(self, dim: int | None = None) -> Composite:
        """Removes singleton batch dims of the Composite (and of its entries).

        Args:
            dim: a batch dim of the Composite; ``None`` removes all its singleton dims.
        """
        if dim is None:
            dims = [i for i, s in enumerate(self._shape) if s == 1]
        else:
            d = self._batch_dim(dim)
            dims = [d] if self._shape[d] == 1 else []
        out = self
        for d in sorted(dims, reverse=True):
            shape = torch.Size((*out._shape[:d], *out._shape[d + 1 :]))
            out = out._map(shape, self._device, lambda v, d=d: v.squeeze(d))
        return out if dims else self.clone()

    def unsqueeze(self, dim: int) -> Composite:
        """Inserts a batch dim of size 1 at ``dim`` (a position among the Composite's dims)."""
        d = self._batch_dim(dim, extra=1)
        shape = torch.Size((*self._shape[:d], 1, *self._shape[d:]))
        return self._map(shape, self._device, lambda v: v.unsqueeze(d))

    # ----------------------------------------------------------------- comparison, display
    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Composite)
            and self._shape == other._shape
            and self._device == other._device
            and self._specs.keys() == other._specs.keys()
            and all(v == other._specs[k] for k, v in self._specs.items())
        )

    def __repr__(self) -> str:
        lines = [f"{k}: {v!r}," for k, v in self._specs.items()]
        lines += [f"shape={self._shape},", f"device={self._device})"]
        return "Composite(\n" + textwrap.indent("\n".join(lines), "    ")
