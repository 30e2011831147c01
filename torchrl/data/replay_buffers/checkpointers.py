"""Storage checkpointers: how a storage is written to disk and read back.

Every storage has a ``checkpointer`` attribute; ``storage.dumps(path)`` and ``storage.loads(path)``
(and a replay buffer's ``dumps``/``loads``) go through it. The defaults keep each storage's own
file format (:class:`ListStorageCheckpointer`, :class:`TensorStorageCheckpointer`,
:class:`CompressedListStorageCheckpointer`, :class:`StorageEnsembleCheckpointer`); the others save
transition data (TED layout, ``("next", ...)`` entries next to the root ones) in a compact form
that drops the ``("next", obs)`` copies an env's step makes of the next root observation
(:class:`FlatStorageCheckpointer`, :class:`NestedStorageCheckpointer`, and
:class:`H5StorageCheckpointer` into one HDF5 file).

Loading is done in two steps so that a replay buffer can check every part before it changes
any: :meth:`StorageCheckpointerBase.prepare_load` reads and validates (the storage is unchanged)
and :meth:`StorageCheckpointerBase.apply_load` installs what was read. Nothing is unpickled
unless ``trusted=True``.

This module sits below ``storages`` (which imports it): it works on storages through their
methods and never imports them.
"""

from __future__ import annotations

import importlib.util
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import DONE, NEXT, REWARD, TERMINATED, TRUNCATED
from torchrl._types import NestedKey
from torchrl._utils import import_optional
from torchrl.data.replay_buffers.utils import (
    FORMAT_VERSION,
    atomic_write_bytes,
    atomic_write_json,
    check_format_version,
    encode_header,
    nested_key_str,
    open_storage_dir,
    read_json,
    replace_dir,
    tensor_leaves,
)

__all__ = [
    "CompressedListStorageCheckpointer",
    "FlatStorageCheckpointer",
    "H5StorageCheckpointer",
    "ListStorageCheckpointer",
    "NestedStorageCheckpointer",
    "StorageCheckpointerBase",
    "StorageEnsembleCheckpointer",
    "TensorStorageCheckpointer",
]

_has_h5py = importlib.util.find_spec("h5py") is not None

Hook = Callable[[Any, Path], Any]


