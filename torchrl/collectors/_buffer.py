"""The preallocated ``[*B, T]`` batch of a collector and the writer that fills it step by step.

A collector allocates its batch once, from the structure of the first transition, and then copies
each step into the time slice ``t`` of every leaf. The slices are views computed once, so a step
costs one ``copy_`` per key and no TensorDict construction.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import COLLECTOR, DONE, NEXT, TRAJ_IDS, TRUNCATED
from torchrl._td_compat import entries, set_unchecked
from torchrl._types import DeviceLike
from torchrl._utils import warn_once

__all__ = [
    "TRAJ_KEY",
    "BatchBuffers",
    "BufferPool",
    "StepWriter",
    "allocate_batch",
    "is_tensor_dict",
]

#: Where the collector writes the trajectory ids.
TRAJ_KEY: tuple[str, str] = (COLLECTOR, TRAJ_IDS)

# Past this many (key, time) pairs, time slices are taken on the fly instead of precomputed:
# a view object per slice costs memory, and huge batches are rare with many keys.
_MAX_PRECOMPUTED_VIEWS = 200_000


def _leaves(
    td: TensorDictBase, prefix: tuple[str, ...] = ()
) -> Iterable[tuple[tuple[str, ...], Any]]:
    for key, value in td.items():
        path = (*prefix, key)
        if isinstance(value, TensorDictBase):
            yield from _leaves(value, path)
        else:
            yield path, value


def allocate_batch(
    like: TensorDictBase,
    batch_size: torch.Size,
    steps: int,
    device: DeviceLike,
    extra: dict[tuple[str, ...], torch.Tensor] | None = None,
    shared: bool = False,
) -> tuple[TensorDict, list[tuple[str, ...]]]:
    """Allocates zeros shaped like ``like`` with a time dim ``steps`` inserted after the batch.

    Args:
        like: one transition, batch ``batch_size`` (nested TensorDicts may have more dims).
        batch_size: the env's batch size ``B``.
        steps: the number of time steps ``T``.
        device: where the batch lives (``None``: where each leaf of ``like`` is).
        extra: more leaves (path -> one step's tensor, ``[*B, ...]``) to allocate, if absent.
        shared: place the batch in shared memory (for multi-process collectors).

    Returns:
        The batch (``[*B, T]``) and the paths of the non-tensor leaves left out.
    """
    nb = len(batch_size)
    skipped: list[tuple[str, ...]] = []

    def zeros_like_step(value: torch.Tensor) -> torch.Tensor:
        shape = (*value.shape[:nb], steps, *value.shape[nb:])
        return torch.zeros(
            shape, dtype=value.dtype, device=value.device if device is None else device
        )

    def build(node: TensorDictBase, path: tuple[str, ...]) -> TensorDict:
        inner = list(node.batch_size)
        out = TensorDict(batch_size=[*inner[:nb], steps, *inner[nb:]], device=device)
        for key, value in node.items():
            sub = (*path, key)
            if isinstance(value, TensorDictBase):
                if not is_tensor_dict(value):
                    skipped.append(sub)
                    continue
                set_unchecked(out, key, build(value, sub), inplace=False, validated=True)
            elif isinstance(value, torch.Tensor):
                set_unchecked(out, key, zeros_like_step(value), inplace=False, validated=True)
            else:
                skipped.append(sub)
        return out

    batch = build(like, ())
    for path, value in (extra or {}).items():
        if batch.get(path, None) is None:
            batch.set(path, zeros_like_step(value))
    traj = torch.zeros((*batch_size, steps), dtype=torch.int64, device=device)
    batch.set(TRAJ_KEY, traj)
    if shared:
        batch.share_memory_()
    return batch, skipped


def is_tensor_dict(value: object) -> bool:
    # NonTensorData / NonTensorStack are TensorDictBase subclasses holding Python objects.
    return not getattr(value, "_is_non_tensor", False)


class StepWriter:
    """Copies the entries of one transition into time slice ``t`` of a batch.

    Args:
        batch: the preallocated batch, ``[*B, T]``.
        batch_dims: ``len(B)``.
        skip: leaf paths not to copy (e.g. policy outputs while random actions are collected).

    The trajectory-id leaf is not copied from the transition: the collector writes it itself.
    """

    def __init__(
        self, batch: TensorDictBase, batch_dims: int, skip: Iterable[tuple[str, ...]] = ()
    ) -> None:
        skip = set(skip) | {TRAJ_KEY}
        steps = batch.batch_size[batch_dims]
        paths = [p for p, v in _leaves(batch) if isinstance(v, torch.Tensor) and p not in skip]
        precompute = len(paths) * steps <= _MAX_PRECOMPUTED_VIEWS

        def slices(tensor: torch.Tensor) -> list[torch.Tensor] | torch.Tensor:
            # A list of views and a time-major view both answer ``[t]`` with slice t.
            if precompute:
                return [tensor.select(batch_dims, t) for t in range(steps)]
            return tensor.movedim(batch_dims, 0)

        self.paths = paths
        # Sources are read in this order: root keys, ("next", key) keys, deeper paths.
        self.root_keys: list[str] = []
        self.next_keys: list[str] = []
        self.deep_paths: list[tuple[str, ...]] = []
        ordered: list[Any] = []
        for group in ("root", "next", "deep"):
            for path in paths:
                kind = (
                    "root"
                    if len(path) == 1
                    else "next"
                    if len(path) == 2 and path[0] == NEXT
                    else "deep"
                )
                if kind != group:
                    continue
                if kind == "root":
                    self.root_keys.append(path[0])
                elif kind == "next":
                    self.next_keys.append(path[1])
                else:
                    self.deep_paths.append(path)
                ordered.append(slices(batch.get(path)))
        # dests[t]: the views of slice t, in source order (one foreach copy per step).
        self._views = ordered
        self._dests = [[v[t] for v in ordered] for t in range(steps)] if precompute else None
        # Root entries carried over from the previous step's "next" ones (observations, flags):
        # (root position, next position) in source order. See ``defer``.
        order: list[tuple[str, ...]] = [(k,) for k in self.root_keys]
        order += [(NEXT, k) for k in self.next_keys] + self.deep_paths
        where = {path: i for i, path in enumerate(order)}
        self._pairs = [
            (i, where[(NEXT,) + path])
            for i, path in enumerate(order)
            if path[0] != NEXT and (NEXT,) + path in where
        ]
        self._full = [batch.get(path) for path in order]
        self._batch_dims = batch_dims
        self.defer = False
        self._last: list[tuple[Any, int]] | None = None
        self._last_t = -2
        self._deferred: list[list[int]] = [[] for _ in self._pairs]
        self.traj = slices(batch.get(TRAJ_KEY))
        # Per-env episode ends, read back from the batch (``("next", ..., "done")`` leaves).
        self.done = [slices(batch.get(p)) for p in paths if p[0] == NEXT and p[-1] == DONE]
        self.truncated = [
            slices(batch.get(p)) for p in paths if p[0] == NEXT and p[-1] == TRUNCATED
        ]

    def write(self, td: TensorDictBase, t: int) -> None:
        """Copies the transition ``td`` (batch ``[*B]``, with ``"next"``) into slice ``t``."""
        try:
            if type(td) is TensorDict:
                raw = entries(td)
                sources = [raw[key] for key in self.root_keys]
                if self.next_keys:
                    nxt = raw[NEXT]
                    if type(nxt) is TensorDict:
                        nraw = entries(nxt)
                        sources += [nraw[key] for key in self.next_keys]
                    else:
                        sources += [nxt.get(key) for key in self.next_keys]
            else:
                sources = [td.get(key) for key in self.root_keys]
                sources += [td.get((NEXT, key)) for key in self.next_keys]
            if self.deep_paths:
                sources += [td.get(path) for path in self.deep_paths]
        except KeyError as err:
            raise self._explain(td, err) from err
        dests = self._dests[t] if self._dests is not None else [v[t] for v in self._views]
        if self.defer and self._pairs:
            dests, sources = self._defer_carried(dests, sources, t)
        try:
            # One dispatch for all the copies: a Python loop of copy_ costs ~2x more per step.
            torch._foreach_copy_(dests, sources)
        except RuntimeError:
            try:  # e.g. devices foreach does not mix: key by key, naming a bad entry
                for dest, source in zip(dests, sources):
                    dest.copy_(source)
            except RuntimeError as err:
                raise self._explain(td, err) from err

    def _defer_carried(self, dests: list[Any], sources: list[Any], t: int) -> tuple[list, list]:
        """Leaves out root entries that are the previous step's "next" tensors, unchanged.

        With many sub-envs, copying each step's root observation (strided, into a cold
        buffer) costs as much as the observation itself; when the root tensor is the very
        tensor written as ``"next"`` at ``t - 1`` and was not modified in place since (same
        object, same version counter), its slice is copied from the batch by :meth:`flush`,
        all deferred steps at once. Anything else (a reset, an in-place change) is copied now.
        """
        if t == 0:  # a new batch (whatever an interrupted one left behind)
            for steps in self._deferred:
                steps.clear()
        last = self._last
        current = [(sources[j], sources[j]._version) for _, j in self._pairs]
        if last is not None and t == self._last_t + 1:
            skip = set()
            for n, (i, _) in enumerate(self._pairs):
                prev, version = last[n]
                if sources[i] is prev and prev._version == version:
                    self._deferred[n].append(t)
                    skip.add(i)
            if skip:
                dests = [d for k, d in enumerate(dests) if k not in skip]
                sources = [x for k, x in enumerate(sources) if k not in skip]
        self._last, self._last_t = current, t
        return dests, sources

    def flush(self) -> None:
        """Copies the deferred root slices from the batch's ``"next"`` slices of the step before."""
        nb = self._batch_dims
        for n, (i, j) in enumerate(self._pairs):
            steps = self._deferred[n]
            if not steps:
                continue
            root, nxt = self._full[i], self._full[j]
            start = prev = steps[0]
            for t in [*steps[1:], None]:
                if t is not None and t == prev + 1:
                    prev = t
                    continue
                length = prev - start + 1
                root.narrow(nb, start, length).copy_(nxt.narrow(nb, start - 1, length))
                if t is not None:
                    start = prev = t
            steps.clear()
        self._last, self._last_t = None, -2

    def _explain(self, td: TensorDictBase, err: Exception) -> Exception:
        for path in self.paths:
            value = td.get(path, None)
            if value is None:
                return KeyError(
                    f"collector: the transition has no entry {path!r}, which the first "
                    f"transition had (keys now: {sorted(map(str, td.keys(True, True)))}). A "
                    f"collector's batches keep the keys of the first step; use "
                    f"use_buffers=False for data whose keys change from step to step"
                )
        return RuntimeError(f"collector: could not write a transition into the batch: {err}")


