"""The preallocated ``[*B, T]`` batch of a collector and the writer that fills it step by step.

A collector allocates its batch once, from the structure of the first transition, and then copies
each step into the time slice ``t`` of every leaf. The slices are views computed once, so a step
costs one ``copy_`` per key and no TensorDict construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import COLLECTOR, DONE, NEXT, TRAJ_IDS, TRUNCATED

NestedKey = str | tuple[str, ...]

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
    device: torch.device | None,
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
        return torch.zeros(shape, dtype=value.dtype, device=device or value.device)

    def build(node: TensorDictBase, path: tuple[str, ...]) -> TensorDict:
        inner = list(node.batch_size)
        out = TensorDict(batch_size=[*inner[:nb], steps, *inner[nb:]], device=device)
        for key, value in node.items():
            sub = (*path, key)
            if isinstance(value, TensorDictBase):
                if not is_tensor_dict(value):
                    skipped.append(sub)
                    continue
                out._set_str(key, build(value, sub), inplace=False, validated=True)
            elif isinstance(value, torch.Tensor):
                out._set_str(key, zeros_like_step(value), inplace=False, validated=True)
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


def is_tensor_dict(value: Any) -> bool:
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

        def slices(tensor: torch.Tensor) -> Any:
            # A list of views and a time-major view both answer ``[t]`` with slice t.
            if precompute:
                return [tensor.select(batch_dims, t) for t in range(steps)]
            return tensor.movedim(batch_dims, 0)

        self.paths = paths
        self.root: list[tuple[str, Any]] = []
        self.next: list[tuple[str, Any]] = []
        self.deep: list[tuple[tuple[str, ...], Any]] = []
        for path in paths:
            views = slices(batch.get(path))
            if len(path) == 1:
                self.root.append((path[0], views))
            elif len(path) == 2 and path[0] == NEXT:
                self.next.append((path[1], views))
            else:
                self.deep.append((path, views))
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
                raw = td._tensordict
                for key, views in self.root:
                    views[t].copy_(raw[key])
                nxt = raw[NEXT]
                if self.next:
                    nraw = nxt._tensordict if type(nxt) is TensorDict else None
                    if nraw is None:
                        for key, views in self.next:
                            views[t].copy_(nxt.get(key))
                    else:
                        for key, views in self.next:
                            views[t].copy_(nraw[key])
            else:
                for key, views in self.root:
                    views[t].copy_(td.get(key))
                for key, views in self.next:
                    views[t].copy_(td.get((NEXT, key)))
            for path, views in self.deep:
                views[t].copy_(td.get(path))
        except (KeyError, RuntimeError) as err:
            raise self._explain(td, err) from err

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