class StorageCheckpointerBase(ABC):
    """Base class of the storage checkpointers: ``dumps(storage, path)`` and ``loads(storage, path)``.

    Subclasses implement :meth:`dumps` and either :meth:`loads` or the two loading steps
    :meth:`prepare_load` (read and validate, change nothing) and :meth:`apply_load`. Save hooks
    (``hook(data, path) -> data``) transform the data before it is written, load hooks the data
    read before it is stored, for the checkpointers that support them.

    Examples:
        A checkpointer that stores a :class:`~torchrl.data.ListStorage` of numbers as JSON:

        >>> import json, tempfile, torch
        >>> from pathlib import Path
        >>> from torchrl.data import ListStorage
        >>> class JSONCheckpointer(StorageCheckpointerBase):
        ...     def dumps(self, storage, path):
        ...         items = [storage.get(i) for i in range(len(storage))]
        ...         (Path(path) / "items.json").write_text(json.dumps(items))
        ...     def loads(self, storage, path, *, trusted=False):
        ...         items = json.loads((Path(path) / "items.json").read_text())
        ...         storage.set(torch.arange(len(items)), items)
        >>> storage, restored = ListStorage(10), ListStorage(10)
        >>> storage.checkpointer = restored.checkpointer = JSONCheckpointer()
        >>> storage.set(torch.arange(3), [1.5, 2.5, 3.5])
        >>> with tempfile.TemporaryDirectory() as path:
        ...     storage.dumps(path)
        ...     restored.loads(path)
        >>> restored.get(2)
        3.5
    """

    def __init__(self) -> None:
        self._save_hooks: list[Hook] = []
        self._load_hooks: list[Hook] = []

    def register_save_hook(self, hook: Hook) -> None:
        """Adds ``hook(data, path) -> data``, run on the data before it is written.

        Args:
            hook: a callable taking the data and the destination path, returning the data.
        """
        if not callable(hook):
            raise TypeError(f"a save hook must be callable, got {type(hook).__name__}")
        self._save_hooks.append(hook)

    def register_load_hook(self, hook: Hook) -> None:
        """Adds ``hook(data, path) -> data``, run on the data read before it is stored.

        Args:
            hook: a callable taking the data and the source path, returning the data.
        """
        if not callable(hook):
            raise TypeError(f"a load hook must be callable, got {type(hook).__name__}")
        self._load_hooks.append(hook)

    def _run_hooks(self, hooks: list[Hook], data: Any, path: Path) -> Any:
        for hook in hooks:
            data = hook(data, path)
        return data

    @abstractmethod
    def dumps(self, storage: Any, path: str | Path) -> None:
        """Writes ``storage`` into the directory (or file) ``path``."""

    def loads(self, storage: Any, path: str | Path, *, trusted: bool = False) -> None:
        """Reads what :meth:`dumps` wrote at ``path`` into ``storage``.

        Args:
            storage: the storage to fill.
            path: where :meth:`dumps` wrote.
            trusted: allow unpickling arbitrary objects (only for files you wrote yourself).
        """
        self.apply_load(storage, self.prepare_load(storage, Path(path), trusted))

    def prepare_load(self, storage: Any, path: Path, trusted: bool) -> Any:
        """Reads and validates the saved storage at ``path``; ``storage`` is left unchanged.

        The default defers everything to :meth:`loads` (for checkpointers that only implement
        it): such a checkpointer validates nothing ahead of time.
        """
        return ("deferred", path, trusted)

    def apply_load(self, storage: Any, prepared: Any) -> None:
        """Installs what :meth:`prepare_load` returned into ``storage``."""
        _, path, trusted = prepared
        if type(self).loads is StorageCheckpointerBase.loads:
            raise NotImplementedError(
                f"{type(self).__name__} implements neither loads nor prepare_load/apply_load"
            )
        self.loads(storage, path, trusted=trusted)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _check_kind(
    checkpointer: StorageCheckpointerBase, storage: Any, kinds: tuple[str, ...]
) -> None:
    kind = getattr(storage, "_checkpoint_kind", None)
    if kind not in kinds:
        raise TypeError(
            f"{type(checkpointer).__name__} saves {' or '.join(kinds)} storages, got a "
            f"{type(storage).__name__}"
        )


class _NativeCheckpointer(StorageCheckpointerBase):
    """Uses the storage's own file format (``_native_dumps`` / ``_native_prepare``)."""

    _kinds: tuple[str, ...] = ()

    def dumps(self, storage: Any, path: str | Path) -> None:
        _check_kind(self, storage, self._kinds)
        storage._native_dumps(Path(path), self._save_hooks)

    def prepare_load(self, storage: Any, path: Path, trusted: bool) -> Any:
        _check_kind(self, storage, self._kinds)
        return storage._native_prepare(Path(path), trusted, self._load_hooks)

    def apply_load(self, storage: Any, prepared: Any) -> None:
        storage._native_apply(prepared)

    def loads(self, storage: Any, path: str | Path, *, trusted: bool = False) -> None:
        self.apply_load(storage, self.prepare_load(storage, Path(path), trusted))


class ListStorageCheckpointer(_NativeCheckpointer):
    """The default checkpointer of :class:`~torchrl.data.replay_buffers.storages.ListStorage`.

    Items are saved with ``torch.save`` in ``items.pt``; TensorDicts of tensors are saved as plain
    containers so that they load safely, other objects need ``loads(..., trusted=True)``. Hooks
    see the list of items.

    Examples:
        >>> import tempfile
        >>> from torchrl.data.replay_buffers import ListStorage
        >>> storage = ListStorage(10)
        >>> storage.set(torch.arange(2), [torch.zeros(1), torch.ones(1)])
        >>> path = tempfile.mkdtemp()
        >>> ListStorageCheckpointer().dumps(storage, path)
        >>> other = ListStorage(10)
        >>> ListStorageCheckpointer().loads(other, path)
        >>> len(other)
        2
    """

    _kinds = ("list",)


