"""Trajectory views: a module declares which past (or future) steps of an entry it reads.

A *view* is an entry a module needs that is not stored as such but derived from the per-step
data of a trajectory by a time shift: "the observation at t-3..t", "the previous action", "the
recurrent state produced at t-1". A module states what it needs with plain
:class:`TrajectoryView` objects in a ``views`` attribute; the components read that list:

- a collector builds each view from a small per-env ring buffer while it steps the env, and leaves
  the view entries out of the collected batch (every column is stored once);
- a replay buffer rebuilds the views of a sampled batch from the stored single-step data
  (:class:`ViewBuilder`);
- :func:`build_views` does the same on a contiguous trajectory ``[*B, T]`` (e.g. a collected batch
  before a loss).

Semantics. For a view of ``key`` with shift ``k``, the value at step ``t`` is ``key`` at step
``t + k`` *of the same episode*. A shift that falls before the episode's first step gives zeros
(``padding="zeros"``) or a copy of the episode's first step (``padding="first"``); one that falls
after the episode's last step gives zeros or a copy of the last step. A view never reads into
another episode. An int shift gives one step, with no extra dim; a list of ints, a ``range``
or an inclusive range string ``"-3:0"`` stacks the shifted values on a new dim right after the
batch dims, in the order given: ``[*B, n_shifts, *feature]``.

Worked example: one env, an episode ends after step 1 (``("next", "done")`` is set there) and a
new one starts at step 2; the view ``TrajectoryView("obs", "-1:0")`` reads

=====  =====  ============  =========================
step   obs    episode       ``obs_view`` (zeros pad)
=====  =====  ============  =========================
0      1      A (start)     ``[0, 1]``
1      2      A             ``[1, 2]``
2      3      B (start)     ``[0, 3]``
3      4      B             ``[3, 4]``
=====  =====  ============  =========================

>>> import torch
>>> from tensordict import TensorDict
>>> td = TensorDict({"obs": torch.tensor([1.0, 2.0, 3.0, 4.0]),
...     ("next", "done"): torch.tensor([[False], [True], [False], [False]])}, [4])
>>> build_views(td, [TrajectoryView("obs", "-1:0")])["obs_view"]
tensor([[0., 1.],
        [1., 2.],
        [0., 3.],
        [3., 4.]])

A recurrent state is stored once, as the module's output ``("next", "h")``; its input at ``t`` is
the view ``TrajectoryView(("next", "h"), shift=-1, out_key="h")`` (zeros at an episode start).
``prev_action()`` and ``prev_reward()`` are the two views most policies ask for.

Episode starts. :func:`build_views` reads them from ``"is_init"``, else from the previous step's
``("next", "done")``; a replay buffer also separates trajectories wherever
``("collector", "traj_ids")`` changes. The first step of a window (and the oldest item of a
buffer) starts an episode: nothing before it can be read.

In a replay buffer, the same views come back at sampling time from the stored single-step data:
``TensorDictReplayBuffer(storage=..., views=[...])`` rebuilds them on every sample through a
:class:`ViewBuilder` (see :class:`~torchrl.data.TensorDictReplayBuffer` for an example). With a
:class:`~torchrl.data.SliceSampler`, the state view of a sequence's first step is the stored
``("next", "h")`` of the step before it, or zeros when the sequence starts an episode.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from tensordict import TensorDictBase

from torchrl._keys import ACTION, COLLECTOR, DONE, IS_INIT, NEXT, REWARD, TRAJ_IDS
from torchrl._types import NestedKey
from torchrl.data.specs import Bounded, Composite

__all__ = [
    "TrajectoryView",
    "ViewBuilder",
    "build_views",
    "episode_bounds",
    "gather_steps",
    "get_views",
    "prev_action",
    "prev_reward",
    "shift_index",
    "take_rows",
    "view_spec",
]

Padding = Literal["zeros", "first"]
_PADDINGS = ("zeros", "first")
_RANGE = re.compile(r"^\s*([+-]?\d+)\s*:\s*([+-]?\d+)\s*$")


def _key_str(key: NestedKey) -> str:
    return repr(key) if isinstance(key, str) else repr(tuple(key))


def _normalize_key(key: Any, name: str) -> NestedKey:
    if isinstance(key, str):
        if not key:
            raise ValueError(f"{name} must be a non-empty string or tuple of strings, got ''")
        return key
    if isinstance(key, (tuple, list)) and key and all(isinstance(k, str) and k for k in key):
        return key[0] if len(key) == 1 else tuple(key)
    raise TypeError(f"{name} must be a string or a tuple of strings (a nested key), got {key!r}")


def _parse_shift(shift: Any) -> tuple[tuple[int, ...], bool]:
    """``(shifts, stacked)`` from an int, a sequence of ints, a ``range`` or ``"a:b"``."""
    if isinstance(shift, bool):
        raise TypeError(f"shift must be an int, a list of ints or a range string, got {shift!r}")
    if isinstance(shift, int):
        return (shift,), False
    if isinstance(shift, str):
        match = _RANGE.match(shift)
        if match is None:
            raise ValueError(
                f"shift: a string must be an inclusive range 'start:stop' of ints such as "
                f"'-3:0', got {shift!r}"
            )
        start, stop = int(match.group(1)), int(match.group(2))
        if start > stop:
            raise ValueError(
                f"shift: the range {shift!r} is empty (start {start} > stop {stop}); write "
                f"'{stop}:{start}' or a list for a reversed order"
            )
        return tuple(range(start, stop + 1)), True
    if isinstance(shift, (Sequence, range)):
        values = tuple(shift)
        if not values:
            raise ValueError("shift: a list of shifts must not be empty")
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int)]
        if bad:
            raise TypeError(f"shift: a list of shifts must hold ints, got {bad[0]!r} in {shift!r}")
        return values, True
    raise TypeError(
        f"shift must be an int, a list of ints or a range string such as '-3:0', "
        f"got {type(shift).__name__} {shift!r}"
    )


@dataclass(frozen=True)
class TrajectoryView:
    """A time-shifted view of a per-step entry that a module reads.

    A shift ``k`` reads the entry at step ``t + k`` of the same episode (negative: the past). A
    positive shift reads the future: the declaration is valid and :func:`build_views` and the
    replay buffer build it, but a collector cannot (step ``t + k`` does not exist when the policy
    runs at ``t``) and rejects such a view when it is built; declare future shifts on the views
    a loss reads, not on the policy's.

    Args:
        key: the per-step source entry, e.g. ``"observation"``, ``("next", "reward")``.
        shift: an int (one step, no extra dim), a list of ints or a ``range``, or an inclusive
            range string such as ``"-3:0"`` (stacked on a new dim after the batch dims).
        out_key: where the view is written; default: the key's names joined by ``"_"`` plus
            ``"_view"`` (``("next", "reward")`` -> ``"next_reward_view"``).
        padding: ``"zeros"`` or ``"first"``: what a shift outside the episode gives (zeros, or
            the episode's first step before it and its last step after it).
        used_for_training: ``False``: built at collection only, never rebuilt for losses.

    Examples:
        >>> v = TrajectoryView("observation", "-3:0")
        >>> v.out_key, v.shifts, v.stacked, v.lookback
        ('observation_view', (-3, -2, -1, 0), True, 3)
        >>> TrajectoryView(("next", "h"), shift=-1, out_key="h").stacked
        False
        >>> TrajectoryView("observation", "0:-3")
        Traceback (most recent call last):
        ...
        ValueError: shift: the range '0:-3' is empty (start 0 > stop -3); write '-3:0' or a list for a reversed order
    """

    key: NestedKey
    shift: int | Sequence[int] | str = 0
    out_key: NestedKey | None = None
    padding: Padding = "zeros"
    used_for_training: bool = True
    _shifts: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _stacked: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = _normalize_key(self.key, "key")
        shifts, stacked = _parse_shift(self.shift)
        shift: int | Sequence[int] | str = self.shift
        if isinstance(shift, (list, range)):
            shift = tuple(shift)  # a frozen dataclass must stay hashable
        if self.out_key is None:
            names = (key,) if isinstance(key, str) else key
            out_key: NestedKey = "_".join(names) + "_view"
        else:
            out_key = _normalize_key(self.out_key, "out_key")
        if self.padding not in _PADDINGS:
            raise ValueError(f"padding must be one of {_PADDINGS}, got {self.padding!r}")
        if not isinstance(self.used_for_training, bool):
            raise TypeError(
                f"used_for_training must be a bool, got {type(self.used_for_training).__name__}"
            )
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "shift", shift)
        object.__setattr__(self, "out_key", out_key)
        object.__setattr__(self, "_shifts", shifts)
        object.__setattr__(self, "_stacked", stacked)

    @property
    def shifts(self) -> tuple[int, ...]:
        """The shifts, in the order the values are stacked."""
        return self._shifts

    @property
    def stacked(self) -> bool:
        """Whether the view has a shift dim (the shift was a list, a range or a range string)."""
        return self._stacked

    @property
    def lookback(self) -> int:
        """How many past steps the view reads: ``max(0, -min(shifts))``."""
        return max(0, -min(self._shifts))

    @property
    def lookahead(self) -> int:
        """How many future steps the view reads: ``max(0, max(shifts))``."""
        return max(0, max(self._shifts))

    @property
    def target_key(self) -> NestedKey:
        """The out_key (never ``None`` once built; typed for mypy)."""
        assert self.out_key is not None
        return self.out_key

    def same_declaration(self, other: TrajectoryView) -> bool:
        """Whether ``other`` asks for the same data (``used_for_training`` aside).

        Examples:
            >>> TrajectoryView("obs", [-1, 0]).same_declaration(TrajectoryView("obs", "-1:0"))
            True
        """
        return (
            self.key == other.key
            and self.out_key == other.out_key
            and self.shifts == other.shifts
            and self.stacked == other.stacked
            and self.padding == other.padding
        )


def prev_action(key: NestedKey = ACTION) -> TrajectoryView:
    """The previous action (zeros at an episode start), written to ``"prev_action"``.

    Args:
        key: the action entry.

    Examples:
        >>> prev_action()
        TrajectoryView(key='action', shift=-1, out_key='prev_action', padding='zeros', used_for_training=True)
    """
    return TrajectoryView(key, -1, out_key="prev_action")


def prev_reward(key: NestedKey = (NEXT, REWARD)) -> TrajectoryView:
    """The reward received at the previous step (zeros at an episode start): ``"prev_reward"``.

    Args:
        key: the reward entry of a step (``("next", "reward")``).

    Examples:
        >>> prev_reward().key
        ('next', 'reward')
    """
    return TrajectoryView(key, -1, out_key="prev_reward")


def get_views(module: Any) -> list[TrajectoryView]:
    """Every view declared by ``module`` and its submodules (their ``views`` attributes).

    Identical declarations of one out_key are merged (kept once, used for training if any of
    them is); two different declarations of one out_key raise.

    Args:
        module: an ``nn.Module`` (walked with ``modules()``) or any object with a ``views``
            attribute.

    Returns:
        The views, in the order they were first met.

    Raises:
        TypeError: a ``views`` attribute holds something other than TrajectoryView objects.
        ValueError: two modules declare one out_key differently.

    Examples:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
        >>> net[0].views = [prev_action()]
        >>> net[1].views = [prev_action(), TrajectoryView("observation", "-3:0")]
        >>> [v.out_key for v in get_views(net)]
        ['prev_action', 'observation_view']
    """
    owners: Iterable[Any]
    if isinstance(module, torch.nn.Module):
        owners = module.modules()
    else:
        owners = [module]
    found: dict[NestedKey, TrajectoryView] = {}
    for owner in owners:
        views = getattr(owner, "views", None)
        if views is None:
            continue
        if isinstance(views, TrajectoryView):
            views = [views]
        if not isinstance(views, (list, tuple)):
            raise TypeError(
                f"{type(owner).__name__}.views must be a list of TrajectoryView, "
                f"got {type(views).__name__}"
            )
        for view in views:
            if not isinstance(view, TrajectoryView):
                raise TypeError(
                    f"{type(owner).__name__}.views must hold TrajectoryView objects, "
                    f"got {type(view).__name__} {view!r}"
                )
            _merge_into(found, view, type(owner).__name__)
    return list(found.values())


def _merge_into(found: dict[NestedKey, TrajectoryView], view: TrajectoryView, where: str) -> None:
    """Adds ``view`` to ``found`` (by out_key): same declarations merge, different ones raise."""
    seen = found.get(view.target_key)
    if seen is None:
        found[view.target_key] = view
    elif not seen.same_declaration(view):
        raise ValueError(
            f"out_key {_key_str(view.target_key)} is declared twice differently: "
            f"{seen!r} and {view!r} (in {where})"
        )
    elif view.used_for_training and not seen.used_for_training:
        found[view.target_key] = view


def _check_views(views: Any) -> list[TrajectoryView]:
    if isinstance(views, TrajectoryView):
        return [views]
    if not isinstance(views, (list, tuple)):
        raise TypeError(f"views must be a list of TrajectoryView, got {type(views).__name__}")
    for view in views:
        if not isinstance(view, TrajectoryView):
            raise TypeError(f"views must hold TrajectoryView objects, got {view!r}")
    return list(views)


def episode_bounds(episode_start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """First and last step of the episode each step belongs to, within a window ``[*B, T]``.

    A step before the window's first episode start gets first step 0 (the window's first step);
    the last episode of the window ends at ``T - 1``.

    Args:
        episode_start: bool ``[*B, T]``, True where an episode starts.

    Returns:
        ``(first, last)``: two long tensors ``[*B, T]``.

    Examples:
        >>> first, last = episode_bounds(torch.tensor([True, False, True, False, False]))
        >>> first.tolist(), last.tolist()
        ([0, 0, 2, 2, 2], [1, 1, 4, 4, 4])
    """
    if episode_start.dtype != torch.bool or episode_start.ndim < 1:
        raise ValueError(
            f"episode_start must be a bool tensor [*B, T], got {episode_start.dtype} "
            f"of shape {tuple(episode_start.shape)}"
        )
    T = episode_start.shape[-1]
    steps = torch.arange(T, device=episode_start.device).expand_as(episode_start)
    first = torch.where(episode_start, steps, torch.zeros_like(steps)).cummax(-1).values
    # the step before the next start, scanning from the end
    nxt = torch.where(episode_start, steps - 1, torch.full_like(steps, T - 1))
    nxt = torch.cat([nxt[..., 1:], torch.full_like(nxt[..., :1], T - 1)], -1)
    last = nxt.flip(-1).cummin(-1).values.flip(-1)
    return first, last


def shift_index(
    first: torch.Tensor, last: torch.Tensor, shifts: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each shifted step reads, and whether it lies inside the episode.

    Args:
        first: long ``[*B, T]``, the first step of each step's episode (see :func:`episode_bounds`).
        last: long ``[*B, T]``, the last step of each step's episode.
        shifts: the shifts, ``n`` of them.

    Returns:
        ``(index, valid)``: a long index ``[*B, T, n]`` into the time dim, clamped into the
        episode (what ``padding="first"`` reads), and a bool mask of the same shape, False where
        the shifted step falls outside the episode (what ``padding="zeros"`` zeroes).

    Examples:
        >>> first, last = episode_bounds(torch.tensor([True, False, True]))
        >>> index, valid = shift_index(first, last, [-1, 0])
        >>> index.tolist(), valid.tolist()
        ([[0, 0], [0, 1], [2, 2]], [[False, True], [True, True], [False, True]])
    """
    T = first.shape[-1]
    steps = torch.arange(T, device=first.device)
    offsets = torch.as_tensor(list(shifts), dtype=torch.long, device=first.device)
    target = steps.unsqueeze(-1) + offsets  # [T, n]
    lo, hi = first.unsqueeze(-1), last.unsqueeze(-1)
    valid = (target >= lo) & (target <= hi)
    index = torch.minimum(torch.maximum(target.expand(valid.shape), lo), hi)
    return index, valid


