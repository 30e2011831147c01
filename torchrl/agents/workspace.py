"""``Workspace``: variables indexed by name and time step, stored in the rollout layout.

A workspace holds one TensorDict of batch ``[*B, capacity]`` (time is the last batch dim, as in
every rollout of the library) and a ``time_length``: the steps written so far. Agents read and
write single steps (``get``/``set``), whole sequences (``get_full``/``set_full``) or all the
variables of one step at once (``get_step``/``set_step``). Writing past the capacity grows the
storage (doubling); everything else is a view of the storage, so :meth:`to_tensordict` and
:meth:`from_tensordict` never copy.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._td_compat import entries, new_unchecked, plain_entries
from torchrl._types import DeviceLike, NestedKey

__all__ = ["Workspace"]

# Capacity of a fresh workspace's time dim when the first write does not ask for more.
_MIN_CAPACITY = 16

# A write plan not made yet (``None`` is a plan too: "take the general path").
_NO_PLAN: Any = object()


def read_entry(td: TensorDictBase, key: NestedKey) -> Any:
    """``td.get(key)``, reading the entries' dicts of plain TensorDicts directly (hot path)."""
    if type(key) is str and type(td) is TensorDict:
        found = entries(td).get(key)
        if found is None:
            raise KeyError(f"the TensorDict has no entry {key!r}")
        return found
    node: Any = td
    for name in key if isinstance(key, tuple) else (key,):
        found = plain_entries(node) if isinstance(node, TensorDictBase) else None
        node = found.get(name) if found is not None else td.get(key, None)
        if node is None:
            raise KeyError(f"the TensorDict has no entry {key!r}")
        if found is None:
            return node
    return node


# A step's TensorDict before it is built: its entries (views of the storage, ``None`` where a
# nested TensorDict goes) and the plans of its nested TensorDicts.
_ReadPlan = tuple[dict[str, Any], list[tuple[str, "_ReadPlan"]]]


def _build_step(
    plan: _ReadPlan, batch_size: torch.Size | None, device: torch.device | None
) -> TensorDictBase:
    """A fresh TensorDict (fresh nested ones too) of the views ``plan`` holds."""
    source, nested = plan
    if nested:
        source = dict(source)
        for name, sub in nested:
            source[name] = _build_step(sub, batch_size, device)
    # the constructor copies ``source`` into the TensorDict's own dict: the plan stays as it is
    return new_unchecked(source, batch_size=batch_size, device=device, nested=False)


def _time_index(n_batch: int, index: int | slice) -> tuple[Any, ...]:
    return (slice(None),) * n_batch + (index,)