class TensorStorageCheckpointer(_NativeCheckpointer):
    """The default checkpointer of the tensor storages: memory-mapped files.

    Used by ``TensorStorage``, ``LazyTensorStorage`` and ``LazyMemmapStorage``. Writes the stored TensorDict (or tensor) as memory-mapped files with a small header and a
    JSON layout file; a ``LazyMemmapStorage`` maps the saved files in place when loading. Save
    hooks see the whole stored data (all slots); load hooks see the data read (not supported
    for ``LazyMemmapStorage``, which maps files without copying them).

    Examples:
        >>> import tempfile
        >>> from torchrl.data.replay_buffers import LazyTensorStorage
        >>> storage = LazyTensorStorage(4)
        >>> storage.set(torch.arange(2), torch.arange(2.0))
        >>> path = tempfile.mkdtemp()
        >>> TensorStorageCheckpointer().dumps(storage, path)
        >>> other = LazyTensorStorage(4)
        >>> TensorStorageCheckpointer().loads(other, path)
        >>> other.get(torch.arange(2)).tolist()
        [0.0, 1.0]
    """

    _kinds = ("tensor",)


class CompressedListStorageCheckpointer(_NativeCheckpointer):
    """The default checkpointer of ``CompressedListStorage``: compressed bytes in one flat file.

    The compressed bytes of every stored tensor are concatenated in ``data.bin`` (written through
    a memory map) and described in ``metadata.json`` (offsets, dtypes, shapes, keys, batch
    sizes): loading unpickles nothing. Hooks are not supported (the data is compressed).

    Examples:
        >>> import tempfile
        >>> from torchrl.data.replay_buffers import CompressedListStorage
        >>> storage = CompressedListStorage(4)
        >>> storage.set(torch.arange(2), torch.zeros(2, 3))
        >>> path = tempfile.mkdtemp()
        >>> storage.checkpointer.dumps(storage, path)
        >>> other = CompressedListStorage(4)
        >>> storage.checkpointer.loads(other, path)
        >>> other.get(1).shape
        torch.Size([3])
    """

    _kinds = ("compressed",)


class StorageEnsembleCheckpointer(StorageCheckpointerBase):
    """The default checkpointer of ``StorageEnsemble``: each storage in ``storage_<i>/``.

    Each member storage is saved and loaded by its own checkpointer; all of them are read and
    validated before any is changed.

    Examples:
        >>> import tempfile
        >>> from torchrl.data.replay_buffers import LazyTensorStorage, StorageEnsemble
        >>> ensemble = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
        >>> ensemble[0].set(torch.arange(2), torch.zeros(2))
        >>> path = tempfile.mkdtemp()
        >>> StorageEnsembleCheckpointer().dumps(ensemble, path)
        >>> other = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
        >>> StorageEnsembleCheckpointer().loads(other, path)
        >>> len(other[0]), len(other[1])
        (2, 0)
    """

    def dumps(self, storage: Any, path: str | Path) -> None:
        _check_kind(self, storage, ("ensemble",))
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for i, member in enumerate(storage.storages):
            member.dumps(path / f"storage_{i}")
        atomic_write_json(
            path / "storage.json",
            {
                "format_version": FORMAT_VERSION,
                "kind": "ensemble",
                "class": type(storage).__name__,
                "storages": [type(s).__name__ for s in storage.storages],
            },
        )

    def prepare_load(self, storage: Any, path: Path, trusted: bool) -> Any:
        _check_kind(self, storage, ("ensemble",))
        meta = read_json(path / "storage.json")
        check_format_version(meta, path / "storage.json")
        names = [type(s).__name__ for s in storage.storages]
        if meta.get("kind") != "ensemble" or meta.get("storages") != names:
            raise ValueError(
                f"{path} holds {meta.get('storages', meta.get('class'))}, which does not match "
                f"this ensemble of {names}"
            )
        return [
            member._prepare_dump(path / f"storage_{i}", trusted)
            for i, member in enumerate(storage.storages)
        ]

    def apply_load(self, storage: Any, prepared: Any) -> None:
        for member, plan in zip(storage.storages, prepared):
            member._apply_dump(plan)


