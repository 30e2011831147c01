"""Whole trajectories of stored transitions: iterate over them, filter them by a predicate.

:func:`iter_trajectories` cuts a flat batch of transitions (as a replay buffer stores them) into
its trajectories, :func:`filter_trajectories` keeps those a predicate accepts. Predicates are
plain callables or :class:`TrajectoryPredicate` objects built from :data:`traj` expressions::

    filter_trajectories(data, (traj.reward.sum() > 100) & (traj.length < 200))
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from tensordict import TensorDictBase

from torchrl._keys import (
    ACTION,
    COLLECTOR,
    DONE,
    DONE_KEYS,
    NEXT,
    OBSERVATION,
    REWARD,
    TERMINATED,
    TRAJ_IDS,
    TRUNCATED,
)
from torchrl._types import NestedKey
from torchrl.data.replay_buffers.utils import nested_key_str

__all__ = [
    "Trajectory",
    "TrajectoryPredicate",
    "filter_trajectories",
    "find_start_stop_traj",
    "iter_trajectories",
    "traj",
]

#: Trajectory-id entries looked for, in this order, when no ``trajectory_key`` is given.
DEFAULT_TRAJECTORY_KEYS: tuple[NestedKey, ...] = ((COLLECTOR, TRAJ_IDS), TRAJ_IDS, "episode")


def _key_tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


class Trajectory:
    """The transitions of one trajectory (a view over consecutive items of a batch).

    :meth:`get` looks a key up at the root first and under ``"next"`` second, so
    ``trajectory.get("reward")`` is the post-step reward and ``trajectory.get("observation")`` the
    pre-step observation. The common entries are properties (:attr:`reward`, :attr:`done`, ...).

    Args:
        data: the transitions, batch size ``[T]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> data = TensorDict(
        ...     observation=torch.zeros(3, 2),
        ...     next=TensorDict(reward=torch.ones(3, 1), batch_size=[3]),
        ...     batch_size=[3],
        ... )
        >>> t = Trajectory(data)
        >>> t.length, float(t.reward.sum())
        (3, 3.0)
    """

    def __init__(self, data: TensorDictBase) -> None:
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"a Trajectory wraps a TensorDict, got {type(data).__name__}")
        if data.batch_dims != 1:
            raise ValueError(
                f"a Trajectory needs transitions with one batch dim (time), got batch size "
                f"{list(data.batch_size)}"
            )
        self.data = data

    def get(self, key: NestedKey, default: Any = None) -> Any:
        """The entry ``key`` at the root, else ``("next", *key)``, else ``default``.

        Args:
            key: the entry to read.
            default: returned when neither entry exists.
        """
        key_t = _key_tuple(key)
        value = self.data.get(key_t, None)
        if value is None:
            value = self.data.get((NEXT, *key_t), None)
        return default if value is None else value

    def __getitem__(self, key: NestedKey) -> Any:
        value = self.get(key)
        if value is None:
            raise KeyError(
                f"the trajectory has no entry {nested_key_str(key)!r} (nor under 'next'); it holds "
                f"{sorted(map(nested_key_str, self.data.keys(True, True)))}"
            )
        return value

    def __len__(self) -> int:
        return self.data.batch_size[0]

    @property
    def length(self) -> int:
        """The number of transitions."""
        return len(self)

    @property
    def reward(self) -> torch.Tensor:
        """The post-step rewards, ``[T, ...]``."""
        return self[REWARD]

    @property
    def done(self) -> torch.Tensor:
        """The post-step done flags, ``[T, ...]``."""
        return self[DONE]

    @property
    def terminated(self) -> torch.Tensor:
        """The post-step terminated flags, ``[T, ...]``."""
        return self[TERMINATED]

    @property
    def truncated(self) -> torch.Tensor:
        """The post-step truncated flags, ``[T, ...]``."""
        return self[TRUNCATED]

    @property
    def observation(self) -> torch.Tensor:
        """The pre-step observations, ``[T, ...]``."""
        return self[OBSERVATION]

    @property
    def action(self) -> torch.Tensor:
        """The actions, ``[T, ...]``."""
        return self[ACTION]

    def __repr__(self) -> str:
        return f"Trajectory(length={len(self)}, keys={sorted(map(str, self.data.keys()))})"


class TrajectoryPredicate:
    """A boolean test of a :class:`Trajectory`, combinable with ``&``, ``|`` and ``~``.

    Comparing a :data:`traj` expression builds one (``traj.reward.sum() > 100``); any callable
    can be wrapped too.

    Args:
        fn: maps a :class:`Trajectory` to a bool (or a one-element tensor).
        description: shown by ``repr``.
        keys: the entries ``fn`` reads, or ``None`` when unknown.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> data = TensorDict(next=TensorDict(reward=torch.ones(4, 1), batch_size=[4]), batch_size=[4])
        >>> predicate = (traj.reward.sum() > 3) & (traj.length < 10)
        >>> predicate(Trajectory(data)), sorted(predicate.required_keys())
        (True, ['reward'])
    """

    def __init__(
        self,
        fn: Callable[[Trajectory], Any],
        description: str = "predicate",
        keys: frozenset | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"a TrajectoryPredicate wraps a callable, got {type(fn).__name__}")
        self.fn = fn
        self.description = description
        self.keys = None if keys is None else frozenset(keys)

    def __call__(self, trajectory: Trajectory) -> bool:
        """Whether ``trajectory`` passes.

        Args:
            trajectory: the trajectory to test.
        """
        return _as_bool(self.fn(trajectory), self.description)

    def required_keys(self) -> frozenset | None:
        """The entries the predicate reads, or ``None`` when unknown (a wrapped callable)."""
        return self.keys

    def _combine(
        self, other: Any, op: Callable[[bool, bool], bool], sym: str
    ) -> TrajectoryPredicate:
        right = _as_predicate(other)
        keys = None
        if self.keys is not None and right.keys is not None:
            keys = self.keys | right.keys
        return TrajectoryPredicate(
            lambda t: op(self(t), right(t)), f"({self.description} {sym} {right.description})", keys
        )

    def __and__(self, other: Any) -> TrajectoryPredicate:
        return self._combine(other, lambda a, b: a and b, "&")

    def __or__(self, other: Any) -> TrajectoryPredicate:
        return self._combine(other, lambda a, b: a or b, "|")

    def __invert__(self) -> TrajectoryPredicate:
        return TrajectoryPredicate(lambda t: not self(t), f"~{self.description}", self.keys)

    def __repr__(self) -> str:
        return f"TrajectoryPredicate({self.description})"


def _as_bool(value: Any, description: str) -> bool:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"{description} gave a tensor of shape {list(value.shape)}, not one value: "
                f"reduce it first (e.g. .sum(), .any(), .last())"
            )
        return bool(value.item())
    return bool(value)


def _as_predicate(value: Any) -> TrajectoryPredicate:
    if isinstance(value, TrajectoryPredicate):
        return value
    if isinstance(value, _Expression):
        return TrajectoryPredicate(value.fn, value.description, value.keys)
    if callable(value):
        return TrajectoryPredicate(value, getattr(value, "__name__", "callable"))
    raise TypeError(
        f"expected a TrajectoryPredicate or a callable Trajectory -> bool, got {type(value).__name__}"
    )


class _Expression:
    """A value computed from a trajectory; comparisons give :class:`TrajectoryPredicate`."""

    def __init__(self, fn: Callable[[Trajectory], Any], description: str, keys: frozenset) -> None:
        self.fn = fn
        self.description = description
        self.keys = keys

    def __call__(self, trajectory: Trajectory) -> Any:
        return self.fn(trajectory)

    def _reduce(self, name: str, reduce: Callable[[torch.Tensor], torch.Tensor]) -> _Expression:
        def fn(t: Trajectory) -> torch.Tensor:
            return reduce(torch.as_tensor(self.fn(t)))

        return _Expression(fn, f"{self.description}.{name}()", self.keys)

    def sum(self) -> _Expression:
        """The sum over all elements."""
        return self._reduce("sum", torch.sum)

    def mean(self) -> _Expression:
        """The mean over all elements (as float)."""
        return self._reduce("mean", lambda x: x.float().mean())

    def max(self) -> _Expression:
        """The largest element."""
        return self._reduce("max", torch.max)

    def min(self) -> _Expression:
        """The smallest element."""
        return self._reduce("min", torch.min)

    def any(self) -> _Expression:
        """Whether any element is true."""
        return self._reduce("any", lambda x: x.bool().any())

    def all(self) -> _Expression:
        """Whether every element is true."""
        return self._reduce("all", lambda x: x.bool().all())

    def first(self) -> _Expression:
        """The value at the first step (sum over its elements if it has several)."""
        return self._reduce("first", lambda x: x[0].sum() if x[0].numel() > 1 else x[0])

    def last(self) -> _Expression:
        """The value at the last step (sum over its elements if it has several)."""
        return self._reduce("last", lambda x: x[-1].sum() if x[-1].numel() > 1 else x[-1])

    def _binary(self, other: Any, op: Callable[[Any, Any], Any], sym: str) -> _Expression:
        if isinstance(other, _Expression):
            return _Expression(
                lambda t: op(self.fn(t), other.fn(t)),
                f"({self.description} {sym} {other.description})",
                self.keys | other.keys,
            )
        return _Expression(
            lambda t: op(self.fn(t), other), f"({self.description} {sym} {other!r})", self.keys
        )

    def __add__(self, other: Any) -> _Expression:
        return self._binary(other, operator.add, "+")

    def __sub__(self, other: Any) -> _Expression:
        return self._binary(other, operator.sub, "-")

    def __mul__(self, other: Any) -> _Expression:
        return self._binary(other, operator.mul, "*")

    def __truediv__(self, other: Any) -> _Expression:
        return self._binary(other, operator.truediv, "/")

    def _compare(self, other: Any, op: Callable[[Any, Any], Any], sym: str) -> TrajectoryPredicate:
        expr = self._binary(other, op, sym)
        return TrajectoryPredicate(expr.fn, expr.description, expr.keys)

    def __gt__(self, other: Any) -> TrajectoryPredicate:
        return self._compare(other, operator.gt, ">")

    def __ge__(self, other: Any) -> TrajectoryPredicate:
        return self._compare(other, operator.ge, ">=")

    def __lt__(self, other: Any) -> TrajectoryPredicate:
        return self._compare(other, operator.lt, "<")

    def __le__(self, other: Any) -> TrajectoryPredicate:
        return self._compare(other, operator.le, "<=")

    def __eq__(self, other: Any) -> TrajectoryPredicate:  # type: ignore[override]
        return self._compare(other, operator.eq, "==")

    def __ne__(self, other: Any) -> TrajectoryPredicate:  # type: ignore[override]
        return self._compare(other, operator.ne, "!=")

    # A boolean expression (``traj.done.any()``) combines with predicates as its truth value.
    def __and__(self, other: Any) -> TrajectoryPredicate:
        return _as_predicate(self) & other

    def __or__(self, other: Any) -> TrajectoryPredicate:
        return _as_predicate(self) | other

    def __invert__(self) -> TrajectoryPredicate:
        return ~_as_predicate(self)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<trajectory expression {self.description}>"


class TrajectoryExpressions:
    """Builds trajectory expressions: ``traj.reward``, ``traj["my_key"]``, ``traj.length``.

    An entry expression reads the entry like :meth:`Trajectory.get` (root first, then under
    ``"next"``); reduce it (``.sum()``, ``.mean()``, ``.max()``, ``.min()``, ``.any()``,
    ``.all()``, ``.first()``, ``.last()``), combine with ``+ - * /`` and compare to get a
    :class:`TrajectoryPredicate`. Use the module-level instance :data:`traj`.

    Examples:
        >>> predicate = traj["observation"].max() < 5
        >>> sorted(predicate.required_keys())
        ['observation']
    """

    def __getitem__(self, key: NestedKey) -> _Expression:
        key_t = _key_tuple(key)
        name = key_t[0] if len(key_t) == 1 else str(key_t)
        return _Expression(lambda t: t[key_t], f"traj.{name}", frozenset({key}))

    @property
    def length(self) -> _Expression:
        """The number of transitions."""
        return _Expression(lambda t: len(t), "traj.length", frozenset())

    @property
    def reward(self) -> _Expression:
        """The post-step rewards."""
        return self[REWARD]

    @property
    def done(self) -> _Expression:
        """The post-step done flags."""
        return self[DONE]

    @property
    def terminated(self) -> _Expression:
        """The post-step terminated flags."""
        return self[TERMINATED]

    @property
    def truncated(self) -> _Expression:
        """The post-step truncated flags."""
        return self[TRUNCATED]

    @property
    def observation(self) -> _Expression:
        """The pre-step observations."""
        return self[OBSERVATION]

    @property
    def action(self) -> _Expression:
        """The actions."""
        return self[ACTION]


#: The trajectory-expression builder (``traj.reward.sum() > 100``).
traj = TrajectoryExpressions()


def _trajectory_ids(data: TensorDictBase, trajectory_key: NestedKey | None) -> torch.Tensor | None:
    if trajectory_key is not None:
        ids = data.get(trajectory_key, None)
        if ids is None:
            raise KeyError(f"trajectory_key {nested_key_str(trajectory_key)!r} is not in the data")
        return ids
    for key in DEFAULT_TRAJECTORY_KEYS:
        ids = data.get(key, None)
        if ids is not None:
            return ids
    return None


def _end_flags(data: TensorDictBase) -> torch.Tensor | None:
    """The union of the done-like flags under ``"next"`` (else at the root), ``[N]`` bool."""
    n = data.batch_size[0]
    for prefix in ((NEXT,), ()):
        found = [data.get((*prefix, k), None) for k in DONE_KEYS]
        flags = [f for f in found if isinstance(f, torch.Tensor)]
        if flags:
            out = torch.zeros(n, dtype=torch.bool, device=flags[0].device)
            for f in flags:
                out |= f.reshape(n, -1).bool().any(-1)
            return out
    return None


def trajectory_bounds(
    data: TensorDictBase, trajectory_key: NestedKey | None = None
) -> torch.Tensor:
    """Start and stop (exclusive) of each trajectory of a flat batch of transitions, ``[K, 2]``.

    Args:
        data: transitions of batch size ``[N]``, each trajectory stored contiguously and in order.
        trajectory_key: entry of per-transition trajectory ids; when ``None``, the first of
            ``("collector", "traj_ids")``, ``"traj_ids"``, ``"episode"`` present is used, else the
            done / terminated / truncated flags (under ``"next"``, else at the root).

    Returns:
        A long tensor ``[K, 2]`` of ``(start, stop)`` rows, in storage order.

    Raises:
        ValueError: ``data`` does not have exactly one batch dim, or nothing tells the
            trajectories apart.
        KeyError: ``trajectory_key`` is not in the data.
    """
    if not isinstance(data, TensorDictBase):
        raise TypeError(f"expected a TensorDict of transitions, got {type(data).__name__}")
    if data.batch_dims != 1:
        raise ValueError(
            f"expected transitions with a single batch dim, got batch size {list(data.batch_size)}"
            f": flatten the data first (data.reshape(-1))"
        )
    n = data.batch_size[0]
    if n == 0:
        return torch.zeros(0, 2, dtype=torch.long)
    ids = _trajectory_ids(data, trajectory_key)
    if ids is not None:
        ids = ids.reshape(n, -1)
        ends = torch.zeros(n, dtype=torch.bool)
        ends[:-1] = (ids[1:] != ids[:-1]).any(-1).cpu()
    else:
        flags = _end_flags(data)
        if flags is None:
            raise ValueError(
                "cannot split the data into trajectories: it has no trajectory ids "
                f"({', '.join(map(nested_key_str, DEFAULT_TRAJECTORY_KEYS))}) and no done / "
                "terminated / truncated flags; pass trajectory_key="
            )
        warnings.warn(
            "splitting trajectories at their done flags: a trajectory whose last transition has "
            "no done flag set is merged with the following one; store trajectory ids "
            "(e.g. ('collector', 'traj_ids')) for exact splitting",
            UserWarning,
            stacklevel=3,
        )
        ends = flags.cpu().clone()
    ends[-1] = True
    stops = torch.nonzero(ends).squeeze(-1) + 1
    starts = torch.cat([stops.new_zeros(1), stops[:-1]])
    return torch.stack([starts, stops], -1)


def iter_trajectories(
    data: TensorDictBase, trajectory_key: NestedKey | None = None
) -> Iterator[Trajectory]:
    """Yields the trajectories of a flat batch of transitions, in storage order.

    Trajectories are told apart by ``trajectory_key``, else by the first of
    ``("collector", "traj_ids")``, ``"traj_ids"``, ``"episode"`` present, else by the done /
    terminated / truncated flags under ``"next"`` (a ``UserWarning`` says that a trajectory
    without a final done flag then merges with the next one). Each trajectory's transitions must be
    stored contiguously and in order, as round-robin writers and collectors leave them.

    Args:
        data: transitions of batch size ``[N]``.
        trajectory_key: entry of per-transition trajectory ids (auto-detected when ``None``).

    Yields:
        :class:`Trajectory` views over slices of ``data``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> data = TensorDict(traj_ids=torch.tensor([0, 0, 1, 1, 1]), batch_size=[5])
        >>> [t.length for t in iter_trajectories(data)]
        [2, 3]
    """
    bounds = trajectory_bounds(data, trajectory_key)
    for start, stop in bounds.tolist():
        yield Trajectory(data[start:stop])


def filter_trajectories(
    data: TensorDictBase,
    predicate: Callable[[Trajectory], Any] | None = None,
    *,
    trajectory_key: NestedKey | None = None,
) -> list[Trajectory]:
    """Splits a flat batch of transitions into trajectories and keeps those ``predicate`` accepts.

    Args:
        data: transitions of batch size ``[N]`` (see :func:`iter_trajectories`).
        predicate: a :class:`TrajectoryPredicate` (built from :data:`traj`) or any callable
            ``Trajectory -> bool``; ``None`` keeps every trajectory.

    Keyword Args:
        trajectory_key: entry of per-transition trajectory ids (auto-detected when ``None``).

    Returns:
        The matching :class:`Trajectory` views, in storage order.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> data = TensorDict(
        ...     traj_ids=torch.tensor([0, 0, 1, 1, 1]),
        ...     next=TensorDict(reward=torch.tensor([[1.0], [1.0], [5.0], [0.0], [0.0]]), batch_size=[5]),
        ...     batch_size=[5],
        ... )
        >>> [t.length for t in filter_trajectories(data, traj.reward.sum() > 3)]
        [3]
    """
    if predicate is not None and not callable(predicate):
        raise TypeError(
            f"predicate must be a TrajectoryPredicate or a callable Trajectory -> bool, got "
            f"{type(predicate).__name__}"
        )
    test = None if predicate is None else _as_predicate(predicate)
    return [t for t in iter_trajectories(data, trajectory_key) if test is None or test(t)]


def find_start_stop_traj(
    *,
    trajectory: torch.Tensor | None = None,
    end: torch.Tensor | None = None,
    at_capacity: bool,
    cursor: int | torch.Tensor | range | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """First and last step of every trajectory in a storage, from trajectory ids or end flags.

    Works on raw tensors in storage order (time along dim 0, ``[T, *B]``), including ring
    buffers: each of the ``prod(B)`` columns is a separate sequence of steps. Unlike
    :func:`trajectory_bounds` (flat TensorDicts, exclusive stops, no wrap), it knows two things
    about replay-buffer storages:

    - ``at_capacity=True``: the storage is a full ring, so a trajectory whose last row carries no
      end continues at row 0 (it spans the wrap point); with ``False`` the last row always ends
      a trajectory;
    - ``cursor``: the row(s) the writer wrote last; the last of them ends its trajectory, since
      the row after it holds older data.

    Keyword Args:
        trajectory: ``[T, *B]`` trajectory ids; a trajectory ends where the id changes between
            consecutive rows. Exclusive with ``end``.
        end: ``[T, *B]`` bool flags, ``True`` on the last step of a trajectory. Exclusive with
            ``trajectory``.
        at_capacity: whether the storage is full and behaves as a ring buffer (see above).
        cursor: the row index, range or tensor of row indices (along dim 0) written last.
        device: where the results go (the input's device by default).

    Returns:
        ``(start, stop, lengths)``: ``start`` and ``stop`` are long tensors ``[K, 1 + len(B)]``
        of coordinates (time first, then the batch coordinates) of the first and the last
        (inclusive) step of the ``K`` trajectories; ``lengths`` ``[K]`` counts their steps
        (``stop < start`` in time for a trajectory that wraps). Trajectories are ordered by
        column, then by the row of their last step. A column without any end (a full ring
        with no end flag) is one trajectory of ``T`` steps starting at row 0.

    Raises:
        ValueError: neither or both of ``trajectory`` and ``end``, ``end`` not boolean, a 0-dim
            input or a ``cursor`` out of range.

    Examples:
        >>> end = torch.tensor([False, False, True, False, True, False])
        >>> start, stop, lengths = find_start_stop_traj(end=end, at_capacity=False)
        >>> start[:, 0].tolist(), stop[:, 0].tolist(), lengths.tolist()
        ([0, 3, 5], [2, 4, 5], [3, 2, 1])
        >>> start, stop, lengths = find_start_stop_traj(end=end, at_capacity=True)
        >>> start[:, 0].tolist(), stop[:, 0].tolist(), lengths.tolist()
        ([5, 3], [2, 4], [4, 2])
    """
    if (trajectory is None) == (end is None):
        raise ValueError("find_start_stop_traj: pass exactly one of trajectory= and end=")
    name = "trajectory" if trajectory is not None else "end"
    src = trajectory if trajectory is not None else end
    if not isinstance(src, torch.Tensor):
        raise TypeError(f"find_start_stop_traj: {name} must be a tensor, got {type(src).__name__}")
    if src.ndim == 0:
        raise ValueError(
            f"find_start_stop_traj: {name} must have a time dim ([T, *B]), got a scalar"
        )
    if end is not None and end.dtype != torch.bool:
        raise ValueError(
            f"find_start_stop_traj: end must be a bool tensor of end flags, got dtype {end.dtype}"
            " (pass trajectory ids as trajectory=)"
        )
    out_device = torch.device(device) if device is not None else src.device
    n_steps, batch = src.shape[0], src.shape[1:]
    ndim = src.ndim
    if n_steps == 0 or batch.numel() == 0:
        empty = torch.zeros(0, ndim, dtype=torch.long, device=out_device)
        return empty, empty.clone(), torch.zeros(0, dtype=torch.long, device=out_device)
    flat = src.reshape(n_steps, -1)
    if trajectory is not None:
        ends = torch.zeros(flat.shape, dtype=torch.bool, device=flat.device)
        ends[:-1] = flat[1:] != flat[:-1]
        ends[-1] = (flat[-1] != flat[0]) if at_capacity else True
    else:
        ends = flat.clone()
        if not at_capacity:
            ends[-1] = True
    if cursor is not None:
        ends[_last_written_row(cursor, n_steps)] = True

    # nonzero on [columns, time] lists the ends column by column, in time order.
    col, stop = torch.nonzero(ends.T, as_tuple=True)
    start = torch.zeros_like(stop)
    if stop.numel():
        start[1:] = stop[:-1] + 1
        first = torch.ones_like(stop, dtype=torch.bool)
        first[1:] = col[1:] != col[:-1]
        last = torch.ones_like(stop, dtype=torch.bool)
        last[:-1] = col[1:] != col[:-1]
        start[first] = 0
        if at_capacity:
            # In a full ring the rows after a column's last end belong to its first trajectory.
            first_idx, last_idx = first.nonzero().squeeze(-1), last.nonzero().squeeze(-1)
            wraps = ~ends[-1][col[first_idx]]
            start[first_idx[wraps]] = stop[last_idx[wraps]] + 1
    no_end = (~ends.any(0)).nonzero().squeeze(-1)
    if no_end.numel():
        col = torch.cat([col, no_end])
        start = torch.cat([start, torch.zeros_like(no_end)])
        stop = torch.cat([stop, torch.full_like(no_end, n_steps - 1)])
        order = torch.argsort(col * n_steps + stop, stable=True)
        col, start, stop = col[order], start[order], stop[order]
    lengths = torch.where(start <= stop, stop - start + 1, n_steps - start + stop + 1)
    if ndim > 1:
        coords = torch.unravel_index(col, tuple(batch))
        start_idx = torch.stack([start, *coords], -1)
        stop_idx = torch.stack([stop, *coords], -1)
    else:
        start_idx, stop_idx = start.unsqueeze(-1), stop.unsqueeze(-1)
    return start_idx.to(out_device), stop_idx.to(out_device), lengths.to(out_device)


def _last_written_row(cursor: int | torch.Tensor | range, n_steps: int) -> int:
    """The last row of ``cursor`` (an int, a range or a tensor of rows), checked and made >= 0."""
    if isinstance(cursor, range):
        if len(cursor) == 0:
            raise ValueError("find_start_stop_traj: cursor is an empty range")
        row = cursor[-1]
    elif isinstance(cursor, torch.Tensor):
        if cursor.numel() == 0:
            raise ValueError("find_start_stop_traj: cursor is an empty tensor")
        row = int(cursor.reshape(-1)[-1])
    elif isinstance(cursor, int) and not isinstance(cursor, bool):
        row = cursor
    else:
        raise TypeError(
            f"find_start_stop_traj: cursor must be an int, a range or a tensor, got "
            f"{type(cursor).__name__}"
        )
    if not -n_steps <= row < n_steps:
        raise ValueError(
            f"find_start_stop_traj: cursor row {row} is out of range for {n_steps} rows"
        )
    return row % n_steps