def _reference_counts(holder: list[TensorDictBase], i: int) -> list[tuple[int, ...]] | None:
    """The reference counts of ``holder[i]``'s nodes and leaves (``None``: not plain TensorDicts).

    Root first (``(refcount,)``), then nested nodes (``(refcount,)``) and leaves (``(refcount,
    TensorImpl uses, storage uses)``) depth first. Read the same way for every TensorDict, so
    that counts compare with those of a TensorDict known to be referenced by nobody else.
    """
    root = holder[i]
    if type(root) is not TensorDict:
        return None
    out: list[tuple[int, ...]] = [(sys.getrefcount(root),)]
    stack = [root]
    while stack:
        node = stack.pop()
        for value in entries(node).values():
            if type(value) is torch.Tensor:
                storage = value.untyped_storage()._cdata
                uses = (value._use_count(), torch._C._storage_Use_Count(storage))  # type: ignore[attr-defined]
                out.append((sys.getrefcount(value), *uses))
            elif type(value) is TensorDict:
                out.append((sys.getrefcount(value),))
                stack.append(value)
            else:
                return None
    return out


_ALONE_ROOT: int | None = None


def _alone_root() -> int:
    """The count :func:`_reference_counts` reads for a root referenced by its holder only."""
    global _ALONE_ROOT
    if _ALONE_ROOT is None:
        holder = [TensorDict()]
        counts = _reference_counts(holder, 0)
        assert counts is not None
        _ALONE_ROOT = counts[0][0]
    return _ALONE_ROOT


