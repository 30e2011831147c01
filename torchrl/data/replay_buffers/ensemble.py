"""Ensembles: several replay buffers sampled as one (``ReplayBufferEnsemble``) and the storage,
sampler and writer views it is made of."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, lazy_stack

from torchrl._keys import INDEX
from torchrl._types import IndexLike, NestedKey
from torchrl.data.replay_buffers.checkpointers import (
    StorageCheckpointerBase,
    StorageEnsembleCheckpointer,
)
from torchrl.data.replay_buffers.replay_buffers import ReplayBuffer
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.storages import Index, LoadPlan, Storage
from torchrl.data.replay_buffers.utils import (
    FORMAT_VERSION,
    atomic_write_json,
    check_format_version,
    identity,
    read_json,
)
from torchrl.data.replay_buffers.writers import RoundRobinWriter, Writer

__all__ = ["ReplayBufferEnsemble", "SamplerEnsemble", "StorageEnsemble", "WriterEnsemble"]


class StorageEnsemble(Storage):
    """The storages of several replay buffers, read together (see ``ReplayBufferEnsemble``).

    ``ensemble[i]`` is the i-th storage. :meth:`get` takes ``(buffer_id, index)`` pairs and
    returns ``(buffer_id, data)`` pairs: the data of each storage passes through its transform
    when ``transforms`` is given. Writing is refused: extend the member buffers instead.

    Args:
        *storages: the storages.
        transforms: one callable (or ``None``) per storage, applied to the data read from it.

    Examples:
        >>> from torchrl.data.replay_buffers import ListStorage
        >>> ensemble = StorageEnsemble(ListStorage(4), ListStorage(4))
        >>> ensemble[1].set(0, "a")
        >>> len(ensemble), ensemble.get((1, 0))
        (1, (1, 'a'))
    """

    _checkpoint_kind = "ensemble"

    def __init__(
        self, *storages: Storage, transforms: Sequence[Callable[[Any], Any] | None] | None = None
    ) -> None:
        super().__init__(None)
        if not storages:
            raise ValueError("StorageEnsemble needs at least one storage")
        for i, storage in enumerate(storages):
            if not isinstance(storage, Storage):
                raise TypeError(f"storage {i} is a {type(storage).__name__}, not a Storage")
        if transforms is not None and len(transforms) != len(storages):
            raise ValueError(
                f"got {len(transforms)} transforms for {len(storages)} storages: give one per "
                f"storage (None for no transform)"
            )
        self._storages = tuple(storages)
        self._transforms = list(transforms) if transforms is not None else [None] * len(storages)

    def _default_checkpointer(self) -> StorageCheckpointerBase | None:
        return StorageEnsembleCheckpointer()

    @property
    def storages(self) -> tuple[Storage, ...]:
        """The member storages."""
        return self._storages

    @property
    def max_size(self) -> int:
        """The summed capacity of the members."""
        return sum(s.max_size for s in self._storages)

    def __len__(self) -> int:
        return sum(len(s) for s in self._storages)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, int):
            return self._storages[index]
        raise TypeError(
            f"StorageEnsemble is indexed by an int (the storage), got {type(index).__name__}; "
            f"use get((buffer_id, index)) to read items"
        )

    def _read(self, buffer_id: int, index: Any) -> tuple[int, Any]:
        if not 0 <= buffer_id < len(self._storages):
            raise IndexError(
                f"buffer id {buffer_id} is out of range for {len(self._storages)} storages"
            )
        data = self._storages[buffer_id].get(index)
        transform = self._transforms[buffer_id]
        if transform is not None:
            data = transform(data)
        return buffer_id, data

    def get(self, index: Any) -> Any:
        """Reads ``(buffer_id, index)`` (or a list of such pairs); returns ``(buffer_id, data)``."""
        if isinstance(index, tuple) and len(index) == 2 and isinstance(index[0], int):
            return self._read(int(index[0]), index[1])
        return [self._read(int(bid), idx) for bid, idx in index]

    def set(self, index: int | slice | torch.Tensor, data: Any) -> None:
        raise RuntimeError(
            "StorageEnsemble cannot be written to: extend one of its buffers (rb_ensemble[i])"
        )

    def _empty(self) -> None:
        for storage in self._storages:
            storage._empty()

    def state_dict(self) -> dict[str, Any]:
        return {"storages": [s.state_dict() for s in self._storages]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the states of all members (all validated before any is applied)."""
        self._apply_state(self._prepare_state(state_dict))

    def _prepare_state(self, state_dict: dict[str, Any]) -> LoadPlan:
        states = state_dict.get("storages") if isinstance(state_dict, dict) else None
        if not isinstance(states, list) or len(states) != len(self._storages):
            raise ValueError(
                f"a StorageEnsemble state holds a 'storages' list of {len(self._storages)} states"
            )
        plans = [s._prepare_state(st) for s, st in zip(self._storages, states)]
        return LoadPlan(None, None, None, plans)

    def _apply_state(self, plan: LoadPlan) -> None:
        for storage, member in zip(self._storages, plan.payload):
            storage._apply_state(member)

    def __repr__(self) -> str:
        inner = ", ".join(repr(s) for s in self._storages)
        return f"{type(self).__name__}({inner})"