# ---------------------------------------------------------------------------------------------
# Compact transition (TED) checkpointers
# ---------------------------------------------------------------------------------------------


def _keys_of(keys: Sequence[NestedKey] | NestedKey | None, default: tuple[str, ...]) -> list[str]:
    """The last names of ``keys`` (entries are matched by their last key under ``"next"``)."""
    if keys is None:
        return list(default)
    if isinstance(keys, str):
        keys = [keys]
    return [_leaf(k) for k in keys]


def _leaf(key: NestedKey) -> str:
    return key if isinstance(key, str) else key[-1]


def _ends(td: TensorDictBase, done_keys: list[str], filled: int, cursor: int) -> torch.Tensor:
    """``[rows, filled]`` bool: where the transition's ``("next", ...)`` values must be kept.

    They are kept where an episode ends (any done flag), at the newest slot (``filled - 1`` or,
    once the ring buffer has wrapped, ``cursor - 1``) and where no next slot exists.
    """
    rows = td.batch_size[:-1].numel()
    keep = torch.zeros(rows, filled, dtype=torch.bool)
    nxt = td.get(NEXT, None)
    if isinstance(nxt, TensorDictBase):
        for key, value in tensor_leaves(nxt):
            if key[-1] in done_keys:
                keep |= value.reshape(rows, filled, -1).bool().any(-1)
    keep[:, filled - 1] = True
    keep[:, (cursor - 1) % filled] = True
    return keep


def _compact(
    td: TensorDictBase, filled: int, cursor: int, done_keys: list[str], reward_keys: list[str]
) -> tuple[TensorDict, TensorDict, torch.Tensor, list[str]]:
    """Splits ``td`` (``[*lead, filled]``) into what is saved: ``(main, kept_next, keep, keys)``.

    ``("next", k)`` entries that repeat a root entry ``k`` shifted by one step are dropped
    except where ``keep`` is set; they are checked to be such copies first.
    """
    batch = td.batch_size
    rows = batch[:-1].numel()
    nxt = td.get(NEXT, None)
    main = td.copy()
    kept = TensorDict({}, batch_size=[])
    compacted: list[str] = []
    if not isinstance(nxt, TensorDictBase) or filled == 0:
        return main.to_tensordict(), kept, torch.zeros(rows, filled, dtype=torch.bool), compacted
    keep = _ends(td, done_keys, filled, cursor)
    skip = {*done_keys, *reward_keys}
    flat_keep = keep.reshape(-1)
    next_out = main.get(NEXT).copy()
    values: dict[str, torch.Tensor] = {}
    for key in list(nxt.keys(True, True)):
        key_t = (key,) if isinstance(key, str) else tuple(key)
        if key_t[-1] in skip or td.get(key_t, None) is None:
            continue
        nv, root = nxt.get(key_t), td.get(key_t)
        if not isinstance(nv, torch.Tensor) or not isinstance(root, torch.Tensor):
            continue
        if nv.shape != root.shape:
            continue
        nv2 = nv.reshape(rows, filled, *nv.shape[len(batch) :])
        root2 = root.reshape(rows, filled, *root.shape[len(batch) :])
        inner = ~keep[:, :-1]
        if bool(inner.any()) and not torch.equal(nv2[:, :-1][inner], root2[:, 1:][inner]):
            raise ValueError(
                f"('next', {nested_key_str(key)!s}) is not the root {nested_key_str(key)} of the "
                f"following step within an episode (e.g. a multi-step transform): this "
                f"checkpointer would lose it; use TensorStorageCheckpointer instead"
            )
        name = "/".join(key_t)
        values[name] = nv2.reshape(rows * filled, *nv2.shape[2:])[flat_keep]
        next_out = next_out.exclude(key_t)
        compacted.append(name)
    main.set(NEXT, next_out)
    if values:
        kept = TensorDict(values, batch_size=[int(flat_keep.sum())])
    return main.to_tensordict(), kept, keep, compacted