def _episode_start_of(td: TensorDictBase, episode_start: torch.Tensor | None) -> torch.Tensor:
    shape = td.batch_size
    if episode_start is not None:
        if episode_start.shape != shape:
            raise ValueError(
                f"episode_start must have the batch shape {tuple(shape)} of the trajectory, "
                f"got {tuple(episode_start.shape)}"
            )
        return episode_start.to(torch.bool)
    is_init = td.get(IS_INIT, None)
    if is_init is not None:
        start = is_init.reshape(*shape, -1).any(-1)
    else:
        done = td.get((NEXT, DONE), None)
        if done is None:
            raise KeyError(
                f"build_views needs the episode starts: the trajectory has neither {IS_INIT!r} "
                f"nor ('next', 'done'); pass episode_start=[*B, T] mask"
            )
        done = done.reshape(*shape, -1).any(-1)
        start = torch.zeros_like(done)
        start[..., 1:] = done[..., :-1]
    start = start.clone()
    start[..., 0] = True
    return start


def take_rows(value: Any, rows: torch.Tensor, zero: torch.Tensor | None = None) -> Any:
    """Rows ``rows`` of ``value`` (``[R, *F]``), with the rows flagged in ``zero`` set to zeros.

    Args:
        value: a tensor or a TensorDict of batch ``[R]`` (or ``[R, ...]``).
        rows: long ``[K]``, the rows to read.
        zero: optional bool ``[K]``: these reads give zeros (padding).

    Returns:
        ``[K, *F]``, of the type of ``value``.

    Examples:
        >>> take_rows(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2, 0, 1]),
        ...     torch.tensor([False, True, False]))
        tensor([3., 0., 2.])
    """
    if isinstance(value, TensorDictBase):
        return value.apply(lambda x: take_rows(x, rows, zero), batch_size=[rows.shape[0]])
    out = value.index_select(0, rows.to(value.device))
    if zero is not None:
        bad = zero.nonzero().squeeze(-1)
        if bad.numel():
            # a few padded rows: zero them in place instead of a masked copy of the whole batch
            out.index_fill_(0, bad.to(out.device), 0)
    return out