class BufferPool:
    """Batches handed to the user, kept to be written again once nobody else holds them.

    A collector that hands out its buffer instead of a copy needs another buffer for the next
    batch; a new one costs page faults on every first write (as much as a copy) and new
    per-step views. A delivered batch that the user has dropped is reused instead, with the
    writers made for it. Dropped means: no other reference to the TensorDict, its nested
    TensorDicts, its tensors, nor to their storage (views, slices, numpy arrays, DLPack
    capsules all count), judged by comparing reference counts with those the batch had
    before it was handed out.

    Args:
        keep: how many delivered batches to keep track of.
    """

    def __init__(self, keep: int = 3) -> None:
        self.keep = keep
        self._batches: list[TensorDictBase] = []
        self._rest: list[tuple[Any, list[tuple[int, ...]]]] = []

    @staticmethod
    def counts(batch: TensorDictBase) -> list[tuple[int, ...]] | None:
        """The reference counts of a batch's nested nodes and leaves, before it is handed out.

        ``None`` when the batch cannot be tracked (not made of plain TensorDicts).
        """
        counts = _reference_counts([batch], 0)
        return None if counts is None else counts[1:]

    def add(self, batch: TensorDictBase, extra: Any, counts: list[tuple[int, ...]] | None) -> None:
        """Tracks a delivered batch with what goes with it (``counts``: see :meth:`counts`)."""
        if counts is None:
            return
        self._batches.append(batch)
        self._rest.append((extra, counts))
        if len(self._batches) > self.keep:
            self._batches.pop(0)
            self._rest.pop(0)

    def take(self) -> tuple[TensorDictBase, Any, list[tuple[int, ...]]] | None:
        """A tracked batch that nobody else references (with its extra and counts), or ``None``."""
        root = _alone_root()
        for i in range(len(self._batches)):
            counts = _reference_counts(self._batches, i)
            if counts is not None and counts[0][0] == root and counts[1:] == self._rest[i][1]:
                extra, before = self._rest.pop(i)
                return self._batches.pop(i), extra, before
        return None

    def clear(self) -> None:
        """Forgets every tracked batch."""
        self._batches = []
        self._rest = []