def _expand(
    main: TensorDictBase, kept: TensorDictBase, keep: torch.Tensor, compacted: list[str]
) -> TensorDictBase:
    """The inverse of :func:`_compact`."""
    if not compacted:
        return main
    batch = main.batch_size
    rows, filled = keep.shape
    flat_keep = keep.reshape(-1)
    out = main.clone()
    for name in compacted:
        key_t = tuple(name.split("/"))
        root = main.get(key_t)
        root2 = root.reshape(rows, filled, *root.shape[len(batch) :])
        shifted = torch.empty_like(root2)
        shifted[:, :-1] = root2[:, 1:]
        flat = shifted.reshape(rows * filled, *root2.shape[2:])
        flat[flat_keep] = kept.get(name).to(flat.dtype)
        out.set((NEXT, *key_t), flat.reshape(root.shape))
    return out


def _save_td_dir(td: TensorDictBase, directory: Path) -> None:
    """Writes ``td`` as a tensor-storage directory (memmap + header + layout), atomically."""

    def fill(tmp: Path) -> None:
        if not td.is_empty():
            td.memmap(prefix=tmp / "data", copy_existing=True)
        atomic_write_bytes(tmp / "header.bin", encode_header(0, 0))
        atomic_write_json(
            tmp / "storage.json",
            {
                "format_version": FORMAT_VERSION,
                "kind": "tensordict",
                "class": "TensorDict",
                "allocated": not td.is_empty(),
                "batch_size": list(td.batch_size),
            },
        )

    replace_dir(directory, fill)


def _load_td_dir(directory: Path, trusted: bool) -> TensorDictBase:
    data, meta, _, _, _ = open_storage_dir(directory, trusted)
    if data is None:
        return TensorDict({}, batch_size=meta.get("batch_size", []))
    return data.to_tensordict() if isinstance(data, TensorDictBase) else data