def gather_steps(
    value: Any,
    batch_dims: int,
    index: torch.Tensor,
    valid: torch.Tensor,
    padding: Padding,
    stacked: bool,
) -> Any:
    """Reads ``value`` (``[*B, T, *F]``) at time positions ``index`` (``[*B, M, n]``).

    Args:
        value: a tensor or a TensorDict whose first ``batch_dims`` dims are ``[*B, T]``.
        batch_dims: ``len([*B, T])``.
        index: long ``[*B, M, n]``, time positions to read (inside ``[0, T)``); ``M`` is usually
            ``T`` (one read set per step).
        valid: bool ``[*B, M, n]``; with ``padding="zeros"`` the invalid reads are zeroed.
        padding: ``"zeros"`` or ``"first"``.
        stacked: keep the shift dim (``[*B, M, n, *F]``); else ``n`` must be 1 and it is dropped
            (``[*B, M, *F]``).

    Returns:
        The gathered values, of the type of ``value``.

    Examples:
        >>> x = torch.tensor([[1.0, 2.0, 3.0]])
        >>> index = torch.tensor([[[0, 0], [0, 1], [1, 2]]])
        >>> valid = torch.tensor([[[False, True], [True, True], [True, True]]])
        >>> gather_steps(x, 2, index, valid, "zeros", stacked=True)
        tensor([[[0., 1.],
                 [1., 2.],
                 [2., 3.]]])
    """
    is_td = isinstance(value, TensorDictBase)
    shape = value.batch_size if is_td else value.shape
    lead, feat = shape[:batch_dims], shape[batch_dims:]
    T = lead[-1]
    R = lead[:-1].numel()
    M, n = index.shape[-2], index.shape[-1]
    offsets = torch.arange(R, device=index.device).unsqueeze(-1) * T
    rows = (offsets + index.reshape(R, M * n)).reshape(-1)
    zero = ~valid.reshape(-1) if padding == "zeros" else None
    out = take_rows(value.reshape(R * T, *feat), rows, zero)
    out = out.reshape(*lead[:-1], M, n, *feat)
    return out if stacked else out.squeeze(batch_dims)