class SamplerEnsemble(Sampler):
    """The samplers of several replay buffers, and how a batch is split among the buffers.

    Used by ``ReplayBufferEnsemble``. A batch of ``batch_size`` items is made of sub-batches of
    equal size, one per chosen buffer: every buffer once with ``sample_from_all=True``, else
    ``num_buffer_sampled`` buffers drawn (with replacement) with probabilities ``p`` (uniform
    when ``None``). ``batch_size`` must divide evenly.

    :meth:`sample` returns a list of ``(buffer_id, index)`` pairs (what
    :meth:`StorageEnsemble.get <torchrl.data.replay_buffers.storages.StorageEnsemble.get>` reads)
    and an info dict with the ``"buffer_ids"`` tensor and each member's ``"infos"``.

    Args:
        *samplers: one sampler per buffer.
        p: the sampling weights of the buffers (normalized here).
        sample_from_all: sample every buffer for every batch (not with ``p``).
        num_buffer_sampled: how many buffers each batch draws when ``sample_from_all`` is
            ``False``; defaults to the number of buffers.

    Examples:
        >>> from torchrl.data.replay_buffers import ListStorage, RandomSampler, StorageEnsemble
        >>> storages = StorageEnsemble(ListStorage(4), ListStorage(4))
        >>> storages[0].set(0, "a"); storages[1].set(0, "b")
        >>> sampler = SamplerEnsemble(RandomSampler(), RandomSampler(), sample_from_all=True)
        >>> index, info = sampler.sample(storages, 4)
        >>> info["buffer_ids"].tolist(), [len(i) for _, i in index]
        ([0, 1], [2, 2])
    """

    def __init__(
        self,
        *samplers: Sampler,
        p: Sequence[float] | torch.Tensor | None = None,
        sample_from_all: bool = False,
        num_buffer_sampled: int | None = None,
    ) -> None:
        if not samplers:
            raise ValueError("SamplerEnsemble needs at least one sampler")
        for i, sampler in enumerate(samplers):
            if not isinstance(sampler, Sampler):
                raise TypeError(f"sampler {i} is a {type(sampler).__name__}, not a Sampler")
        self._samplers = tuple(samplers)
        n = len(samplers)
        if sample_from_all and p is not None:
            raise ValueError("sample_from_all=True samples every buffer: it cannot take p")
        if p is not None:
            weights = torch.as_tensor(p, dtype=torch.float64).reshape(-1)
            if weights.numel() != n:
                raise ValueError(f"p has {weights.numel()} weights for {n} buffers")
            if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
                raise ValueError(f"p must hold finite weights >= 0, got {weights.tolist()}")
            if float(weights.sum()) <= 0:
                raise ValueError("p must have a positive sum")
            self.p: torch.Tensor | None = weights / weights.sum()
        else:
            self.p = None
        if num_buffer_sampled is not None and (
            not isinstance(num_buffer_sampled, int) or num_buffer_sampled <= 0
        ):
            raise ValueError(
                f"num_buffer_sampled must be a positive int, got {num_buffer_sampled!r}"
            )
        self.sample_from_all = bool(sample_from_all)
        self.num_buffer_sampled = num_buffer_sampled

    @property
    def samplers(self) -> tuple[Sampler, ...]:
        """The member samplers."""
        return self._samplers

    def __getitem__(self, index: int) -> Sampler:
        return self._samplers[index]

    def __len__(self) -> int:
        return len(self._samplers)

    def choose(self, batch_size: int) -> list[tuple[int, int]]:
        """Which buffers a batch comes from: ``[(buffer_id, sub-batch size), ...]``.

        Args:
            batch_size: the size of the whole batch.

        Raises:
            ValueError: ``batch_size`` does not split evenly among the chosen buffers.
        """
        n = len(self._samplers)
        if self.sample_from_all:
            ids = list(range(n))
        else:
            k = self.num_buffer_sampled if self.num_buffer_sampled is not None else n
            p = self.p if self.p is not None else torch.full((n,), 1.0 / n, dtype=torch.float64)
            ids = torch.multinomial(p, k, replacement=True, generator=self._generator).tolist()
        if batch_size % len(ids):
            raise ValueError(
                f"batch_size={batch_size} does not split evenly among the {len(ids)} buffers "
                f"sampled per batch"
            )
        each = batch_size // len(ids)
        return [(int(i), each) for i in ids]

    def sample(self, storage: Storage, batch_size: int) -> tuple[Any, dict[NestedKey, Any]]:
        storages = getattr(storage, "storages", None)
        if storages is None or len(storages) != len(self._samplers):
            raise TypeError(
                f"SamplerEnsemble samples a StorageEnsemble of {len(self._samplers)} storages, "
                f"got a {type(storage).__name__}"
            )
        index, infos = [], []
        plan = self.choose(batch_size)
        for bid, n in plan:
            idx, info = self._samplers[bid].sample(storages[bid], n)
            index.append((bid, idx))
            infos.append(info)
        return index, {"buffer_ids": torch.tensor([b for b, _ in plan]), "infos": infos}

    def _resume(self, storage: Storage) -> None:
        # Each member sampler follows its own buffer.
        return

    def state_dict(self) -> dict[str, Any]:
        return {"samplers": [s.state_dict() for s in self._samplers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._apply_state(self._check_state(state_dict))

    def _check_state(self, state_dict: dict[str, Any], plan: LoadPlan | None = None) -> Any:
        states = state_dict.get("samplers") if isinstance(state_dict, dict) else None
        if not isinstance(states, list) or len(states) != len(self._samplers):
            raise ValueError(
                f"a SamplerEnsemble state holds a 'samplers' list of {len(self._samplers)} states"
            )
        members = plan.payload if plan is not None and isinstance(plan.payload, list) else None
        return [
            s._check_state(st, members[i] if members is not None else None)
            for i, (s, st) in enumerate(zip(self._samplers, states))
        ]

    def _apply_state(self, checked: Any) -> None:
        for sampler, state in zip(self._samplers, checked):
            sampler._apply_state(state)

    def _empty(self) -> None:
        for sampler in self._samplers:
            sampler._empty()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({', '.join(repr(s) for s in self._samplers)}, "
            f"sample_from_all={self.sample_from_all}, num_buffer_sampled="
            f"{self.num_buffer_sampled})"
        )


class WriterEnsemble(Writer):
    """The writers of the buffers of a ``ReplayBufferEnsemble``; writing through it is refused.

    Extend a member buffer instead (``rb_ensemble[i].extend(data)``): its own writer then does
    the work.

    Args:
        *writers: one writer per buffer.

    Examples:
        >>> from torchrl.data.replay_buffers import RoundRobinWriter
        >>> ensemble = WriterEnsemble(RoundRobinWriter(), RoundRobinWriter())
        >>> ensemble[1]
        RoundRobinWriter(cursor=0, write_count=0)
    """

    def __init__(self, *writers: Writer) -> None:
        super().__init__()
        if not writers:
            raise ValueError("WriterEnsemble needs at least one writer")
        for i, writer in enumerate(writers):
            if not isinstance(writer, Writer):
                raise TypeError(f"writer {i} is a {type(writer).__name__}, not a Writer")
        self._writers = tuple(writers)

    @property
    def writers(self) -> tuple[Writer, ...]:
        """The member writers."""
        return self._writers

    def __getitem__(self, index: int) -> Writer:
        return self._writers[index]

    def __len__(self) -> int:
        return len(self._writers)

    def _refuse(self) -> RuntimeError:
        return RuntimeError(
            "a WriterEnsemble does not write: extend one of the ensemble's buffers "
            "(rb_ensemble[i].extend(data))"
        )

    def add(self, data: Any) -> int | Index | None:
        raise self._refuse()

    def extend(self, data: Any) -> Index:
        raise self._refuse()

    def _resume(self) -> None:
        # Each member writer follows its own buffer.
        return

    def _empty(self) -> None:
        for writer in self._writers:
            writer._empty()

    def state_dict(self) -> dict[str, Any]:
        return {"writers": [w.state_dict() for w in self._writers]}

    def _check_state(self, state_dict: dict[str, Any], plan: LoadPlan | None = None) -> Any:
        states = state_dict.get("writers") if isinstance(state_dict, dict) else None
        if not isinstance(states, list) or len(states) != len(self._writers):
            raise ValueError(
                f"a WriterEnsemble state holds a 'writers' list of {len(self._writers)} states"
            )
        members = plan.payload if plan is not None and isinstance(plan.payload, list) else None
        return [
            w._check_state(st, members[i] if members is not None else None)
            for i, (w, st) in enumerate(zip(self._writers, states))
        ]

    def _apply_state(self, checked: Any) -> None:
        for writer, state in zip(self._writers, checked):
            writer._apply_state(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(w) for w in self._writers)})"


