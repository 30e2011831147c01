"""Rollout storage: the steps of a rollout, stacked along a new last batch dim (time).

``EnvBase.rollout`` appends every step to a :class:`StepStore`. Steps of one rollout usually
share one structure, so their leaves are stacked key by key (a fraction of ``torch.stack`` on
TensorDicts), chunk by chunk as they come; steps whose structures differ fall back on
``torch.stack``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from torchrl._td_compat import entries, new_unchecked

__all__ = ["StepStore", "stack_steps"]


def stack_steps(tds: list[TensorDictBase]) -> TensorDictBase:
    """Stacks the steps of a rollout along a new last batch dim (time).

    Steps of a rollout share one structure, so the leaves are stacked key by key, which costs a
    fraction of ``torch.stack`` on TensorDicts; anything else falls back to ``torch.stack``.

    Args:
        tds: the steps, each of batch ``[*B]``.

    Returns:
        A TensorDict of batch ``[*B, len(tds)]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs._rollout import stack_steps
        >>> steps = [TensorDict(obs=torch.full((2, 3), float(t)), batch_size=[2]) for t in range(4)]
        >>> stack_steps(steps)["obs"].shape
        torch.Size([2, 4, 3])
    """
    first = tds[0]
    if type(first) is TensorDict and _unnamed(first):
        try:
            out = _stack_plain(tds, first.batch_dims)
        except (_Heterogeneous, RuntimeError):
            out = None
        if out is not None:
            return out
    return cast(TensorDictBase, torch.stack(tds, dim=-1))  # type: ignore[arg-type]


class _Heterogeneous(Exception):
    pass


class StepStore:
    """Collects the steps of a rollout and stacks them along a new last batch dim (time).

    Steps are stacked in chunks of :attr:`CHUNK` as they come (then the chunks concatenated), so
    that a long rollout keeps a few large tensors alive rather than thousands of small ones:
    those would be walked again and again by Python's garbage collector, whose cost grows with
    the objects alive in the process. Steps whose structures differ are kept and stacked at the
    end (``torch.stack``), as are all steps when ``lazy`` (a lazy stack is returned).

    Args:
        lazy: return a ``LazyStackedTensorDict`` of the steps instead of one TensorDict.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.envs._rollout import StepStore
        >>> store = StepStore()
        >>> for t in range(40):
        ...     store.append(TensorDict(obs=torch.full((3,), float(t))))
        >>> store.result()["obs"].shape
        torch.Size([40, 3])
    """

    CHUNK = 16

    def __init__(self, lazy: bool = False) -> None:
        self.lazy = lazy
        self.pending: list[TensorDictBase] = []
        self.chunks: list[TensorDict] = []

    def append(self, td: TensorDictBase) -> None:
        """Adds a step (a transition of batch ``[*B]``)."""
        pending = self.pending
        pending.append(td)
        if len(pending) >= self.CHUNK and not self.lazy:
            chunk = _try_stack_plain(pending)
            if chunk is None:
                self.lazy_chunks()
            else:
                self.chunks.append(chunk)
                self.pending = []

    def lazy_chunks(self) -> None:
        """Gives up chunking: the steps will be stacked at the end, all at once."""
        self.pending = self._all_steps()
        self.chunks = []
        self.lazy = True

    def _all_steps(self) -> list[TensorDictBase]:
        steps: list[TensorDictBase] = []
        for chunk in self.chunks:
            steps.extend(chunk.unbind(chunk.batch_dims - 1))
        return steps + self.pending

    def result(self, contiguous: bool = True) -> TensorDictBase:
        """The steps stacked (``contiguous``) or lazily stacked along a last batch dim."""
        if not contiguous:
            return LazyStackedTensorDict.lazy_stack(self._all_steps(), dim=-1)
        if not self.chunks:
            return stack_steps(self.pending)
        chunks = list(self.chunks)
        if self.pending:
            last = _try_stack_plain(self.pending)
            if last is None:
                return stack_steps(self._all_steps())
            chunks.append(last)
        try:
            return _cat_plain(chunks, chunks[0].batch_dims - 1)
        except (_Heterogeneous, RuntimeError):
            return stack_steps(self._all_steps())


def _try_stack_plain(tds: list[TensorDictBase]) -> TensorDict | None:
    first = tds[0]
    if type(first) is not TensorDict or not _unnamed(first):
        return None
    try:
        return _stack_plain(tds, first.batch_dims)
    except (_Heterogeneous, RuntimeError):
        return None


def _cat_plain(tds: list[TensorDict], dim: int) -> TensorDict:
    """Concatenates plain TensorDicts of one structure along batch dim ``dim``, leaf by leaf."""
    return _join_plain(tds, dim, torch.cat)


def _stack_plain(tds: list[TensorDictBase], dim: int) -> TensorDict:
    """Stacks plain TensorDicts of one structure along a new batch dim ``dim``, leaf by leaf."""
    return _join_plain(tds, dim, torch.stack)


def _join_plain(tds: Sequence[TensorDictBase], dim: int, join: Callable) -> TensorDict:
    # raises _Heterogeneous unless every TensorDict is plain and keyed like the first
    first = tds[0]
    if type(first) is not TensorDict:
        raise _Heterogeneous
    first_raw = entries(first)
    keys = first_raw.keys()
    raws = []
    for td in tds:
        if type(td) is not TensorDict:
            raise _Heterogeneous
        raw = entries(td)
        if raw.keys() != keys:
            raise _Heterogeneous
        raws.append(raw)
    out: dict[str, Any] = {}
    for key, value in first_raw.items():
        if isinstance(value, torch.Tensor):
            out[key] = join([raw[key] for raw in raws], dim)
        else:
            out[key] = _join_plain([raw[key] for raw in raws], dim, join)
    batch = list(first.batch_size)
    if join is torch.cat:
        batch[dim] = sum(td.batch_size[dim] for td in tds)
    else:
        batch.insert(dim, len(tds))
    return new_unchecked(
        cast(dict, out), batch_size=torch.Size(batch), device=first.device, nested=False
    )


def _unnamed(td: TensorDict) -> bool:
    """Whether no batch dim of ``td`` is named (names would be lost by a leaf-wise stack)."""
    return all(name is None for name in td.names)