def build_views(
    td: TensorDictBase,
    views: Sequence[TrajectoryView] | TrajectoryView,
    *,
    episode_start: torch.Tensor | None = None,
) -> TensorDictBase:
    """Writes every view's out_key into a contiguous trajectory ``[*B, T]`` (time last).

    Episode starts come from ``episode_start`` when given, else from ``"is_init"`` when present,
    else from the previous step's ``("next", "done")``; the window's first step starts an episode
    unless ``episode_start`` says otherwise (a read before the window is padded all the same).
    Every view is computed from the entries as they are before any view is written.

    Args:
        td: a TensorDict ``[*B, T]`` holding every view's key.
        views: the views to build (e.g. ``get_views(policy)``).
        episode_start: optional bool ``[*B, T]``, True where an episode starts.

    Returns:
        ``td``, with the views written in place.

    Raises:
        KeyError: a view's key is missing from ``td`` (the error names it).

    Examples:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"action": torch.arange(1.0, 5.0).unsqueeze(-1)}, [4])
        >>> start = torch.tensor([True, False, False, True])
        >>> build_views(td, [prev_action()], episode_start=start)["prev_action"].squeeze(-1)
        tensor([0., 1., 2., 0.])
        >>> td = TensorDict({"obs": torch.arange(1.0, 5.0)}, [4])
        >>> view = TrajectoryView("obs", [-2, 1], padding="first")
        >>> build_views(td, view, episode_start=start)["obs_view"].tolist()
        [[1.0, 2.0], [1.0, 3.0], [1.0, 3.0], [4.0, 4.0]]
    """
    views = _check_views(views)
    if td.batch_dims < 1:
        raise ValueError("build_views needs a trajectory TensorDict with a time dim [*B, T]")
    if not views:
        return td
    values = {}
    for view in views:
        value = td.get(view.key, None)
        if value is None:
            raise KeyError(
                f"view {_key_str(view.target_key)} reads the key {_key_str(view.key)}, which the "
                f"trajectory lacks (keys: {', '.join(_key_str(k) for k in td.keys(True, True))})"
            )
        values[view.target_key] = value
    start = _episode_start_of(td, episode_start).to(td.device or torch.device("cpu"))
    first, last = episode_bounds(start)
    out = {}
    for view in views:
        index, valid = shift_index(first, last, view.shifts)
        out[view.target_key] = gather_steps(
            values[view.target_key], td.batch_dims, index, valid, view.padding, view.stacked
        )
    for key, value in out.items():
        td.set(key, value)
    return td


