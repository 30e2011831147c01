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
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from tensordict import TensorDictBase

from torchrl._keys import ACTION, DONE, IS_INIT, NEXT, REWARD
from torchrl._types import NestedKey

__all__ = [
    "TrajectoryView",
    "build_views",
    "episode_bounds",
    "gather_steps",
    "get_views",
    "prev_action",
    "prev_reward",
    "shift_index",
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
    positive shift reads the future: a collector cannot build it while it steps the env (the step
    does not exist yet), so such a view serves losses (declare it with
    ``used_for_training=True``); collectors that meet one at collection time raise.

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
    shift: int | tuple[int, ...] | str = 0
    out_key: NestedKey | None = None
    padding: Padding = "zeros"
    used_for_training: bool = True
    _shifts: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _stacked: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = _normalize_key(self.key, "key")
        shifts, stacked = _parse_shift(self.shift)
        shift: int | tuple[int, ...] | str = self.shift
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
            seen = found.get(view.target_key)
            if seen is None:
                found[view.target_key] = view
            elif not seen.same_declaration(view):
                raise ValueError(
                    f"out_key {_key_str(view.target_key)} is declared twice differently: "
                    f"{seen!r} and {view!r} (in {type(owner).__name__})"
                )
            elif view.used_for_training and not seen.used_for_training:
                found[view.target_key] = view
    return list(found.values())


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
    first: torch.Tensor, last: torch.Tensor, shifts: Sequence[int], padding: Padding
) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each shifted step reads, and whether it lies inside the episode.

    Args:
        first: long ``[*B, T]``, the first step of each step's episode (see :func:`episode_bounds`).
        last: long ``[*B, T]``, the last step of each step's episode.
        shifts: the shifts, ``n`` of them.
        padding: ``"zeros"`` or ``"first"`` (the index is clamped into the episode either way;
            the returned mask says which reads fall outside it).

    Returns:
        ``(index, valid)``: a long index ``[*B, T, n]`` into the time dim, and a bool mask of the
        same shape.

    Examples:
        >>> first, last = episode_bounds(torch.tensor([True, False, True]))
        >>> index, valid = shift_index(first, last, [-1, 0], "zeros")
        >>> index.tolist(), valid.tolist()
        ([[0, 0], [0, 1], [2, 2]], [[False, True], [True, True], [False, True]])
    """
    del padding  # both paddings clamp; zeros then masks the clamped reads out
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


def gather_steps(
    value: Any,
    batch_dims: int,
    index: torch.Tensor,
    valid: torch.Tensor,
    padding: Padding,
    stacked: bool,
) -> Any:
    """Reads ``value`` (``[*B, T, *F]``) at ``index`` (``[*B, T, n]``) along the time dim.

    Args:
        value: a tensor or a TensorDict whose first ``batch_dims`` dims are ``[*B, T]``.
        batch_dims: ``len([*B, T])``.
        index: long ``[*B, T, n]``, time positions to read (inside ``[0, T)``).
        valid: bool ``[*B, T, n]``; with ``padding="zeros"`` the invalid reads are zeroed.
        padding: ``"zeros"`` or ``"first"``.
        stacked: keep the shift dim (``[*B, T, n, *F]``); else ``n`` must be 1 and it is dropped.

    Returns:
        The gathered values, of the type of ``value``.
    """
    if isinstance(value, TensorDictBase):
        return value.apply(
            lambda x: gather_steps(x, batch_dims, index, valid, padding, stacked),
            batch_size=[*index.shape[:-1], *([index.shape[-1]] if stacked else [])],
        )
    lead = value.shape[:batch_dims]
    T = lead[-1]
    n = index.shape[-1]
    feat = value.shape[batch_dims:]
    flat = value.reshape(-1, T, *feat)
    rows = torch.arange(flat.shape[0], device=value.device).unsqueeze(-1)
    out = flat[rows, index.reshape(flat.shape[0], T * n).to(value.device)]
    out = out.reshape(*lead, n, *feat)
    if padding == "zeros":
        mask = valid.to(value.device).reshape(*lead, n, *([1] * len(feat)))
        out = torch.where(mask, out, torch.zeros((), dtype=out.dtype, device=out.device))
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
    start = _episode_start_of(td, episode_start).to(td.device or torch.device("cpu"))
    first, last = episode_bounds(start)
    out = {}
    for view in views:
        value = td.get(view.key, None)
        if value is None:
            raise KeyError(
                f"view {_key_str(view.target_key)} reads the key {_key_str(view.key)}, which the "
                f"trajectory lacks (keys: {sorted(map(str, td.keys(True, True)))})"
            )
        index, valid = shift_index(first, last, view.shifts, view.padding)
        out[view.target_key] = gather_steps(
            value, td.batch_dims, index, valid, view.padding, view.stacked
        )
    for key, value in out.items():
        td.set(key, value)
    return td