class Workspace:
    """Named variables over time, in one TensorDict of batch ``[*batch_size, T]`` (time last).

    Args:
        batch_size: the batch dims before time (e.g. ``[8]`` for 8 envs); ``None`` takes it
            from the first write: a TensorDict's batch size (:meth:`set_step`), or a tensor's
            first dim (:meth:`set`).
        capacity: the time steps allocated at the first write (more are added on demand).
        device: where new entries are allocated (default: the device of the written data).

    Examples:
        >>> import torch
        >>> ws = Workspace(batch_size=[2])
        >>> ws.set("x", 0, torch.zeros(2, 3))
        >>> ws.set("x", 1, torch.ones(2, 3))
        >>> ws.time_length, ws.get_full("x").shape
        (2, torch.Size([2, 2, 3]))
        >>> td = ws.to_tensordict()
        >>> td.batch_size, td["x"].data_ptr() == ws.get_full("x").data_ptr()
        (torch.Size([2, 2]), True)
    """

    def __init__(
        self,
        batch_size: Sequence[int] | torch.Size | None = None,
        capacity: int = _MIN_CAPACITY,
        device: DeviceLike | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._batch_size = None if batch_size is None else torch.Size(batch_size)
        self._capacity = int(capacity)
        self._device = None if device is None else torch.device(device)
        self._td: TensorDictBase | None = None
        self._length = 0
        # leaves of the storage, flat and as a tree (rebuilt after the storage or its keys change)
        self._flat: dict[Any, torch.Tensor] | None = None
        self._step_shapes: dict[Any, torch.Size] = {}  # shape of one step of each leaf
        self._tree: dict[str, Any] | None = None  # nested names -> full keys
        self._views: dict[int, dict[Any, torch.Tensor]] = {}  # step -> {key: view of the step}
        self._kept: dict[Any, dict[str, Any]] = {}  # exclude -> the leaf tree without it
        self._read_plans: dict[Any, _ReadPlan] = {}  # (t, exclude) -> see get_step
        # (t, keys, dests) -> the views and step shapes they write, see _step_copies
        self._write_plans: dict[Any, tuple[list[torch.Tensor], list[torch.Size]] | None] = {}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_tensordict(cls, tensordict: TensorDictBase) -> Workspace:
        """Wraps a rollout TensorDict ``[*B, T]`` (time last) without copying it.

        Args:
            tensordict: the data; its last batch dim is time.

        Returns:
            A workspace whose storage is ``tensordict`` and whose length is ``T``.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> td = TensorDict({"obs": torch.zeros(4, 5, 3)}, batch_size=[4, 5])
            >>> ws = Workspace.from_tensordict(td)
            >>> ws.batch_size, ws.time_length, ws.get("obs", 2).data_ptr() > 0
            (torch.Size([4]), 5, True)
        """
        ws = cls()
        ws.load_tensordict(tensordict)
        return ws

    def load_tensordict(self, tensordict: TensorDictBase) -> None:
        """Makes ``tensordict`` (``[*B, T]``, time last) this workspace's storage, without a copy.

        The workspace forgets what it held; its batch size becomes ``[*B]`` and its length ``T``.

        Args:
            tensordict: the data.
        """
        if not isinstance(tensordict, TensorDictBase):
            raise TypeError(f"tensordict must be a TensorDict, got {type(tensordict).__name__}")
        if tensordict.ndim < 1:
            raise ValueError(
                "tensordict needs a time dim (batch [*B, T], time last), got batch_size="
                f"{tuple(tensordict.batch_size)}"
            )
        self._batch_size = tensordict.batch_size[:-1]
        self._device = None if tensordict.device is None else torch.device(tensordict.device)
        self._set_storage(tensordict)
        self._capacity = tensordict.batch_size[-1]
        self._length = tensordict.batch_size[-1]

    # ------------------------------------------------------------------ properties
    @property
    def batch_size(self) -> torch.Size | None:
        """The batch dims before time (``None`` until known)."""
        return self._batch_size

    @property
    def time_length(self) -> int:
        """The number of time steps written (one more than the last step written)."""
        return self._length

    @property
    def capacity(self) -> int:
        """The time steps allocated in the storage."""
        return self._capacity if self._td is None else self._td.batch_size[-1]

    @property
    def device(self) -> torch.device | None:
        """The device of the storage (or of new entries before the first write)."""
        if self._td is not None and self._td.device is not None:
            return self._td.device
        return self._device

    @property
    def storage(self) -> TensorDictBase | None:
        """The whole storage ``[*batch_size, capacity]`` (``None`` before the first write)."""
        return self._td

    def set_time_length(self, length: int) -> None:
        """Marks steps ``0..length-1`` as written (they keep what the storage holds).

        Args:
            length: ``0 <= length <= capacity``.
        """
        if not 0 <= length <= self.capacity:
            raise ValueError(f"set_time_length: need 0 <= length <= {self.capacity}, got {length}")
        self._length = int(length)

    def keys(self) -> list[NestedKey]:
        """The stored variables (nested keys as tuples, leaves only)."""
        if self._td is None:
            return []
        return list(self._td.keys(include_nested=True, leaves_only=True))

    def __contains__(self, key: NestedKey) -> bool:
        return self._td is not None and key in self._td.keys(include_nested=True)

    def __repr__(self) -> str:
        return (
            f"Workspace(batch_size={None if self._batch_size is None else list(self._batch_size)},"
            f" time_length={self._length}, capacity={self.capacity}, keys={self.keys()})"
        )

    # ------------------------------------------------------------------ single steps
    def get(self, key: NestedKey, t: int) -> torch.Tensor:
        """The value of ``key`` at step ``t`` (a view, ``[*batch_size, *feature]``).

        Args:
            key: the variable.
            t: the step, ``0 <= t < time_length`` (negative counts from the end).
        """
        entry = self._entry(key)
        return entry.select(len(self._batch_size or ()), self._check_t(t, key))

    def set(self, key: NestedKey, t: int, value: torch.Tensor) -> None:
        """Writes ``value`` (``[*batch_size, *feature]``) as ``key`` at step ``t``.

        The storage grows when ``t`` is past its capacity; a new key is allocated (zeros) over
        the whole capacity.

        Args:
            key: the variable.
            t: the step, ``t >= 0``.
            value: the value; its leading dims must be the batch size.
        """
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"Workspace.set({key!r}): value must be a tensor, got {type(value)}")
        if self._batch_size is None:
            if value.ndim == 0:
                raise ValueError(
                    f"Workspace.set({key!r}): the batch size is unknown and the value has no "
                    "dims; pass batch_size to Workspace(...) or write a TensorDict first with "
                    "set_step"
                )
            # SaLinA's convention: without a batch size, the first dim of the first write is it.
            self._batch_size = value.shape[:1]
        self._prepare_write(t)
        self._write(key, t, value)
        self._length = max(self._length, t + 1)

    def _write(self, key: NestedKey, t: int, value: torch.Tensor) -> None:
        """``set`` once the batch size is known and ``t`` fits in the storage."""
        flat = self._flat if self._flat is not None else self._leaves()
        entry = flat.get(key)
        nb = len(self._batch_size or ())
        if entry is not None and self._step_shapes[key] == value.shape:
            self._step_views(t)[key].copy_(value)
            return
        if entry is None:
            if tuple(value.shape[:nb]) != tuple(self._batch_size or ()):
                raise ValueError(
                    f"Workspace.set({key!r}): expected a value of shape "
                    f"[{list(self._batch_size or ())}, ...], got {list(value.shape)}"
                )
            entry = self._allocate(value)
            self._storage().set(key, entry)
            self._invalidate()
        elif entry.shape[:nb] + entry.shape[nb + 1 :] != value.shape:
            if tuple(value.shape[:nb]) != tuple(self._batch_size or ()):
                raise ValueError(
                    f"Workspace.set({key!r}): expected a value of shape "
                    f"[{list(self._batch_size or ())}, ...], got {list(value.shape)}"
                )
            raise ValueError(
                f"Workspace.set({key!r}): stored steps have shape {list(entry.shape[nb + 1 :])} "
                f"after the batch dims, got {list(value.shape[nb:])}"
            )
        entry.select(nb, t).copy_(value)

    def get_step(
        self,
        t: int,
        keys: Sequence[NestedKey] | None = None,
        exclude: Collection[NestedKey] = (),
    ) -> TensorDictBase:
        """All variables (or ``keys``) at step ``t``: a TensorDict ``[*batch_size]`` of views.

        Args:
            t: the step, ``0 <= t < time_length`` (negative counts from the end).
            keys: the variables to include (default: all).
            exclude: variables or groups left out (``"next"``, ``("next", "reward")``).
        """
        t = self._check_t(t, "<step>")
        nb = len(self._batch_size or ())
        if keys is not None:
            td = self._storage()
            missing = [k for k in keys if k not in td.keys(include_nested=True)]
            if missing:
                raise KeyError(f"Workspace has no variable {missing[0]!r}; it has {self.keys()}")
            step = td.select(*keys)[_time_index(nb, t)]
            return step.copy() if step.is_locked else step
        device = None if self._td is None else self._td.device
        return _build_step(self._read_plan(t, exclude), self._batch_size, device)

    def _read_plan(self, t: int, exclude: Collection[NestedKey]) -> _ReadPlan:
        """The views of step ``t`` without ``exclude``, laid out for :func:`_build_step`.

        Kept per layout for a tuple ``exclude`` (agents pass the same one at every step).
        """
        key = (t, exclude) if type(exclude) is tuple else None
        try:
            plan = self._read_plans.get(key) if key is not None else None
        except TypeError:  # a tuple holding lists: not a dict key
            key = plan = None
        if plan is not None:
            return plan
        views = self._step_views(t)

        def plan_of(tree: dict[str, Any]) -> _ReadPlan:
            source: dict[str, Any] = {}
            nested: list[tuple[str, _ReadPlan]] = []
            for name, node in tree.items():
                if type(node) is dict:
                    source[name] = None  # keeps the entry's place among its siblings
                    nested.append((name, plan_of(node)))
                else:
                    source[name] = views[node]
            return source, nested

        tree = self._kept.get(exclude) if key is not None else None
        if tree is None:
            tree = self._kept_tree(exclude)
            if key is not None:
                self._kept[exclude] = tree  # type: ignore[index]
        plan = plan_of(tree)
        if key is not None:
            self._read_plans[key] = plan
        return plan

    def _kept_tree(self, exclude: Collection[NestedKey]) -> dict[str, Any]:
        """The leaf tree (nested names -> full keys) without the ``exclude`` keys."""
        self._leaves()
        assert self._tree is not None
        skip = {(k,) if isinstance(k, str) else tuple(k) for k in exclude}

        def prune(tree: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
            out = {}
            for name, node in tree.items():
                here = (*path, name)
                if here in skip:
                    continue
                out[name] = prune(node, here) if type(node) is dict else node
            return out

        return prune(self._tree, ())

    def set_step(
        self,
        t: int,
        tensordict: TensorDictBase,
        under: str | None = None,
        keys: Sequence[NestedKey] | None = None,
    ) -> None:
        """Writes every entry of ``tensordict`` (batch ``[*batch_size]``) at step ``t``.

        Args:
            t: the step, ``t >= 0``.
            tensordict: the values; sets the batch size of a workspace that has none yet.
            under: write the entries under this key (``under="next"``: ``("next", key)``).
            keys: write only these entries of ``tensordict`` (default: all its leaves).
        """
        self._write_steps(((t, tensordict, under, keys, None),))

    def _write_steps(
        self,
        writes: Sequence[
            tuple[
                int,
                TensorDictBase,
                str | None,
                Sequence[NestedKey] | None,
                Sequence[NestedKey] | None,
            ]
        ],
    ) -> None:
        """:meth:`set_step` of several steps with one ``torch._foreach_copy_``.

        Args:
            writes: ``(t, tensordict, under, keys, dests)`` each: the arguments of
                :meth:`set_step`, and ``dests`` the destination key of each of ``keys`` in
                place of ``under`` (``None``: from ``under``). The copies run in this order.
        """
        last = -1
        for t, tensordict, _, _, _ in writes:
            if self._batch_size is None:
                self._batch_size = tensordict.batch_size
            elif tensordict.batch_size != self._batch_size:
                raise ValueError(
                    "Workspace.set_step: expected a TensorDict of batch size "
                    f"{list(self._batch_size)}, got {list(tensordict.batch_size)}"
                )
            if t < 0:
                raise IndexError(f"Workspace: cannot write at negative step {t}")
            if t > last:
                last = t
        # grown before any view is taken: growth replaces the leaves (a new variable does not)
        self._prepare_write(last)
        dsts: list[torch.Tensor] = []
        srcs: list[torch.Tensor] = []
        for t, tensordict, under, keys, dests in writes:
            self._step_copies(t, tensordict, under, keys, dests, dsts, srcs)
        if dsts:
            # one call for all the copies (as the collectors write their buffers)
            torch._foreach_copy_(dsts, srcs)
        if last >= self._length:
            self._length = last + 1

    def _step_copies(
        self,
        t: int,
        tensordict: TensorDictBase,
        under: str | None,
        keys: Sequence[NestedKey] | None,
        dests: Sequence[NestedKey] | None,
        dsts: list[torch.Tensor],
        srcs: list[torch.Tensor],
    ) -> None:
        """Appends the copies that write ``tensordict`` at step ``t`` to ``dsts``/``srcs``.

        A new variable is allocated and written at once (a wrong shape raises).
        """
        if keys is not None and type(tensordict) is TensorDict:
            # the hot path: string keys read from the entries' dict, destinations made once
            try:
                plan_key = (t, under, tuple(keys), None if dests is None else tuple(dests))
                plan = self._write_plans.get(plan_key, _NO_PLAN)
                if plan is _NO_PLAN:
                    plan = self._write_plans[plan_key] = self._write_plan(t, under, keys, dests)
            except TypeError:  # a key held in a list: not a dict key
                plan = None
            if plan is not None:
                raw = entries(tensordict)
                try:
                    values = [raw[key] for key in keys]  # type: ignore[index]
                except KeyError:
                    values = None  # the general path below raises the error
                if values is not None and [value.shape for value in values] == plan[1]:
                    dsts += plan[0]
                    srcs += values
                    return
        items: Any
        if keys is None:
            items = tensordict.items(include_nested=True, leaves_only=True)
        else:
            items = ((key, read_entry(tensordict, key)) for key in keys)
        views = self._step_views(t)
        shapes = self._step_shapes
        for i, (key, value) in enumerate(items):
            dest: Any = key
            if dests is not None:
                dest = dests[i]
            elif under is not None:
                dest = (under, *key) if isinstance(key, tuple) else (under, key)
            view = views.get(dest)
            if view is not None and shapes[dest] == value.shape:
                dsts.append(view)
                srcs.append(value)
            else:  # a new variable (or a wrong shape, which raises)
                self._write(dest, t, value)
                views = self._step_views(t)

    def _write_plan(
        self,
        t: int,
        under: str | None,
        keys: Sequence[NestedKey],
        dests: Sequence[NestedKey] | None,
    ) -> tuple[list[torch.Tensor], list[torch.Size]] | None:
        """The views of step ``t`` that string ``keys`` are written to, and their shapes.

        ``None`` when a key is nested or a destination is a new variable (which the general
        path allocates, changing the layout and so dropping the plans).
        """
        if not all(type(key) is str for key in keys):
            return None
        targets: list[Any] = list(dests if dests is not None else keys)
        if dests is None and under is not None:
            targets = [(under, key) for key in keys]
        views = self._step_views(t)
        if not all(dest in views for dest in targets):
            return None
        return [views[dest] for dest in targets], [self._step_shapes[dest] for dest in targets]

    # ------------------------------------------------------------------ whole sequences
    def get_full(self, key: NestedKey) -> torch.Tensor:
        """All written steps of ``key``: a view ``[*batch_size, time_length, *feature]``."""
        entry = self._entry(key)
        return entry.narrow(len(self._batch_size or ()), 0, self._length)

    def set_full(self, key: NestedKey, value: torch.Tensor) -> None:
        """Stores ``value`` (``[*batch_size, T, *feature]``) as all the steps of ``key``.

        The tensor is stored as it is (no copy; gradients flow through later reads). ``T`` must
        equal ``time_length``, or sets it when the workspace is empty; the storage's spare
        capacity is dropped (views, no copy).

        Args:
            key: the variable.
            value: the sequence.
        """
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"Workspace.set_full({key!r}): value must be a tensor, got {type(value)}"
            )
        if self._batch_size is None:
            raise ValueError(
                f"Workspace.set_full({key!r}): the batch size is unknown; pass batch_size to "
                "Workspace(...)"
            )
        nb = len(self._batch_size)
        if value.ndim <= nb or tuple(value.shape[:nb]) != tuple(self._batch_size):
            raise ValueError(
                f"Workspace.set_full({key!r}): expected a value of shape "
                f"[{list(self._batch_size)}, T, ...], got {list(value.shape)}"
            )
        steps = value.shape[nb]
        if self._length == 0 and self._td is None:
            self._set_storage(
                TensorDict({}, batch_size=[*self._batch_size, steps], device=self._device)
            )
            self._length = steps
        elif steps != self._length:
            raise ValueError(
                f"Workspace.set_full({key!r}): the workspace holds {self._length} steps, the "
                f"value has {steps}"
            )
        td = self._storage()
        if td.batch_size[-1] != steps:
            self._set_storage(td[_time_index(nb, slice(0, steps))])
        self._storage().set(key, value)
        self._invalidate()

    # ------------------------------------------------------------------ maintenance
    def copy_n_last_steps(self, n: int) -> None:
        """Copies the last ``n`` written steps to steps ``0..n-1``; the length becomes ``n``.

        Runs between two acquisitions: the next run starts at ``t=n`` from where the last ended.

        Args:
            n: ``1 <= n <= time_length``.

        Examples:
            >>> import torch
            >>> ws = Workspace(batch_size=[1])
            >>> for t in range(4):
            ...     ws.set("x", t, torch.full((1,), float(t)))
            >>> ws.copy_n_last_steps(2)
            >>> ws.get_full("x")
            tensor([[2., 3.]])
        """
        if not 1 <= n <= self._length:
            raise ValueError(f"copy_n_last_steps: n must be in [1, {self._length}], got {n}")
        start = self._length - n
        # in increasing order: a step is read before any write lands on it (sources >= dests)
        for i in range(n):
            if start + i == i:
                continue
            src, dst = self._step_views(start + i), self._step_views(i)
            keys = list(dst)
            torch._foreach_copy_([dst[k] for k in keys], [src[k] for k in keys])
        self._length = n

    def clear(self) -> None:
        """Forgets the written steps (the storage is kept and overwritten by later writes)."""
        self._length = 0

    def to(self, device: DeviceLike) -> Workspace:
        """A workspace with the same steps on ``device`` (``self`` when already there)."""
        device = torch.device(device)  # type: ignore[arg-type]
        if self._td is None:
            return Workspace(self._batch_size, self._capacity, device)
        leaves = self._td.values(include_nested=True, leaves_only=True)
        if self._td.device == device or all(x.device == device for x in leaves):
            return self
        out = Workspace(self._batch_size, self._capacity, device)
        out._set_storage(self._td.to(device))
        out._length = self._length
        return out

    def share_memory_(self) -> Workspace:
        """Moves the storage to shared memory (for worker processes); returns ``self``."""
        self._storage().share_memory_()
        return self

    def to_tensordict(self) -> TensorDictBase:
        """The written steps as a rollout TensorDict ``[*batch_size, time_length]`` (views).

        Examples:
            >>> import torch
            >>> ws = Workspace(batch_size=[3])
            >>> ws.set("a", 0, torch.ones(3))
            >>> td = ws.to_tensordict()
            >>> td.batch_size, td["a"].data_ptr() == ws.get("a", 0).data_ptr()
            (torch.Size([3, 1]), True)
        """
        td = self._storage()
        if td.batch_size[-1] == self._length:
            return td
        return self._narrow(0, self._length)

    def time_slice(self, start: int, stop: int) -> TensorDictBase:
        """Steps ``start..stop-1`` as a rollout TensorDict (views)."""
        if not 0 <= start <= stop <= self._length:
            raise ValueError(
                f"time_slice: need 0 <= start <= stop <= {self._length}, got ({start}, {stop})"
            )
        return self._narrow(start, stop)

    def _narrow(self, start: int, stop: int) -> TensorDictBase:
        """Steps ``start..stop-1`` as a TensorDict of views, built without TensorDict indexing."""
        self._leaves()
        assert self._tree is not None and self._flat is not None
        flat, nb = self._flat, len(self._batch_size or ())

        def build(tree: dict[str, Any]) -> dict[str, Any]:
            return {
                name: build(node)
                if isinstance(node, dict)
                else flat[node].narrow(nb, start, stop - start)
                for name, node in tree.items()
            }

        return new_unchecked(
            build(self._tree),
            batch_size=torch.Size([*(self._batch_size or ()), stop - start]),
            device=self._td_device(),
        )

    def batch_slice(self, index: slice) -> Workspace:
        """A workspace over the rows ``index`` of the batch (first batch dim), sharing storage."""
        td = self._storage()
        out = Workspace(None, self._capacity, self._device)
        out._set_storage(td[index])
        out._batch_size = td[index].batch_size[:-1]
        out._length = self._length
        return out

    def items(self) -> Iterator[tuple[NestedKey, torch.Tensor]]:
        """``(key, get_full(key))`` for every variable."""
        for key in self.keys():
            yield key, self.get_full(key)

    # ------------------------------------------------------------------ internals
    def _storage(self) -> TensorDictBase:
        if self._td is None:
            if self._batch_size is None:
                raise ValueError("the workspace is empty and its batch size is unknown")
            self._set_storage(
                TensorDict({}, batch_size=[*self._batch_size, self._capacity], device=self._device)
            )
        assert self._td is not None
        return self._td

    def _td_device(self) -> torch.device | None:
        return None if self._td is None else self._td.device

    def _set_storage(self, td: TensorDictBase) -> None:
        self._td = td
        self._invalidate()

    def _invalidate(self) -> None:
        self._flat = self._tree = None
        self._views = {}
        self._kept = {}
        self._read_plans = {}
        self._write_plans = {}

    def _step_views(self, t: int) -> dict[Any, torch.Tensor]:
        """Views of every leaf at step ``t``, made once per storage layout."""
        views = self._views.get(t)
        if views is None:
            nb = len(self._batch_size or ())
            views = {key: value.select(nb, t) for key, value in self._leaves().items()}
            self._views[t] = views
        return views

    def _leaves(self) -> dict[Any, torch.Tensor]:
        if self._flat is None:
            td = self._storage()
            self._flat = dict(td.items(include_nested=True, leaves_only=True))  # type: ignore[arg-type]
            nb = len(self._batch_size or ())
            self._step_shapes = {
                key: value.shape[:nb] + value.shape[nb + 1 :] for key, value in self._flat.items()
            }
            tree: dict[str, Any] = {}
            for key in self._flat:
                path = key if isinstance(key, tuple) else (key,)
                node = tree
                for name in path[:-1]:
                    node = node.setdefault(name, {})
                node[path[-1]] = key
            self._tree = tree
        return self._flat

    def _entry(self, key: NestedKey) -> torch.Tensor:
        entry = None if self._td is None else self._leaves().get(key)
        if entry is None:
            if key in self:
                raise KeyError(f"Workspace variable {key!r} is a nested TensorDict, not a tensor")
            raise KeyError(f"Workspace has no variable {key!r}; it has {self.keys()}")
        return entry

    def _check_t(self, t: int, key: Any) -> int:
        if t < 0:
            t += self._length
        if not 0 <= t < self._length:
            raise IndexError(
                f"Workspace: step {t} of {key!r} is out of range: {self._length} steps written"
            )
        return t

    def _prepare_write(self, t: int) -> None:
        if t < 0:
            raise IndexError(f"Workspace: cannot write at negative step {t}")
        td = self._td if self._td is not None else self._storage()
        capacity = td.batch_size[-1]
        if t >= capacity:
            self._grow(max(t + 1, 2 * capacity))

    def _grow(self, capacity: int) -> None:
        td = self._storage()
        nb = len(self._batch_size or ())
        old = td.batch_size[-1]

        def grow(x: torch.Tensor) -> torch.Tensor:
            shape = list(x.shape)
            shape[nb] = capacity
            out = x.new_zeros(shape)
            out.narrow(nb, 0, old).copy_(x)
            return out

        grown = td.apply(grow, batch_size=[*td.batch_size[:-1], capacity])
        assert grown is not None
        self._set_storage(grown)

    def _allocate(self, value: torch.Tensor) -> torch.Tensor:
        nb = len(self._batch_size or ())
        shape = [*value.shape[:nb], self._storage().batch_size[-1], *value.shape[nb:]]
        device = self.device if self.device is not None else value.device
        return torch.zeros(shape, dtype=value.dtype, device=device)