class ReplayBufferEnsemble(ReplayBuffer):
    """Several replay buffers sampled together: each batch is made of sub-batches of members.

    Build it from buffers (``ReplayBufferEnsemble(rb0, rb1, ...)``) or from components
    (``storages=StorageEnsemble(...)``, ``samplers=SamplerEnsemble(...)``, optionally
    ``writers=WriterEnsemble(...)``). A batch of ``batch_size`` items has one sub-batch of equal
    size per chosen buffer (all of them with ``sample_from_all=True``, else
    ``num_buffer_sampled`` drawn with weights ``p``; see
    :class:`~torchrl.data.replay_buffers.samplers.SamplerEnsemble`). Each sub-batch is sampled
    by its member buffer (with the member's sampler, collate function and transforms). In
    TensorDict sub-batches, ``"index"`` becomes a TensorDict holding ``"buffer_ids"`` (the
    member it came from) and ``"index"`` (its index there); sub-batches are then lazily stacked
    (``batch_size [k, batch_size // k]``), or given to ``collate_fn`` when one is set. Other
    data comes back as a list of sub-batches. The ensemble's ``transform`` runs last.

    Writing to the ensemble is refused: extend a member, ``rb_ensemble[i].extend(data)``.

    Args:
        *rbs: the member buffers.
        storages: a ``StorageEnsemble``, when no buffers are given.
        samplers: a ``SamplerEnsemble`` (members' samplers), when no buffers are given.
        writers: a ``WriterEnsemble`` (round-robin writers by default), when no buffers are given.
        transform: run on every batch.
        batch_size: the default batch size of :meth:`sample`.
        collate_fn: combines the list of sub-batches (lazy stack / list by default).
        collate_fns: one collate function per member, when built from components.
        p: sampling weights of the members.
        sample_from_all: sample every member in every batch.
        num_buffer_sampled: members per batch when not ``sample_from_all``.
        generator: random generator choosing the members.
        shared: not supported (raises when ``True``).

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data.replay_buffers import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb0 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        >>> rb1 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        >>> _ = rb0.extend(TensorDict(x=torch.zeros(4), batch_size=[4]))
        >>> _ = rb1.extend(TensorDict(x=torch.ones(4), batch_size=[4]))
        >>> rbe = ReplayBufferEnsemble(rb0, rb1, batch_size=6, sample_from_all=True)
        >>> sample = rbe.sample()
        >>> sample.batch_size, sample["index", "buffer_ids"][:, 0].tolist()
        (torch.Size([2, 3]), [0, 1])
    """

    def __init__(
        self,
        *rbs: ReplayBuffer,
        storages: StorageEnsemble | None = None,
        samplers: SamplerEnsemble | None = None,
        writers: WriterEnsemble | None = None,
        transform: Callable[[Any], Any] | None = None,
        batch_size: int | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        collate_fns: Sequence[Callable[[Any], Any]] | None = None,
        p: Sequence[float] | torch.Tensor | None = None,
        sample_from_all: bool = False,
        num_buffer_sampled: int | None = None,
        generator: torch.Generator | None = None,
        shared: bool = False,
    ) -> None:
        if shared:
            raise NotImplementedError(
                "ReplayBufferEnsemble(shared=True) is not supported: share the member storages "
                "(e.g. LazyMemmapStorage) instead"
            )
        if rbs:
            if storages is not None or samplers is not None or writers is not None:
                raise ValueError(
                    "give either replay buffers or storages/samplers/writers, not both"
                )
            if collate_fns is not None:
                raise ValueError("collate_fns is for components; member buffers have their own")
            for i, rb in enumerate(rbs):
                if not isinstance(rb, ReplayBuffer) or isinstance(rb, ReplayBufferEnsemble):
                    raise TypeError(f"member {i} is a {type(rb).__name__}, not a ReplayBuffer")
            members = list(rbs)
        else:
            if storages is None or samplers is None:
                raise ValueError(
                    "ReplayBufferEnsemble needs replay buffers, or storages= and samplers="
                )
            if not isinstance(storages, StorageEnsemble):
                raise TypeError(f"storages must be a StorageEnsemble, got {type(storages)}")
            if not isinstance(samplers, SamplerEnsemble):
                raise TypeError(f"samplers must be a SamplerEnsemble, got {type(samplers)}")
            n = len(storages.storages)
            if writers is None:
                writers = WriterEnsemble(*[RoundRobinWriter() for _ in range(n)])
            if not isinstance(writers, WriterEnsemble):
                raise TypeError(f"writers must be a WriterEnsemble, got {type(writers)}")
            if len(samplers) != n or len(writers) != n:
                raise ValueError(
                    f"got {n} storages, {len(samplers)} samplers and {len(writers)} writers: "
                    f"give one of each per member"
                )
            if collate_fns is not None and len(collate_fns) != n:
                raise ValueError(f"got {len(collate_fns)} collate_fns for {n} members")
            members = [
                ReplayBuffer(
                    storage=storages[i],
                    sampler=samplers[i],
                    writer=writers[i],
                    collate_fn=collate_fns[i] if collate_fns is not None else None,
                )
                for i in range(n)
            ]
        self._rbs = members
        n = len(members)
        if storages is None:
            storages = StorageEnsemble(*[rb.storage for rb in members])
        if samplers is None:
            samplers = SamplerEnsemble(
                *[rb.sampler for rb in members],
                p=p,
                sample_from_all=sample_from_all,
                num_buffer_sampled=num_buffer_sampled,
            )
        elif p is not None or sample_from_all or num_buffer_sampled is not None:
            raise ValueError("p, sample_from_all and num_buffer_sampled belong to samplers=")
        if writers is None:
            writers = WriterEnsemble(*[rb.writer for rb in members])
        self._ensemble_collate = collate_fn
        super().__init__(
            storage=storages,
            sampler=samplers,
            writer=writers,
            collate_fn=identity,
            transform=transform,
            batch_size=batch_size,
            generator=generator,
        )
        assert len(self._rbs) == n

    @property
    def rbs(self) -> list[ReplayBuffer]:
        """The member buffers."""
        return list(self._rbs)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, int):
            return self._rbs[index]
        raise TypeError(
            f"ReplayBufferEnsemble is indexed by an int (the member buffer), got "
            f"{type(index).__name__}"
        )

    def __len__(self) -> int:
        return sum(len(rb) for rb in self._rbs)

    @property
    def write_count(self) -> int:
        """The items written to all members."""
        return sum(rb.write_count for rb in self._rbs)

    def add(self, data: Any) -> int | Index | None:
        raise RuntimeError(self._no_write)

    def extend(self, data: Any) -> Index:
        raise RuntimeError(self._no_write)

    def __setitem__(self, index: Any, data: Any) -> None:
        raise RuntimeError(self._no_write)

    _no_write = (
        "a ReplayBufferEnsemble is not written to directly: extend one of its members "
        "(rb_ensemble[i].extend(data))"
    )

    def update_priority(self, index: IndexLike, priority: float | torch.Tensor) -> None:
        """Not supported on the ensemble: update the member's priorities.

        Raises:
            RuntimeError: always; use ``rb_ensemble[buffer_id].update_priority(index, p)``.
        """
        raise RuntimeError(
            "update priorities on the member buffer: rb_ensemble[buffer_id].update_priority("
            "index, priority), with buffer_id and index from sample['index']"
        )

    def _sample_now(self, batch_size: int) -> tuple[Any, dict[NestedKey, Any], bool]:
        assert isinstance(self._sampler, SamplerEnsemble)
        with self._lock:
            plan = self._sampler.choose(batch_size)
        parts, indices, infos = [], [], []
        for bid, n in plan:
            data, info = self._rbs[bid].sample(n, return_info=True)
            index = info.get(INDEX)
            if isinstance(data, TensorDictBase):
                data = data.copy()
                entry: dict[str, torch.Tensor] = {
                    "buffer_ids": torch.full(data.batch_size, bid, dtype=torch.long)
                }
                flat = torch.stack(index, -1) if isinstance(index, tuple) else index
                if isinstance(flat, torch.Tensor) and flat.shape[: data.batch_dims] == (
                    data.batch_size
                ):
                    entry["index"] = flat
                data.set(INDEX, TensorDict(entry, batch_size=data.batch_size, device=data.device))
            parts.append(data)
            indices.append(index)
            infos.append(info)
        buffer_ids = torch.tensor([b for b, _ in plan])
        out: Any
        if self._ensemble_collate is not None:
            out = self._ensemble_collate(parts)
        elif all(isinstance(x, TensorDictBase) for x in parts):
            out = lazy_stack(parts, 0)
        else:
            out = parts
        if len(self._transforms):
            out = self._transforms(out)
        info_out: dict[NestedKey, Any] = {"buffer_ids": buffer_ids, INDEX: indices, "infos": infos}
        return out, info_out, False

    def empty(self) -> None:
        """Empties every member."""
        for rb in self._rbs:
            rb.empty()

    def state_dict(self) -> dict[str, Any]:
        """The members' states, under ``"rbs"``."""
        return {"rbs": [rb.state_dict() for rb in self._rbs]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the members' states; all are checked before any member changes.

        Raises:
            ValueError: the state does not hold one valid state per member (nothing changes).
        """
        states = state_dict.get("rbs") if isinstance(state_dict, dict) else None
        if not isinstance(states, list) or len(states) != len(self._rbs):
            raise ValueError(
                f"a ReplayBufferEnsemble state holds an 'rbs' list of {len(self._rbs)}"
            )
        checked = []
        for i, (rb, state) in enumerate(zip(self._rbs, states)):
            missing = [k for k in ("storage", "sampler", "writer") if k not in state]
            if missing:
                raise KeyError(f"the state of member {i} has no {', '.join(map(repr, missing))}")
            plan = rb._storage._prepare_state(state["storage"])
            checked.append(
                (
                    plan,
                    rb._sampler._check_state(state["sampler"], plan),
                    rb._writer._check_state(state["writer"], plan),
                )
            )
        for rb, (plan, sampler_state, writer_state) in zip(self._rbs, checked):
            rb._drain()
            with rb._lock:
                rb._storage._apply_state(plan)
                rb._sampler._apply_state(sampler_state)
                rb._writer._apply_state(writer_state)

    def dumps(self, path: str | Path) -> None:
        """Saves every member in ``path/rb_<i>`` (see :meth:`ReplayBuffer.dumps`).

        Args:
            path: a directory, created if needed.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for i, rb in enumerate(self._rbs):
            rb.dumps(path / f"rb_{i}")
        atomic_write_json(
            path / "ensemble.json",
            {
                "format_version": FORMAT_VERSION,
                "buffer": type(self).__name__,
                "members": [type(rb).__name__ for rb in self._rbs],
            },
        )

    def loads(self, path: str | Path, *, trusted: bool = False) -> None:
        """Restores the members saved by :meth:`dumps`; all are checked before any changes.

        Args:
            path: the directory given to :meth:`dumps`.
            trusted: allow arbitrary pickled objects (see :meth:`ReplayBuffer.loads`).
        """
        path = Path(path)
        meta = read_json(path / "ensemble.json")
        check_format_version(meta, path / "ensemble.json")
        names = [type(rb).__name__ for rb in self._rbs]
        if meta.get("members") != names:
            raise ValueError(f"{path} holds members {meta.get('members')}, this ensemble {names}")
        applies = [rb._prepare_load(path / f"rb_{i}", trusted) for i, rb in enumerate(self._rbs)]
        for rb, apply in zip(self._rbs, applies):
            rb._drain()
            apply()

    def __repr__(self) -> str:
        inner = ",\n    ".join(repr(rb) for rb in self._rbs)
        return f"{type(self).__name__}(\n    {inner},\n    sampler={self._sampler!r})"