class _TEDCheckpointer(StorageCheckpointerBase):
    """Shared logic of the compact (TED) checkpointers: compaction and two-step loading."""

    _layout = "flat"

    def __init__(
        self,
        done_keys: Sequence[NestedKey] | None = None,
        reward_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__()
        self.done_keys = _keys_of(done_keys, (DONE, TERMINATED, TRUNCATED))
        self.reward_keys = _keys_of(reward_keys, (REWARD,))

    def _state(self, storage: Any, path: Path) -> tuple[TensorDictBase, dict[str, Any]]:
        _check_kind(self, storage, ("tensor",))
        state = storage.state_dict()
        data = state["storage"]
        if data is not None and not isinstance(data, TensorDictBase):
            raise TypeError(
                f"{type(self).__name__} saves storages of TensorDicts; this one holds plain "
                f"tensors: use TensorStorageCheckpointer"
            )
        filled, cursor = int(state["filled"]), int(state["cursor"])
        meta = {
            "format_version": FORMAT_VERSION,
            "kind": self._layout,
            "class": type(storage).__name__,
            "filled": filled,
            "cursor": cursor,
            "ndim": storage.ndim,
            "allocated": data is not None,
        }
        if data is None:
            return TensorDict({}, batch_size=[]), meta
        ndim = storage.ndim
        meta["shape"] = list(data.batch_size[:ndim])
        data = data[(slice(None),) * (ndim - 1) + (slice(0, filled),)]
        data = self._run_hooks(self._save_hooks, data, path)
        return data, meta

    def _split(self, data: TensorDictBase, meta: dict[str, Any]) -> Any:
        main, kept, keep, compacted = _compact(
            data, meta["filled"], meta["cursor"], self.done_keys, self.reward_keys
        )
        meta["compacted"] = compacted
        return main, kept, keep

    def _finish_prepare(
        self, storage: Any, meta: dict[str, Any], path: Path, data: TensorDictBase | None
    ) -> Any:
        if not meta["allocated"] or data is None:
            return storage._prepare_state({"storage": None, "filled": 0, "cursor": 0})
        data = self._run_hooks(self._load_hooks, data, path)
        shape = meta["shape"]
        ndim = meta["ndim"]
        if ndim != storage.ndim:
            raise ValueError(f"{path} holds a storage with ndim={ndim}, not {storage.ndim}")
        filled = meta["filled"]
        expected = [*shape[:-1], filled]
        if not isinstance(data, TensorDictBase) or list(data.batch_size[:ndim]) != expected:
            got = list(data.batch_size) if isinstance(data, TensorDictBase) else type(data).__name__
            raise ValueError(
                f"{path}: the saved data ({got}) does not match its layout (batch {expected})"
            )
        # Unwritten slots come back as zeros: they are never read.
        full = data.apply(
            lambda v: torch.zeros(*shape, *v.shape[ndim:], dtype=v.dtype), batch_size=shape
        )
        assert full is not None  # apply returns None only when told to work in place
        full[(slice(None),) * (ndim - 1) + (slice(0, filled),)] = data
        return storage._prepare_state({"storage": full, "filled": filled, "cursor": meta["cursor"]})

    def apply_load(self, storage: Any, prepared: Any) -> None:
        storage._apply_state(prepared)


class FlatStorageCheckpointer(_TEDCheckpointer):
    """Saves a TensorDict storage of transitions compactly, as flat memory-mapped tensors.

    ``("next", k)`` entries that repeat the root ``k`` of the following step (observations in
    TED data) are written only where an episode ends and at the newest item; loading rebuilds
    them. Done and reward entries are always written in full. Unlike TorchRL's, this
    checkpointer checks that the dropped entries really are such copies and refuses to save
    otherwise (e.g. after a multi-step transform).

    Args:
        done_keys: the done entries under ``"next"`` marking episode ends (``"done"``,
            ``"terminated"``, ``"truncated"`` by default; matched by their last key).
        reward_keys: entries under ``"next"`` never compacted (``"reward"`` by default).

    Examples:
        >>> import tempfile
        >>> from tensordict import TensorDict
        >>> from torchrl.data.replay_buffers import FlatStorageCheckpointer, LazyTensorStorage
        >>> obs = torch.arange(5.0)
        >>> td = TensorDict({"obs": obs[:4], ("next", "obs"): obs[1:],
        ...     ("next", "done"): torch.zeros(4, 1, dtype=torch.bool)}, [4])
        >>> storage = LazyTensorStorage(8)
        >>> storage.set(torch.arange(4), td)
        >>> storage.checkpointer = FlatStorageCheckpointer()
        >>> path = tempfile.mkdtemp()
        >>> storage.dumps(path)
        >>> other = LazyTensorStorage(8)
        >>> other.checkpointer = FlatStorageCheckpointer()
        >>> other.loads(path)
        >>> other.get(torch.arange(4))["next", "obs"].tolist()
        [1.0, 2.0, 3.0, 4.0]
    """

    _layout = "flat"

    def dumps(self, storage: Any, path: str | Path) -> None:
        path = Path(path)
        data, meta = self._state(storage, path)

        def fill(tmp: Path) -> None:
            if meta["allocated"]:
                main, kept, keep = self._split(data, meta)
                _save_td_dir(main, tmp / "main")
                _save_td_dir(kept, tmp / "next_kept")
                np.save(tmp / "keep.npy", keep.numpy())
            atomic_write_json(tmp / "storage.json", meta)

        replace_dir(path, fill)

    def prepare_load(self, storage: Any, path: Path, trusted: bool) -> Any:
        _check_kind(self, storage, ("tensor",))
        meta = read_json(path / "storage.json")
        check_format_version(meta, path / "storage.json")
        if meta.get("kind") != self._layout:
            raise ValueError(
                f"{path} was not written by {type(self).__name__} (kind {meta.get('kind')!r})"
            )
        data = None
        if meta["allocated"]:
            main = _load_td_dir(path / "main", trusted)
            kept = _load_td_dir(path / "next_kept", trusted)
            keep = torch.from_numpy(np.load(path / "keep.npy", allow_pickle=False))
            data = _expand(main, kept, keep, meta["compacted"])
        return self._finish_prepare(storage, meta, path, data)


class NestedStorageCheckpointer(FlatStorageCheckpointer):
    """Like :class:`FlatStorageCheckpointer`, with the data also cut into episodes on disk.

    Next to the flat files, ``episodes.json`` lists where each stored episode starts and ends
    (the offsets of a nested, jagged layout: one entry per row and episode), so that a reader
    can take episodes out of the memory-mapped files without loading the rest. Loading gives
    back exactly the storage that was saved.

    Args:
        done_keys: the done entries under ``"next"`` marking episode ends (``"done"``,
            ``"terminated"``, ``"truncated"`` by default).
        reward_keys: entries under ``"next"`` never compacted (``"reward"`` by default).

    Examples:
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> from tensordict import TensorDict
        >>> from torchrl.data.replay_buffers import LazyTensorStorage, NestedStorageCheckpointer
        >>> done = torch.tensor([[False], [True], [False]])
        >>> td = TensorDict({"obs": torch.tensor([0.0, 1.0, 5.0]),
        ...     ("next", "obs"): torch.tensor([1.0, 2.0, 6.0]), ("next", "done"): done}, [3])
        >>> storage = LazyTensorStorage(4)
        >>> storage.set(torch.arange(3), td)
        >>> storage.checkpointer = NestedStorageCheckpointer()
        >>> path = Path(tempfile.mkdtemp())
        >>> storage.dumps(path)
        >>> json.loads((path / "episodes.json").read_text())["row_start_stop"]
        [[0, 0, 2], [0, 2, 3]]
    """

    _layout = "nested"

    def dumps(self, storage: Any, path: str | Path) -> None:
        super().dumps(storage, path)
        path = Path(path)
        meta = read_json(path / "storage.json")
        episodes: list[list[int]] = []
        if meta["allocated"] and meta["filled"]:
            keep = np.load(path / "keep.npy", allow_pickle=False)
            for row, flags in enumerate(keep):
                start = 0
                for end in np.flatnonzero(flags).tolist():
                    episodes.append([row, start, end + 1])
                    start = end + 1
        atomic_write_json(path / "episodes.json", {"row_start_stop": episodes})


class H5StorageCheckpointer(_TEDCheckpointer):
    """Saves a TensorDict storage of transitions compactly in one HDF5 file (needs ``h5py``).

    The same compaction as :class:`FlatStorageCheckpointer`; every entry becomes one HDF5
    dataset (``main/<key path>``, ``next_kept/<key path>``) and the layout is written in the
    file's attributes as JSON. Nothing is unpickled when loading.

    Args:
        checkpoint_file: the file name inside the directory given to ``dumps``/``loads``; when
            that path itself ends with ``.h5`` it is the file and this name is ignored.
        done_keys: the done entries under ``"next"`` marking episode ends.
        reward_keys: entries under ``"next"`` never compacted.
        h5_kwargs: keyword arguments of ``h5py.File.create_dataset`` (e.g.
            ``{"compression": "gzip"}``), as a dict or pairs.

    Raises:
        ImportError: ``h5py`` is not installed (``pip install "torchrl[h5py]"``).

    Examples:
        >>> from torchrl.data.replay_buffers import H5StorageCheckpointer, LazyTensorStorage
        >>> storage = LazyTensorStorage(100)
        >>> storage.checkpointer = H5StorageCheckpointer()  # doctest: +SKIP
        >>> storage.dumps("/tmp/run/buffer.h5")  # doctest: +SKIP
    """

    _layout = "h5"

    def __init__(
        self,
        *,
        checkpoint_file: str = "checkpoint.h5",
        done_keys: Sequence[NestedKey] | None = None,
        reward_keys: Sequence[NestedKey] | None = None,
        h5_kwargs: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None,
    ) -> None:
        if not _has_h5py:
            raise ImportError(
                'H5StorageCheckpointer needs h5py, which is not installed: pip install "torchrl[h5py]"'
            )
        super().__init__(done_keys=done_keys, reward_keys=reward_keys)
        self.checkpoint_file = checkpoint_file
        self.h5_kwargs = dict(h5_kwargs or {})

    def _file(self, path: Path) -> Path:
        return path if path.suffix == ".h5" else path / self.checkpoint_file

    def dumps(self, storage: Any, path: str | Path) -> None:
        h5py = import_optional("h5py", "h5py")
        path = Path(path)
        target = self._file(path)
        data, meta = self._state(storage, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        with h5py.File(tmp, "w") as f:
            if meta["allocated"]:
                main, kept, keep = self._split(data, meta)
                for group, td in (("main", main), ("next_kept", kept)):
                    grp = f.create_group(group)
                    grp.attrs["batch_size"] = [int(b) for b in td.batch_size]
                    for key, value in tensor_leaves(td):
                        array = value.detach().cpu()
                        dtype = str(array.dtype).replace("torch.", "")
                        if array.dtype == torch.bfloat16:
                            array = array.view(torch.int16)
                        ds = grp.create_dataset("/".join(key), data=array.numpy(), **self.h5_kwargs)
                        ds.attrs["dtype"] = dtype
                f.create_dataset("keep", data=keep.numpy())
            f.attrs["meta"] = json.dumps(meta)
        tmp.replace(target)

    def prepare_load(self, storage: Any, path: Path, trusted: bool) -> Any:
        h5py = import_optional("h5py", "h5py")
        _check_kind(self, storage, ("tensor",))
        target = self._file(Path(path))
        if not target.exists():
            raise FileNotFoundError(f"{target} does not exist: nothing was saved there")
        with h5py.File(target, "r") as f:
            meta = _json_loads(f.attrs["meta"])
            check_format_version(meta, target)
            data = None
            if meta["allocated"]:
                groups = {}
                for group in ("main", "next_kept"):
                    grp = f[group]
                    values: dict[tuple[str, ...], torch.Tensor] = {}

                    def visit(name: str, obj: Any, values: dict = values) -> None:
                        if isinstance(obj, h5py.Dataset):
                            array = torch.from_numpy(np.asarray(obj[()]))
                            dtype = getattr(torch, obj.attrs["dtype"])
                            if dtype == torch.bfloat16:
                                array = array.view(torch.bfloat16)
                            values[tuple(name.split("/"))] = array.to(dtype)

                    grp.visititems(visit)
                    td = TensorDict({}, batch_size=list(grp.attrs["batch_size"]))
                    for key, value in values.items():
                        td.set(key, value)
                    groups[group] = td
                keep = torch.from_numpy(np.asarray(f["keep"][()]))
                data = _expand(groups["main"], groups["next_kept"], keep, meta["compacted"])
        return self._finish_prepare(storage, meta, path, data)


def _json_loads(text: Any) -> Any:
    return json.loads(text if isinstance(text, str) else bytes(text).decode())
