"""Sample units: what each item drawn by a sampler (an *anchor*) expands into in a batch.

The sampler decides which anchors are drawn; a sample unit decides which stored records each
anchor brings into the batch: itself (:class:`Transition`, the default) or a window of records
around it (:class:`Sequence`). A buffer takes one with ``ReplayBuffer(sample_unit=...)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal

import torch
from tensordict import TensorDictBase

from torchrl._keys import DONE, NEXT, WEIGHT
from torchrl._types import NestedKey
from torchrl.data.replay_buffers.storages import Index, Storage, TensorStorage
from torchrl.data.replay_buffers.utils import nested_key_str

__all__ = ["SampleUnit", "Sequence", "Transition"]

#: Info entries a :class:`Sequence` adds (one value per record of the batch).
VALIDITY_MASK = "validity_mask"
LEARNING_MASK = "learning_mask"
ANCHOR_INDEX = "anchor_index"

_BOUNDARIES = ("pad", "stop", "include_reset")


class SampleUnit(ABC):
    """Base class of the sample units: expands the sampled anchors into the batch's records.

    The buffer calls :meth:`expand` right after its sampler, before reading the storage: the
    index it returns is the one the batch is read from and the one reported as ``"index"``.
    ``expand`` must not change the storage. Info entries aligned with the anchors (e.g. the
    importance weights ``"_weight"``) must come back aligned with the returned index. After the
    storage is read, :meth:`postprocess` may adjust the batch using the info.

    Examples:
        A unit that reads each sampled item together with the one stored after it:

        >>> import torch
        >>> from torchrl.data import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
        >>> class WithSuccessor(SampleUnit):
        ...     def expand(self, index, info, storage):
        ...         return torch.stack([index, (index + 1) % len(storage)], -1).flatten(), info
        >>> rb = ReplayBuffer(
        ...     storage=LazyTensorStorage(10), sampler=SamplerWithoutReplacement(shuffle=False),
        ...     sample_unit=WithSuccessor(), batch_size=2,
        ... )
        >>> _ = rb.extend(torch.arange(10, 15))
        >>> rb.sample()
        tensor([10, 11, 11, 12])
    """

    @abstractmethod
    def expand(
        self, index: Index, info: dict[NestedKey, Any], storage: Storage
    ) -> tuple[Index, dict[NestedKey, Any]]:
        """Expands anchor indices into the indices of the batch's records.

        Args:
            index: the anchors drawn by the sampler (a tensor, or a tuple of coordinate tensors
                for storages with ``ndim > 1``).
            info: the sampler's information dictionary.
            storage: the storage the batch will be read from.

        Returns:
            ``(index, info)``: the records' indices and the (possibly extended) information.
        """

    def postprocess(self, data: Any, info: dict[NestedKey, Any]) -> Any:
        """Adjusts the batch read from the storage (default: returns it unchanged).

        Args:
            data: the batch, as read and collated.
            info: the information returned by :meth:`expand`.
        """
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Transition(SampleUnit):
    """The identity unit: each anchor is one record of the batch (the buffers' default).

    Examples:
        >>> from torchrl.data import LazyTensorStorage, ReplayBuffer, Transition
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4, sample_unit=Transition())
        >>> rb.extend(torch.arange(10)).shape, rb.sample().shape
        (torch.Size([10]), torch.Size([4]))
    """

    def expand(
        self, index: Index, info: dict[NestedKey, Any], storage: Storage
    ) -> tuple[Index, dict[NestedKey, Any]]:
        return index, info


class Sequence(SampleUnit):
    """Expands each anchor into ``burn_in + length + bootstrap`` records around it.

    Record ``k`` of an anchor ``a``'s window is stored record ``a + (k - burn_in) * dilation``:
    ``burn_in`` records before the anchor, the learning region of ``length`` records starting at
    the anchor, then ``bootstrap`` records after it. ``B`` anchors give a flat batch of
    ``B * (burn_in + length + bootstrap)`` records (``batch.unflatten(0, (B, -1))`` gives one
    row per anchor). Episodes end where ``done_key`` is True; a window record outside the
    anchor's episode, or outside the stored range, is *invalid*:

    - ``"pad"``: invalid records are zero-filled in the batch;
    - ``"stop"``: invalid records repeat the nearest record of the anchor's episode (the window
      stops at the boundary);
    - ``"include_reset"``: windows run across episode boundaries (only records outside the stored
      range are invalid, and repeat the nearest stored record).

    The info (and TensorDict batches) get ``"validity_mask"``, ``"learning_mask"`` (valid and in
    the learning region) and ``"anchor_index"``, one value per record; update a prioritized
    sampler's priorities at ``"anchor_index"`` (``"index"`` holds the window's records). Storages with ``ndim=1``
    holding TensorDicts are supported (``done_key=None`` needs no TensorDict: one episode).

    Args:
        length: records in the learning region (>= 1).
        episode_boundary: ``"pad"``, ``"stop"`` or ``"include_reset"`` (see above).
        done_key: the stored entry that ends an episode; ``None``: no boundary.
        burn_in: records before the anchor.
        bootstrap: records after the learning region.
        dilation: spacing between consecutive window records.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, Sequence, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(
        ...     storage=LazyTensorStorage(20), batch_size=2, sample_unit=Sequence(length=3)
        ... )
        >>> done = torch.zeros(20, 1, dtype=torch.bool)
        >>> nxt = TensorDict(done=done, batch_size=[20])
        >>> _ = rb.extend(TensorDict(obs=torch.arange(20), next=nxt, batch_size=[20]))
        >>> batch = rb.sample()
        >>> batch.shape, batch["validity_mask"].shape
        (torch.Size([6]), torch.Size([6]))
    """

    def __init__(
        self,
        length: int,
        episode_boundary: Literal["pad", "stop", "include_reset"] = "pad",
        done_key: NestedKey | None = (NEXT, DONE),
        burn_in: int = 0,
        bootstrap: int = 0,
        dilation: int = 1,
    ) -> None:
        for name, value, low in (
            ("length", length, 1),
            ("burn_in", burn_in, 0),
            ("bootstrap", bootstrap, 0),
            ("dilation", dilation, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"Sequence: {name} must be an int >= {low}, got {value!r}")
        if episode_boundary not in _BOUNDARIES:
            raise ValueError(
                f"Sequence: episode_boundary must be one of {_BOUNDARIES}, got {episode_boundary!r}"
            )
        self.length = length
        self.episode_boundary = episode_boundary
        self.done_key = done_key
        self.burn_in = burn_in
        self.bootstrap = bootstrap
        self.dilation = dilation

    @property
    def window(self) -> int:
        """Records per anchor: ``burn_in + length + bootstrap``."""
        return self.burn_in + self.length + self.bootstrap

    def _episode_ends(self, storage: Storage, n: int) -> torch.Tensor:
        """``ends[i]``: record ``i`` is the last of its episode (``[n]`` bool)."""
        ends = torch.zeros(n, dtype=torch.bool)
        if self.done_key is not None:
            if not isinstance(storage, TensorStorage):
                raise TypeError(
                    f"Sequence reads episode ends from {nested_key_str(self.done_key)}: it needs "
                    f"a TensorStorage of TensorDicts, got {type(storage).__name__} (or pass "
                    f"done_key=None)"
                )
            column = storage._column(self.done_key)[:n]
            ends = column.reshape(n, -1).any(-1).cpu()
        if n and n >= storage.slots:
            # A full circular storage: the newest record is followed by the oldest one.
            ends[(storage._cursor - 1) % n] = True
        return ends

    def expand(
        self, index: Index, info: dict[NestedKey, Any], storage: Storage
    ) -> tuple[Index, dict[NestedKey, Any]]:
        if isinstance(index, tuple) or storage.ndim != 1:
            raise ValueError(f"Sequence supports storages with ndim=1, got ndim={storage.ndim}")
        n = len(storage)
        anchors = torch.as_tensor(index, dtype=torch.long).reshape(-1).cpu()
        b, w = anchors.numel(), self.window
        offsets = (torch.arange(w) - self.burn_in) * self.dilation
        pos = anchors[:, None] + offsets[None, :]
        lo = torch.zeros_like(pos)
        hi = torch.full_like(pos, n - 1)
        if self.episode_boundary != "include_reset":
            ends = self._episode_ends(storage, n).long()
            # before[i]: episode ends among records [0, i); records a and p share an episode
            # when no end lies in [min(a, p), max(a, p)).
            before = torch.zeros(n + 1, dtype=torch.long)
            before[1:] = torch.cumsum(ends, 0)
            # The anchor's episode spans [start, stop]: start after the last end before it,
            # stop at the first end at or after it.
            ends_before = before[anchors]
            ends_idx = torch.nonzero(ends).reshape(-1)
            start = torch.zeros(b, dtype=torch.long)
            has_prev = ends_before > 0
            start[has_prev] = ends_idx[ends_before[has_prev] - 1] + 1
            stop = torch.full((b,), n - 1, dtype=torch.long)
            has_next = ends_before < ends_idx.numel()
            stop[has_next] = ends_idx[ends_before[has_next]]
            lo, hi = start[:, None].expand_as(pos), stop[:, None].expand_as(pos)
        valid = (pos >= lo) & (pos <= hi)
        records = torch.minimum(torch.maximum(pos, lo), hi)
        learning = torch.zeros(w, dtype=torch.bool)
        learning[self.burn_in : self.burn_in + self.length] = True
        info = dict(info)
        for key, value in list(info.items()):
            if isinstance(value, torch.Tensor) and value.ndim and value.shape[0] == b:
                info[key] = value.repeat_interleave(w, 0)
        if WEIGHT in info and not isinstance(info[WEIGHT], torch.Tensor):
            info.pop(WEIGHT)
        info[VALIDITY_MASK] = valid.reshape(-1)
        info[LEARNING_MASK] = (valid & learning[None, :]).reshape(-1)
        info[ANCHOR_INDEX] = anchors.repeat_interleave(w)
        return records.reshape(-1), info

    def postprocess(self, data: Any, info: dict[NestedKey, Any]) -> Any:
        valid = info.get(VALIDITY_MASK)
        if valid is None:
            return data
        if self.episode_boundary == "pad" and not bool(valid.all()):
            drop = ~valid.to(data.device) if data.device is not None else ~valid

            def zero(x: torch.Tensor) -> torch.Tensor:
                return x.masked_fill(drop.reshape(-1, *([1] * (x.ndim - 1))), 0)

            if isinstance(data, TensorDictBase):
                data = data.apply(zero)
            elif isinstance(data, torch.Tensor):
                data = zero(data)
        if isinstance(data, TensorDictBase):
            for key in (VALIDITY_MASK, LEARNING_MASK, ANCHOR_INDEX):
                value = info[key]
                data.set(key, value.to(data.device) if data.device is not None else value)
        return data

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(length={self.length}, episode_boundary="
            f"{self.episode_boundary!r}, done_key={self.done_key!r}, burn_in={self.burn_in}, "
            f"bootstrap={self.bootstrap}, dilation={self.dilation})"
        )
