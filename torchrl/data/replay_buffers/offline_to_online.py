"""Offline-to-online training: mix a fixed offline dataset with freshly collected data.

:class:`OfflineToOnlineReplayBuffer` keeps both apart and draws a fixed share of every batch from
each; :func:`prefill_replay_buffer` copies the offline data into one ordinary buffer instead.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from torchrl.data.replay_buffers.replay_buffers import ReplayBuffer
from torchrl.data.replay_buffers.storages import LazyTensorStorage, Storage
from torchrl.data.replay_buffers.utils import nested_key_str

__all__ = ["OfflineToOnlineReplayBuffer", "prefill_replay_buffer"]


def _check_dataset(dataset: Any, name: str, **dataset_kwargs: Any) -> Any:
    if isinstance(dataset, str):
        # "d4rl:<id>" or "d4rl/<id>": a family of the dataset registry and a dataset id
        from torchrl.data.datasets.registry import load_dataset

        family, sep, dataset_id = dataset.partition(":")
        return load_dataset(f"{family}/{dataset_id}" if sep else dataset, **dataset_kwargs)
    if dataset_kwargs:
        raise TypeError(
            f"unexpected keyword arguments {sorted(dataset_kwargs)}: dataset keyword "
            f"arguments only apply to dataset ids, and {name} is a buffer"
        )
    if not (hasattr(dataset, "sample") and hasattr(dataset, "__len__")):
        raise TypeError(
            f"{name} must be a ReplayBuffer (an object with sample() and len()), got "
            f"{type(dataset).__name__}"
        )
    return dataset


def _flatten(batch: Any, source: str) -> TensorDictBase:
    if not isinstance(batch, TensorDictBase):
        raise TypeError(
            f"the {source} buffer sampled a {type(batch).__name__}; offline-to-online mixing needs "
            f"TensorDict samples"
        )
    return batch.reshape(-1) if batch.batch_dims != 1 else batch


class OfflineToOnlineReplayBuffer:
    """A replay buffer drawing each batch from a fixed offline dataset and a growing online buffer.

    :meth:`extend` writes to the online buffer only (the offline dataset is never changed).
    :meth:`sample` takes exactly ``round(offline_fraction * batch_size)`` items from the offline
    dataset and the rest from the online buffer, concatenated into one ``[batch_size]``
    TensorDict (offline items first). While the online buffer is empty every item comes from the
    offline dataset; with ``offline_fraction=0`` every item comes from the online buffer. Set
    :attr:`offline_fraction` during training to anneal it. Both sources must hold the same entries
    (they do when both come from the same env, in TED layout).

    Args:
        offline_dataset: the offline data, a :class:`ReplayBuffer` (or any object with
            ``sample(n)`` and ``len()``), or a dataset id (``"d4rl:<id>"``,
            ``"minari:<id>"``, any family of :func:`~torchrl.data.datasets.load_dataset`)
            opened with ``dataset_kwargs``.

    Keyword Args:
        online_storage: storage of the online buffer; exclusive with ``online_capacity``.
        online_capacity: capacity of a :class:`LazyTensorStorage` built for the online buffer.
        offline_fraction: share of every batch drawn offline, in ``[0, 1]``. Defaults to ``0.5``.
        batch_size: default batch size of :meth:`sample`.
        transform: a callable run on every mixed batch.
        **dataset_kwargs: passed to the dataset reader with a dataset id (``root=``,
            ``data_file=``, ...); refused otherwise.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> offline = ReplayBuffer(storage=LazyTensorStorage(100))
        >>> _ = offline.extend(TensorDict(obs=torch.zeros(100, 3), batch_size=[100]))
        >>> rb = OfflineToOnlineReplayBuffer(offline, online_capacity=1000, batch_size=8)
        >>> _ = rb.extend(TensorDict(obs=torch.ones(10, 3), batch_size=[10]))
        >>> batch = rb.sample()
        >>> batch.shape, int(batch["obs"][:, 0].sum())  # 4 offline zeros, 4 online ones
        (torch.Size([8]), 4)
    """

    def __init__(
        self,
        offline_dataset: Any,
        *,
        online_storage: Storage | None = None,
        online_capacity: int | None = None,
        offline_fraction: float = 0.5,
        batch_size: int | None = None,
        transform: Any = None,
        **dataset_kwargs: Any,
    ) -> None:
        self._offline = _check_dataset(offline_dataset, "offline_dataset", **dataset_kwargs)
        if online_storage is not None and online_capacity is not None:
            raise ValueError("online_storage and online_capacity are exclusive: pass one")
        if online_storage is None:
            if online_capacity is None:
                raise ValueError(
                    "pass online_storage= (a Storage) or online_capacity= (an int) for the "
                    "online buffer"
                )
            if not isinstance(online_capacity, int) or online_capacity <= 0:
                raise ValueError(f"online_capacity must be a positive int, got {online_capacity!r}")
            online_storage = LazyTensorStorage(online_capacity)
        elif not isinstance(online_storage, Storage):
            raise TypeError(
                f"online_storage must be a Storage, got {type(online_storage).__name__}"
            )
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        self._online = ReplayBuffer(storage=online_storage)
        self._batch_size = batch_size
        self._transform = transform
        self._offline_fraction = 0.0
        self.offline_fraction = offline_fraction

    @property
    def offline_fraction(self) -> float:
        """Share of every batch drawn from the offline dataset, in ``[0, 1]`` (settable)."""
        return self._offline_fraction

    @offline_fraction.setter
    def offline_fraction(self, value: float) -> None:
        value = float(value)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"offline_fraction must be in [0, 1], got {value}")
        self._offline_fraction = value

    @property
    def offline_buffer(self) -> Any:
        """The offline dataset (never written to)."""
        return self._offline

    @property
    def online_buffer(self) -> ReplayBuffer:
        """The buffer :meth:`extend` writes to."""
        return self._online

    @property
    def batch_size(self) -> int | None:
        """Default batch size of :meth:`sample`."""
        return self._batch_size

    def __len__(self) -> int:
        return len(self._offline) + len(self._online)

    def add(self, data: Any) -> Any:
        """Writes one item to the online buffer.

        Args:
            data: the item.
        """
        return self._online.add(data)

    def extend(self, data: Any) -> Any:
        """Writes a batch of items to the online buffer and returns their indices there.

        Args:
            data: items stacked along the first dim.
        """
        return self._online.extend(data)

    def split(self, batch_size: int) -> tuple[int, int]:
        """How many items of a batch of ``batch_size`` come from each source.

        Args:
            batch_size: the batch size.

        Returns:
            ``(n_offline, n_online)``.
        """
        if len(self._online) == 0:
            return batch_size, 0
        n_offline = round(self._offline_fraction * batch_size)
        return n_offline, batch_size - n_offline

    def sample(self, batch_size: int | None = None) -> TensorDictBase:
        """Draws a mixed batch (offline items first).

        Args:
            batch_size: number of items; the buffer's ``batch_size`` when omitted.

        Returns:
            A TensorDict of batch size ``[batch_size]``.

        Raises:
            RuntimeError: no batch size is known, or a source needed for the batch is empty.
            KeyError: the offline and online samples do not hold the same entries.
        """
        if batch_size is None:
            batch_size = self._batch_size
            if batch_size is None:
                raise RuntimeError(
                    "no batch size: pass sample(batch_size) or build the buffer with batch_size="
                )
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        n_offline, n_online = self.split(batch_size)
        if n_offline and len(self._offline) == 0:
            raise RuntimeError("the offline dataset is empty: nothing to draw offline items from")
        parts = []
        if n_offline:
            parts.append(_flatten(self._offline.sample(n_offline), "offline"))
        if n_online:
            parts.append(_flatten(self._online.sample(n_online), "online"))
        if len(parts) == 2:
            # Sample indices point into two different storages: meaningless once mixed.
            parts = [p.exclude("index") if "index" in p.keys() else p for p in parts]
            keys = [set(p.keys(include_nested=True, leaves_only=True)) for p in parts]
            if keys[0] != keys[1]:
                only_off = sorted(map(nested_key_str, keys[0] - keys[1]))
                only_on = sorted(map(nested_key_str, keys[1] - keys[0]))
                raise KeyError(
                    f"offline and online samples hold different entries (offline only: "
                    f"{only_off}, online only: {only_on}); store online data with the offline "
                    f"dataset's entries"
                )
            batch: TensorDictBase = torch.cat([parts[0], parts[1].to(parts[0].device)], 0)  # type: ignore[assignment]
        else:
            batch = parts[0]
        if self._transform is not None:
            batch = self._transform(batch)
        return batch

    def empty(self) -> None:
        """Empties the online buffer (the offline dataset stays)."""
        self._online.empty()

    def state_dict(self) -> dict[str, Any]:
        """The online buffer's state and the offline fraction (the offline dataset is not saved)."""
        return {"online": self._online.state_dict(), "offline_fraction": self._offline_fraction}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned.

        Args:
            state_dict: the saved state.
        """
        missing = {"online", "offline_fraction"} - set(state_dict)
        if missing:
            raise KeyError(f"state_dict lacks {sorted(missing)}")
        self._online.load_state_dict(state_dict["online"])
        self.offline_fraction = state_dict["offline_fraction"]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(offline={len(self._offline)}, online={len(self._online)}, "
            f"offline_fraction={self._offline_fraction})"
        )


def prefill_replay_buffer(
    rb: ReplayBuffer, dataset: Any, n_samples: int | None = None, chunk_size: int = 1000
) -> ReplayBuffer:
    """Copies the items of an offline dataset into a replay buffer, in storage order.

    A simpler alternative to :class:`OfflineToOnlineReplayBuffer` when one flat buffer is wanted
    (no per-batch ratio; the offline data is copied).

    Args:
        rb: the buffer to fill (anything with ``extend``).
        dataset: the offline data: a :class:`ReplayBuffer` (or an object with ``len()`` and
            indexing by a tensor of indices), or an iterable of TensorDict batches such as a
            collector (then ``n_samples`` is required and each batch is flattened), or a dataset
            id (``"d4rl:<id>"``, ``"minari:<id>"``) opened with its reader's defaults.
        n_samples: how many items to copy (the first ones); all by default.
        chunk_size: items copied per ``extend``. Defaults to ``1000``.

    Returns:
        ``rb``, filled in place.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> dataset = ReplayBuffer(storage=LazyTensorStorage(500))
        >>> _ = dataset.extend(TensorDict(obs=torch.randn(500, 4), batch_size=[500]))
        >>> online = ReplayBuffer(storage=LazyTensorStorage(10_000))
        >>> len(prefill_replay_buffer(online, dataset, n_samples=200))
        200
    """
    if isinstance(dataset, str):
        dataset = _check_dataset(dataset, "dataset")
    if not hasattr(rb, "extend"):
        raise TypeError(f"rb must be a replay buffer (with extend), got {type(rb).__name__}")
    if not isinstance(chunk_size, int) or chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    if n_samples is not None and (not isinstance(n_samples, int) or n_samples < 0):
        raise ValueError(f"n_samples must be a non-negative int, got {n_samples!r}")
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        if hasattr(dataset, "__iter__"):
            return _prefill_from_iterable(rb, dataset, n_samples, chunk_size)
        raise TypeError(
            f"dataset must be a ReplayBuffer (len() and indexing) or an iterable of TensorDict "
            f"batches (e.g. a collector), got {type(dataset).__name__}"
        )
    total = len(dataset) if n_samples is None else min(len(dataset), n_samples)
    storage = getattr(dataset, "storage", None)
    ndim = getattr(storage, "ndim", 1)
    shape = getattr(storage, "shape", None) if ndim != 1 else None
    for start in range(0, total, chunk_size):
        flat = torch.arange(start, min(start + chunk_size, total))
        if shape is not None:
            # A multi-dim storage takes one index per dim: items in row-major order of its shape.
            index = torch.stack(torch.unravel_index(flat, tuple(shape)), -1)
            rb.extend(dataset[index])
        else:
            rb.extend(dataset[flat])
    return rb


def _prefill_from_iterable(rb: Any, batches: Any, n_samples: int | None, chunk_size: int) -> Any:
    """Extends ``rb`` with the flattened batches of ``batches`` until ``n_samples`` items."""
    if n_samples is None:
        raise ValueError(
            "n_samples is required when dataset is an iterable of batches (e.g. a collector): "
            "it may never end"
        )
    copied = 0
    for batch in batches:
        if copied >= n_samples:
            break
        if not isinstance(batch, TensorDictBase):
            raise TypeError(
                f"dataset yielded a {type(batch).__name__}, expected TensorDict batches"
            )
        flat = batch.reshape(-1) if batch.batch_dims != 1 else batch
        flat = flat[: n_samples - copied]
        for start in range(0, flat.shape[0], chunk_size):
            rb.extend(flat[start : start + chunk_size])
        copied += flat.shape[0]
    return rb
