"""TED data <-> a compact "flat" layout without the duplicated next observations.

In TED data (one transition per item, ``("next", ...)`` entries next to the root ones) every
``("next", obs)`` repeats the root ``obs`` of the following step, except where an episode ends.
:class:`TED2Flat` drops these copies and keeps ``("next", obs)`` only at the items that end an
episode (a done flag is set), end a row, or precede the write cursor of a wrapped ring buffer;
:class:`Flat2TED` rebuilds the TED data. Both are callables ``converter(data, path=None)``, so they
can serve as storage save / load hooks (``hook(data, path) -> data``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import DONE, DONE_KEYS, NEXT, REWARD
from torchrl._types import NestedKey
from torchrl.data.replay_buffers.utils import nested_key_str

__all__ = ["Flat2TED", "TED2Flat"]

#: Entry of the flat layout holding the TED batch size (an int64 tensor ``[batch_dims]``).
TED_BATCH_SIZE_KEY = "ted_batch_size"


def _as_tuple(key: NestedKey) -> tuple[str, ...]:
    if isinstance(key, str):
        return (key,)
    if isinstance(key, tuple) and key and all(isinstance(k, str) for k in key):
        return cast(tuple[str, ...], key)
    raise TypeError(f"expected a nested key (str or tuple of str), got {key!r}")


def _key_str(key_t: tuple[str, ...]) -> str:
    return nested_key_str(key_t[0] if len(key_t) == 1 else key_t)


def _leaf_names(keys: Sequence[NestedKey]) -> set[str]:
    return {_as_tuple(k)[-1] for k in keys}


class _FlatConfig:
    """Keys shared by :class:`TED2Flat` and :class:`Flat2TED`."""

    def __init__(
        self,
        done_key: NestedKey,
        shift_key: NestedKey,
        is_full_key: NestedKey,
        done_keys: Sequence[NestedKey],
        reward_keys: Sequence[NestedKey],
    ) -> None:
        self.done_key = _as_tuple(done_key)
        if self.done_key[0] != NEXT:
            self.done_key = (NEXT, *self.done_key)
        self.shift_key = _as_tuple(shift_key)
        self.is_full_key = _as_tuple(is_full_key)
        if isinstance(done_keys, str) or isinstance(reward_keys, str):
            raise TypeError("done_keys and reward_keys must be sequences of keys, not one string")
        self.done_keys = tuple(done_keys)
        self.reward_keys = tuple(reward_keys)
        self._done_names = _leaf_names(self.done_keys) | {self.done_key[-1]}
        self._skip = self._done_names | _leaf_names(self.reward_keys)

    def ends(
        self, td: TensorDictBase, batch: torch.Size, shift: int, is_full: bool
    ) -> torch.Tensor:
        """``[rows, T]`` bool: the items whose ``("next", obs)`` entries are kept."""
        t_len = batch[-1]
        rows = batch[:-1].numel()
        ends = torch.zeros(rows, t_len, dtype=torch.bool)
        nxt = td.get(NEXT, None)
        if isinstance(nxt, TensorDictBase):
            for key in nxt.keys(include_nested=True, leaves_only=True):
                key_t = _as_tuple(key)
                value = nxt.get(key_t)
                if key_t[-1] in self._done_names and isinstance(value, torch.Tensor):
                    ends |= value.reshape(rows, t_len, -1).bool().any(-1)
        if t_len:
            ends[:, t_len - 1] = True
            # The newest item sits just before the cursor: the cursor slot holds older data (a
            # wrapped ring buffer) or nothing.
            ends[:, (shift - 1) % t_len] = True
        return ends

    @staticmethod
    def checked(rows: int, t_len: int, shift: int, is_full: bool) -> torch.Tensor:
        """``[rows, T - 1]`` bool: the items ``i`` whose follower ``i + 1`` holds data."""
        checked = torch.ones(rows, max(t_len - 1, 0), dtype=torch.bool)
        if not is_full:
            checked[:, max(shift - 1, 0) :] = False
        return checked

    def duplicated(self, td: TensorDictBase, batch: torch.Size) -> list[tuple[str, ...]]:
        """The ``("next", k)`` keys that may repeat a root entry ``k`` (same shape and dtype)."""
        nxt = td.get(NEXT, None)
        if not isinstance(nxt, TensorDictBase):
            return []
        out = []
        for key in nxt.keys(include_nested=True, leaves_only=True):
            key_t = _as_tuple(key)
            if key_t[-1] in self._skip:
                continue
            nv, root = nxt.get(key_t), td.get(key_t, None)
            if not isinstance(nv, torch.Tensor) or not isinstance(root, torch.Tensor):
                continue
            if nv.shape == root.shape and nv.dtype == root.dtype:
                out.append(key_t)
        return out


class TED2Flat(_FlatConfig):
    """Converts TED data to a compact layout that stores each next observation once.

    ``("next", k)`` entries that repeat the root ``k`` of the following item are dropped except at
    the items ending an episode, a row (last item along the time dim) or preceding the ring-buffer
    cursor ``shift``. Each dropped value is checked to be such a copy: data where it is not (e.g.
    after a multi-step transform) raises instead of being lost. Done and reward entries are always
    kept. To convert a storage, pass its cursor and fill state (``shift=``, ``is_full=``).

    The result has batch size ``[]``: every kept entry keeps its ``[*B, T, ...]`` shape, a
    compacted ``("next", k)`` holds only the kept items (``[M, ...]``), ``shift_key`` and
    ``is_full_key`` hold the cursor and the full flag, and ``"ted_batch_size"`` the TED batch size.

    Args:
        done_key: the main done entry (under ``"next"``). Defaults to ``("next", "done")``.
        shift_key: where the ring-buffer cursor is written. Defaults to ``"shift"``.
        is_full_key: where the full flag is written. Defaults to ``"is_full"``.
        done_keys: the done entries (matched by last name under ``"next"``) whose flags end an
            episode. Defaults to ``("done", "truncated", "terminated")``.
        reward_keys: entries never compacted. Defaults to ``("reward",)``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> obs = torch.arange(5.0).unsqueeze(-1)
        >>> done = torch.tensor([False, True, False, False, True]).unsqueeze(-1)
        >>> next_obs = torch.tensor([1.0, 9.0, 3.0, 4.0, 9.0]).unsqueeze(-1)
        >>> ted = TensorDict(
        ...     observation=obs,
        ...     next=TensorDict(observation=next_obs, done=done, batch_size=[5]),
        ...     batch_size=[5],
        ... )
        >>> flat = TED2Flat()(ted)
        >>> flat["next", "observation"].squeeze(-1)  # only the two episode ends
        tensor([9., 9.])
        >>> bool((Flat2TED()(flat) == ted).all())
        True
    """

    def __init__(
        self,
        done_key: NestedKey = (NEXT, DONE),
        shift_key: NestedKey = "shift",
        is_full_key: NestedKey = "is_full",
        done_keys: Sequence[NestedKey] = DONE_KEYS,
        reward_keys: Sequence[NestedKey] = (REWARD,),
    ) -> None:
        super().__init__(done_key, shift_key, is_full_key, done_keys, reward_keys)

    def __call__(
        self,
        data: TensorDictBase,
        path: str | Path | None = None,
        *,
        shift: int | None = None,
        is_full: bool | None = None,
    ) -> TensorDict:
        """Returns the flat layout of ``data``.

        Args:
            data: TED data of batch size ``[*B, T]`` (time last).
            path: unused; accepted so that the converter can be a storage save hook.

        Keyword Args:
            shift: the write cursor of a ring buffer along the time dim: the item before it is
                the newest one, never followed by the item at ``shift``. ``None`` (or ``0``): the
                data is in time order.
            is_full: whether every item holds data; when ``False`` only the items before
                ``shift`` do (a storage not filled yet) and the others are not checked.
                Defaults to ``True``.

        Returns:
            The flat TensorDict (batch size ``[]``).

        Raises:
            TypeError: ``data`` is not a TensorDict.
            ValueError: no batch dim, or a dropped ``("next", k)`` is not a copy of the root
                ``k`` of the following item.
        """
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"TED2Flat expects a TensorDict, got {type(data).__name__}")
        batch = data.batch_size
        if len(batch) < 1:
            raise ValueError("TED2Flat needs data with a time dim (batch size [*B, T]), got []")
        t_len = batch[-1]
        shift = 0 if shift is None else int(shift)
        is_full = True if is_full is None else bool(is_full)
        if t_len and not 0 <= shift < t_len and not (shift == t_len and not is_full):
            raise ValueError(f"shift must be in [0, {t_len}) (the time dim), got {shift}")
        rows = batch[:-1].numel()
        ends = self.ends(data, batch, shift, is_full)
        inner = ~ends[:, :-1] & self.checked(rows, t_len, shift, is_full)
        flat_ends = ends.reshape(-1)
        out = TensorDict({}, batch_size=[])
        compacted = set()
        for key_t in self.duplicated(data, batch):
            nv = data.get((NEXT, *key_t))
            root = data.get(key_t)
            nv2 = nv.reshape(rows, t_len, *nv.shape[len(batch) :])
            root2 = root.reshape(rows, t_len, *root.shape[len(batch) :])
            if bool(inner.any()) and not torch.equal(nv2[:, :-1][inner], root2[:, 1:][inner]):
                raise ValueError(
                    f"{_key_str((NEXT, *key_t))} is not the root {_key_str(key_t)} "
                    f"of the following item within an episode (e.g. after a multi-step "
                    f"transform) or the data is a storage not passed with its shift= (cursor) and "
                    f"is_full=: TED2Flat would lose it; save this data unconverted"
                )
            out.set((NEXT, *key_t), nv2.reshape(rows * t_len, *nv2.shape[2:])[flat_ends].clone())
            compacted.add((NEXT, *key_t))
        for key in data.keys(include_nested=True, leaves_only=True):
            key_t = _as_tuple(key)
            if key_t not in compacted:
                out.set(key_t, data.get(key_t))
        out.set(self.shift_key, torch.tensor(shift, dtype=torch.long))
        out.set(self.is_full_key, torch.tensor(is_full))
        out.set(TED_BATCH_SIZE_KEY, torch.tensor(list(batch), dtype=torch.long))
        return out


class Flat2TED(_FlatConfig):
    """Rebuilds TED data from the layout written by :class:`TED2Flat`.

    A compacted ``("next", k)`` (one value per kept item) is expanded back: the root ``k`` of the
    following item everywhere, the kept values at episode ends, row ends and before the cursor.
    The kept items are found again from the done flags, ``shift_key`` and ``is_full_key`` of the
    flat data, so both converters must use the same keys.

    Args:
        done_key: the main done entry (under ``"next"``). Defaults to ``("next", "done")``.
        shift_key: where the ring-buffer cursor is read. Defaults to ``"shift"``.
        is_full_key: where the full flag is read. Defaults to ``"is_full"``.
        done_keys: the done entries whose flags end an episode. Defaults to
            ``("done", "truncated", "terminated")``.
        reward_keys: entries never compacted. Defaults to ``("reward",)``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> ted = TensorDict(
        ...     observation=torch.zeros(2, 3, 4),
        ...     next=TensorDict(
        ...         observation=torch.zeros(2, 3, 4),
        ...         done=torch.zeros(2, 3, 1, dtype=torch.bool),
        ...         batch_size=[2, 3],
        ...     ),
        ...     batch_size=[2, 3],
        ... )
        >>> Flat2TED()(TED2Flat()(ted)).batch_size
        torch.Size([2, 3])
    """

    def __init__(
        self,
        done_key: NestedKey = (NEXT, DONE),
        shift_key: NestedKey = "shift",
        is_full_key: NestedKey = "is_full",
        done_keys: Sequence[NestedKey] = DONE_KEYS,
        reward_keys: Sequence[NestedKey] = (REWARD,),
    ) -> None:
        super().__init__(done_key, shift_key, is_full_key, done_keys, reward_keys)

    def __call__(self, data: TensorDictBase, path: str | Path | None = None) -> TensorDict:
        """Returns the TED data held by the flat layout ``data``.

        Args:
            data: a TensorDict written by :class:`TED2Flat`.
            path: unused; accepted so that the converter can be a storage load hook.

        Returns:
            The TED TensorDict, of batch size ``[*B, T]``.

        Raises:
            TypeError: ``data`` is not a TensorDict.
            KeyError: an entry of the flat layout is missing.
            ValueError: a compacted entry does not hold one value per kept item.
        """
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"Flat2TED expects a TensorDict, got {type(data).__name__}")
        meta = (TED_BATCH_SIZE_KEY,), self.shift_key, self.is_full_key
        for key_t in meta:
            if data.get(key_t, None) is None:
                raise KeyError(
                    f"the flat data has no {_key_str(key_t)} entry: was it written by "
                    f"TED2Flat (with the same shift_key / is_full_key)?"
                )
        batch = torch.Size(int(d) for d in data.get(TED_BATCH_SIZE_KEY).tolist())
        shift = int(data.get(self.shift_key))
        is_full = bool(data.get(self.is_full_key))
        out = TensorDict({}, batch_size=batch)
        compacted = []
        for key in data.keys(include_nested=True, leaves_only=True):
            key_t = _as_tuple(key)
            if key_t in meta:
                continue
            value = data.get(key_t)
            if key_t[0] == NEXT and len(key_t) > 1 and self._is_compacted(data, key_t, batch):
                compacted.append(key_t)
                continue
            out.set(key_t, value)
        if not compacted:
            return out
        rows, t_len = batch[:-1].numel(), batch[-1]
        flat_ends = self.ends(out, batch, shift, is_full).reshape(-1)
        n_kept = int(flat_ends.sum())
        for key_t in compacted:
            kept = data.get(key_t)
            if kept.shape[0] != n_kept:
                raise ValueError(
                    f"{_key_str(key_t)} holds {kept.shape[0]} kept values but the done "
                    f"flags, shift and is_full give {n_kept} kept items: was it written by "
                    f"TED2Flat with the same done_keys?"
                )
            root = out.get(key_t[1:])
            root2 = root.reshape(rows, t_len, *root.shape[len(batch) :])
            shifted = torch.empty_like(root2)
            shifted[:, :-1] = root2[:, 1:]
            full = shifted.reshape(rows * t_len, *root2.shape[2:])
            full[flat_ends] = kept.to(full.dtype)
            out.set(key_t, full.reshape(root.shape))
        return out

    def _is_compacted(
        self, data: TensorDictBase, key_t: tuple[str, ...], batch: torch.Size
    ) -> bool:
        """Whether ``("next", k)`` holds only the kept items (its root ``k`` holds all)."""
        if key_t[-1] in self._skip:
            return False
        value, root = data.get(key_t), data.get(key_t[1:], None)
        if not isinstance(value, torch.Tensor) or not isinstance(root, torch.Tensor):
            return False
        if value.dtype != root.dtype:
            return False
        # A compacted entry is ``[M, *feature]`` where its root is ``[*B, T, *feature]``. With one
        # batch dim and every item kept both layouts coincide and expanding is a no-op.
        feature = root.shape[len(batch) :]
        return value.dim() == 1 + len(feature) and value.shape[1:] == feature