def view_spec(view: TrajectoryView, source_spec: Any, *, batch_dims: int | None = None) -> Any:
    """The spec of a view's out_key: the source spec, with the shift dim when stacked.

    The shift dim goes right after the batch dims: ``[*B, *F]`` becomes ``[*B, n, *F]``. With
    ``padding="zeros"``, a :class:`~torchrl.data.Bounded` range that excludes zero is widened to
    include it (the padded reads are zeros).

    Args:
        view: the view.
        source_spec: the spec of ``view.key``, or a :class:`~torchrl.data.Composite` holding it
            (e.g. an env's ``full_observation_spec``, or a Composite of observation, action and
            ``"next"`` entries).
        batch_dims: how many leading dims of the source spec are batch dims; the Composite's
            ``len(shape)`` when ``source_spec`` is one, else 0.

    Returns:
        The spec of ``view.out_key``.

    Raises:
        KeyError: ``source_spec`` is a Composite without ``view.key`` (the error names it).

    Examples:
        >>> from torchrl.data import Composite, Unbounded
        >>> spec = Composite(observation=Unbounded(shape=(8, 3)), shape=(8,))
        >>> view_spec(TrajectoryView("observation", "-3:0"), spec).shape
        torch.Size([8, 4, 3])
        >>> view_spec(prev_action(), spec)
        Traceback (most recent call last):
        ...
        KeyError: "view 'prev_action' reads 'action', which the spec does not provide (it has: 'observation')"
    """
    if isinstance(source_spec, Composite):
        if batch_dims is None:
            batch_dims = len(source_spec.shape)
        keys = list(source_spec.keys(True))  # nested Composites count: a view may read one
        if view.key not in keys:
            raise KeyError(
                f"view {_key_str(view.target_key)} reads {_key_str(view.key)}, which the spec "
                f"does not provide (it has: {', '.join(_key_str(k) for k in keys)})"
            )
        spec = source_spec[view.key]
    else:
        spec = source_spec
        batch_dims = 0 if batch_dims is None else batch_dims
    if view.padding == "zeros" and isinstance(spec, Bounded):
        low, high = spec.space.low, spec.space.high
        if bool((low > 0).any()) or bool((high < 0).any()):
            spec = Bounded(
                low=low.clamp(max=0),
                high=high.clamp(min=0),
                shape=spec.shape,
                dtype=spec.dtype,
                device=spec.device,
            )
    if not view.stacked:
        return spec.clone()
    n = len(view.shifts)
    shape = spec.shape
    if not 0 <= batch_dims <= len(shape):
        raise ValueError(f"batch_dims={batch_dims} does not fit a spec of shape {tuple(shape)}")
    return spec.unsqueeze(batch_dims).expand(*shape[:batch_dims], n, *shape[batch_dims:])