# Mean bytes of one leaf at one time step from which a batch is handed out rather than copied
# (see BatchBuffers.allocate).
_FRESH_MIN_BYTES = 4096

# A buffer slot: the batch, its writer, and its writer for random actions (no policy outputs).
Slot = tuple[TensorDictBase, StepWriter, StepWriter]


class BatchBuffers:
    """The preallocated batches of a collector, their writers, and how batches are handed out.

    Allocated from the first transition (:meth:`allocate`), one batch per slot: a collector in
    the calling process has one; a multi-process worker has one (sync) or two (async: one is
    filled while the parent reads the other), in shared memory. Every batch has a writer for
    policy steps and one for random steps, which leaves out the policy's other outputs (zeroed
    once before such a batch).

    For big steps (thousands of vectorized envs: ``_FRESH_MIN_BYTES`` per leaf and step) a
    collector that hands out batches of the caller's own gives the buffer itself away
    (:attr:`hand_out`) and writes the next batch into another (:meth:`renew`), and its writers
    defer the copies of carried-over root entries (:attr:`defer`).

    Args:
        batch_size: the env's batch size ``B``.
        steps: the time steps ``T`` of a batch.
        device: where batches live (``None``: where the transition's leaves are).
        slots: how many batches.
        shared: place the batches in shared memory (a multi-process worker's).
        may_hand_out: whether delivered batches may be the buffers themselves (not when the
            collector returns its own buffer, ``return_same_td=True``, nor in shared memory).
    """

    def __init__(
        self,
        batch_size: torch.Size,
        steps: int,
        device: DeviceLike,
        slots: int = 1,
        shared: bool = False,
        may_hand_out: bool = True,
    ) -> None:
        self.batch_size = batch_size
        self.batch_dims = len(batch_size)
        self.steps = steps
        self.device = device
        self.shared = shared
        self.n_slots = slots
        self.may_hand_out = may_hand_out and not shared
        #: the slot the next batch is written into
        self.slot = 0
        #: policy outputs a random step does not write (zeroed before a random batch)
        self.policy_only: list[tuple[str, ...]] = []
        #: delivered batches are the buffers themselves (see :meth:`renew`)
        self.hand_out = False
        #: the writers defer carried-over root copies (see :meth:`StepWriter.flush`)
        self.defer = False
        self._slots: list[Slot] = []
        self._zeroed_for_random = False
        self._pool = BufferPool()
        self._counts: list[tuple[int, ...]] | None = None

    @property
    def allocated(self) -> bool:
        """Whether the batches exist (after the first transition)."""
        return bool(self._slots)

    def allocate(
        self,
        transition: TensorDictBase,
        extra: dict[tuple[str, ...], torch.Tensor],
        owner: str,
    ) -> None:
        """Allocates every slot's batch from the first transition.

        Args:
            transition: the first transition, batch ``B``.
            extra: leaves the transition lacks that batches must hold (policy outputs of a
                random first step), path -> one step's tensor.
            owner: the collector's name, for the warning about non-tensor entries left out.
        """
        self.policy_only = list(extra)
        for _ in range(self.n_slots):
            batch, skipped = allocate_batch(
                transition, self.batch_size, self.steps, self.device, extra, shared=self.shared
            )
            if skipped:
                warn_once(
                    f"{owner}: non-tensor entries {skipped} are not collected with "
                    "use_buffers=True; pass use_buffers=False to keep them"
                )
            self._slots.append(self._slot_for(batch))
        self._zeroed_for_random = True  # allocated as zeros
        batch, writer, _ = self._slots[0]
        leaves = max(len(writer.paths), 1)
        per_leaf_step = batch.bytes() / (leaves * self.steps)
        # A delivered batch is normally a copy of the buffer. For big steps (thousands of
        # vectorized envs) handing out the buffer itself and writing the next batch into
        # another (a dropped earlier batch, else a new one) saves that copy; for small steps
        # the copy is cheap and a new buffer's per-step views (about a microsecond each)
        # would cost more.
        self.hand_out = self.may_hand_out and per_leaf_step >= _FRESH_MIN_BYTES
        # Big steps also defer their carried-over root entries (see StepWriter._defer_carried).
        self.defer = per_leaf_step >= _FRESH_MIN_BYTES
        for _, writer, writer_random in self._slots:
            writer.defer = writer_random.defer = self.defer
        self._counts = BufferPool.counts(batch) if self.hand_out else None

    def _slot_for(self, batch: TensorDictBase) -> Slot:
        writer = StepWriter(batch, self.batch_dims)
        writer_random = StepWriter(batch, self.batch_dims, skip=self.policy_only)
        writer.defer = writer_random.defer = self.defer
        return batch, writer, writer_random

    def batch(self, slot: int | None = None) -> TensorDictBase:
        """The batch of ``slot`` (default: the current one)."""
        return self._slots[self.slot if slot is None else slot][0]

    def writer(self, random: bool) -> StepWriter:
        """The current slot's writer for policy steps, or for random ones (``random``).

        Before a random batch, the policy outputs it leaves out are zeroed (once per buffer).
        """
        batch, writer, writer_random = self._slots[self.slot]
        if not random:
            return writer
        if self.policy_only and not self._zeroed_for_random:
            for path in self.policy_only:
                batch.get(path).zero_()
            self._zeroed_for_random = True
        return writer_random

    def renew(self) -> None:
        """Gives the current buffer away: the next batch goes into another of the same layout.

        That is a delivered batch nobody references any more (see :class:`BufferPool`), or a
        new, uninitialized one. Every leaf is rewritten by the next batch (policy-only ones
        are zeroed again when random actions leave them out), so nothing needs clearing.
        """
        delivered, counts = self._slots[self.slot], self._counts
        taken = self._pool.take()
        if taken is None:
            empty = delivered[0].apply(torch.empty_like, filter_empty=False)
            assert empty is not None
            slot = self._slot_for(empty)
            self._counts = BufferPool.counts(slot[0])
        else:
            batch, writers, self._counts = taken
            slot = (batch, *writers)
        self._pool.add(delivered[0], delivered[1:], counts)
        self._slots[self.slot] = slot
        self._zeroed_for_random = False

    def clear(self) -> None:
        """Drops every batch (the collector is shut down)."""
        self._slots = []
        self._pool.clear()