class ViewBuilder:
    """Rebuilds the training views of sampled items from the single-step data of a storage.

    The buffer calls it with the storage and the sampled index (a ``TensorDictReplayBuffer``
    built with ``views=[...]`` does, under its lock, before the sampler's post-processing). For
    each sampled item it reads the neighbours the views need along the storage's write (time)
    dim, in the same row for ``ndim > 1`` storages ``[*lead, T]``, following the ring: the slot
    before the oldest item is the newest one, which is not its past, and slots never written
    are no one's past. Episodes are separated wherever the trajectory id ``traj_key`` changes,
    ``is_init_key`` is set or the previous step's ``done_key`` is set (each when stored). Reads
    outside the item's episode are padded as the view says, exactly as :func:`build_views` pads
    them on the contiguous trajectory. Views with ``used_for_training=False`` are skipped.
    Neighbours in the ring are neighbours in time only for a round-robin writer (the default);
    a buffer that fills freed slots out of order (a ``ConsumingSampler``) needs the trajectory
    ids stored, so that a slot holding another trajectory is not read as the past.

    Args:
        views: the views (e.g. ``get_views(policy)``).
        traj_key: the stored trajectory id (``("collector", "traj_ids")``).
        is_init_key: the stored episode-start flag.
        done_key: the stored end flag of a step (``("next", "done")``).

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage
        >>> storage = LazyTensorStorage(6)
        >>> done = torch.tensor([False, False, True, False, False, False]).unsqueeze(-1)
        >>> storage.set(torch.arange(6), TensorDict({"obs": torch.arange(1.0, 7.0),
        ...     ("next", "done"): done}, [6]))
        >>> builder = ViewBuilder([TrajectoryView("obs", "-2:0")])
        >>> index = torch.tensor([1, 3, 5])
        >>> builder(storage.get(index), storage, index, cursor=0)["obs_view"]
        tensor([[0., 1., 2.],
                [0., 0., 4.],
                [4., 5., 6.]])
    """

    def __init__(
        self,
        views: Sequence[TrajectoryView] | TrajectoryView,
        *,
        traj_key: NestedKey = (COLLECTOR, TRAJ_IDS),
        is_init_key: NestedKey = IS_INIT,
        done_key: NestedKey = (NEXT, DONE),
    ) -> None:
        merged: dict[NestedKey, TrajectoryView] = {}
        for view in _check_views(views):
            _merge_into(merged, view, "views")
        self.views = [v for v in merged.values() if v.used_for_training]
        self.traj_key = _normalize_key(traj_key, "traj_key")
        self.is_init_key = _normalize_key(is_init_key, "is_init_key")
        self.done_key = _normalize_key(done_key, "done_key")
        self.lookback = max((v.lookback for v in self.views), default=0)
        self.lookahead = max((v.lookahead for v in self.views), default=0)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(views={self.views!r})"

    def neighbours(
        self, slot: torch.Tensor, *, slots: int, filled: int, cursor: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The window of slots around each item, and which of them hold its written past/future.

        Args:
            slot: long ``[N]``, the items' positions along the write dim.
            slots: the ring's length.
            filled: how many slots were ever written.
            cursor: the slot the next write goes to (after the newest item).

        Returns:
            ``(window, in_ring)``: long ``[N, W]`` slots (``W = lookback + 1 + lookahead``; slots
            outside the ring are replaced by the item's own) and bool ``[N, W]``.
        """
        offsets = torch.arange(-self.lookback, self.lookahead + 1)
        # age order: 0 = oldest slot of the ring (slots never written count as older still)
        order = (slot - cursor) % slots
        target = order.unsqueeze(-1) + offsets
        in_ring = (target >= slots - filled) & (target <= slots - 1)
        window = (slot.unsqueeze(-1) + offsets) % slots
        return torch.where(in_ring, window, slot.unsqueeze(-1)), in_ring

    def __call__(
        self,
        data: TensorDictBase,
        storage: Any,
        index: Any,
        *,
        cursor: int,
        column: Callable[[NestedKey], Any] | None = None,
    ) -> TensorDictBase:
        """Writes every training view into ``data``, the items stored at ``index``.

        Args:
            data: the sampled items (batch shape of the index), written in place.
            storage: the storage they come from: ``shape`` (``[*lead, filled]``), ``slots``,
                ``ndim`` and, without ``column``, ``get`` are read.
            index: the sampled index: a tensor ``[N]`` (``ndim == 1``) or a tuple of ``ndim``
                tensors.
            cursor: the slot the storage's next write goes to (``0`` for a storage that has
                not wrapped and is full, ``filled`` while it fills).
            column: optional ``column(key)`` returning a key's stored values for every slot
                (``[*lead, slots, *F]``; raising ``KeyError`` for a key not stored): the views
                then read only their keys, each step once, instead of whole items.

        Returns:
            ``data``.

        Raises:
            KeyError: the stored data lacks a view's key, or has no episode information at all.
        """
        if not self.views:
            return data
        shape = storage.shape
        lead, filled, slots, ndim = shape[:-1], int(shape[-1]), int(storage.slots), storage.ndim
        if ndim == 1:
            slot = torch.as_tensor(index).reshape(-1).long().cpu()
            row = torch.zeros_like(slot)
        else:
            parts = [torch.as_tensor(p).reshape(-1).long().cpu() for p in index]
            slot, row = parts[-1], torch.zeros_like(parts[-1])
            for part, size in zip(parts[:-1], lead):
                row = row * size + part
        window, in_ring = self.neighbours(slot, slots=slots, filled=filled, cursor=cursor)
        flat = row.unsqueeze(-1) * slots + window
        read: Callable[[NestedKey], Any]
        if column is not None:
            # positions are flat storage positions [*lead, slots] -> [lead * slots]
            pos = flat

            def read(key: NestedKey) -> Any:
                try:
                    value = column(key)
                except KeyError:
                    return None
                if isinstance(value, TensorDictBase):
                    return value.reshape(-1, *value.batch_size[ndim:])
                return value.reshape(-1, *value.shape[ndim:])

        else:
            # neighbours of sampled items overlap (slices): read each stored item once
            unique, pos = torch.unique(flat, return_inverse=True)
            stored = storage.get(self._unflatten(unique, lead, slots, ndim))
            if not isinstance(stored, TensorDictBase):
                raise TypeError("trajectory views need a storage of TensorDicts")

            def read(key: NestedKey) -> Any:
                return stored.get(key, None)

        sources = {}
        for view in self.views:
            value = read(view.key)
            if value is None:
                # the sampled items hold every stored key
                listed = ", ".join(sorted(_key_str(k) for k in data.keys(True, True)))
                raise KeyError(
                    f"view {_key_str(view.target_key)} reads the key {_key_str(view.key)}, which "
                    f"the stored data lacks (stored keys: {listed})"
                )
            sources[view.target_key] = value
        start = self._episode_start(read, pos, in_ring)
        first, last = episode_bounds(start)
        centre = self.lookback
        lo, hi = first[:, centre : centre + 1], last[:, centre : centre + 1]
        out: dict[NestedKey, Any] = {}
        for view in self.views:
            target = centre + torch.as_tensor(view.shifts, dtype=torch.long)
            valid = (target >= lo) & (target <= hi)
            idx = torch.minimum(torch.maximum(target.expand(valid.shape), lo), hi)
            # window position -> read position; no [N, W] copy of the stored items
            rows = pos.gather(1, idx).reshape(-1)
            zero = ~valid.reshape(-1) if view.padding == "zeros" else None
            built = take_rows(sources[view.target_key], rows, zero)
            stack = [len(view.shifts)] if view.stacked else []
            if isinstance(built, TensorDictBase):
                built = built.reshape(*data.batch_size, *stack, *built.batch_size[1:])
            else:
                built = built.reshape(*data.batch_size, *stack, *built.shape[1:])
            out[view.target_key] = built.to(data.device) if data.device is not None else built
        for key, value in out.items():
            data.set(key, value)
        return data

    @staticmethod
    def _unflatten(flat: torch.Tensor, lead: torch.Size, slots: int, ndim: int) -> Any:
        """Flat positions in ``[*lead, slots]`` -> the storage's index (tuple for ``ndim > 1``)."""
        if ndim == 1:
            return flat
        t = flat % slots
        rest = torch.div(flat, slots, rounding_mode="floor")
        parts = []
        for size in reversed(lead):
            parts.append(rest % size)
            rest = torch.div(rest, size, rounding_mode="floor")
        return (*reversed(parts), t)

    def _episode_start(
        self, read: Callable[[NestedKey], Any], pos: torch.Tensor, in_ring: torch.Tensor
    ) -> torch.Tensor:
        """Bool ``[N, W]``: where an episode (or the readable part of the ring) starts."""
        start = ~in_ring
        start[:, 1:] |= ~in_ring[:, :-1]
        start[:, 0] = True
        found = False
        n, w = in_ring.shape

        def window(key: NestedKey) -> torch.Tensor | None:
            value = read(key)
            if value is None:
                return None
            value = value.reshape(value.shape[0], -1)
            return value.index_select(0, pos.reshape(-1).to(value.device)).reshape(n, w, -1)

        ids = window(self.traj_key)
        if ids is not None:
            found = True
            ids = ids[..., 0].cpu()
            start[:, 1:] |= ids[:, 1:] != ids[:, :-1]
        is_init = window(self.is_init_key)
        if is_init is not None:
            found = True
            start |= is_init.bool().any(-1).cpu()
        done = window(self.done_key)
        if done is not None:
            found = True
            start[:, 1:] |= done[:, :-1].bool().any(-1).cpu()
        if not found and w > 1:
            raise KeyError(
                f"trajectory views cannot find episode boundaries: the stored data has none of "
                f"{_key_str(self.traj_key)}, {_key_str(self.is_init_key)}, "
                f"{_key_str(self.done_key)}"
            )
        return start
