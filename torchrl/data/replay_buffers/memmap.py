"""LazyMemmapStorage: a tensor storage in memory-mapped files that survives its process."""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import MemoryMappedTensor, TensorDictBase

from torchrl._utils import warn_once
from torchrl.data.replay_buffers.storages import LoadPlan, TensorStorage, check_counters
from torchrl.data.replay_buffers.utils import (
    _alloc_like,
    _batch_shape,
    _encode_header,
    _open_dir,
    _plain,
    _replace_dir,
    _same_dir,
    atomic_write_json,
    read_json,
)

__all__ = ["LazyMemmapStorage"]


class LazyMemmapStorage(TensorStorage):
    """A lazy tensor storage whose items live in memory-mapped files (tensordict ``MemoryMappedTensor``).

    The files sit in ``scratch_dir`` (a temporary directory, removed with the storage, when
    ``None``). After every write, the item count and write position are stored in a small header
    file, after the data: a process killed in the middle of ``extend`` leaves the items written
    before intact, and :meth:`open` maps the directory again without copying it. Slots that were
    being overwritten at the time of the kill are reported as torn (``storage.torn_slots``).

    Args:
        max_size: the capacity in items.
        scratch_dir: directory of the files; must not already hold a storage unless ``existsok``.
        device: where sampled items are returned (files are always on CPU).
        ndim: ``2`` to store ``[n_envs, T]`` batches.
        existsok: replace a storage already in ``scratch_dir`` instead of raising.

    Examples:
        >>> import tempfile
        >>> from tensordict import TensorDict
        >>> path = tempfile.mkdtemp()
        >>> storage = LazyMemmapStorage(10, scratch_dir=path)
        >>> storage.set(torch.arange(3), TensorDict({"x": torch.arange(3.0)}, [3]))
        >>> reopened = LazyMemmapStorage.open(path)
        >>> len(reopened), reopened.get(torch.tensor([2]))["x"].tolist()
        (3, [2.0])
    """

    def __init__(
        self,
        max_size: int,
        *,
        scratch_dir: str | Path | None = None,
        device: torch.device | str = "cpu",
        ndim: int = 1,
        existsok: bool = False,
    ) -> None:
        super().__init__(None, max_size, device=torch.device("cpu"), ndim=ndim)
        self._out_device = torch.device(device)
        self._scratch_dir = Path(scratch_dir) if scratch_dir is not None else None
        self._existsok = existsok
        self._dir: Path | None = None
        self._header: np.memmap | None = None
        self._dirty: np.memmap | None = None
        self._finalizer: Any = None
        self.torn_slots = torch.zeros(0, dtype=torch.long)
        if self._scratch_dir is not None and (self._scratch_dir / "storage.json").exists():
            if not existsok:
                raise FileExistsError(
                    f"{self._scratch_dir} already holds a storage: reopen it with "
                    f"LazyMemmapStorage.open({str(self._scratch_dir)!r}) or pass existsok=True "
                    f"to overwrite it"
                )

    @property
    def scratch_dir(self) -> Path | None:
        """The directory holding the files (``None`` before the first write)."""
        return self._dir

    @classmethod
    def open(
        cls, path: str | Path, *, device: torch.device | str = "cpu", trusted: bool = False
    ) -> LazyMemmapStorage:
        """Maps the storage files in ``path`` again, without copying them.

        Writes go to the same files. Items whose write was interrupted are listed in
        ``torn_slots`` (a warning says so) and are overwritten first by a round-robin writer.

        Args:
            path: a ``scratch_dir`` of a :class:`LazyMemmapStorage`, or a directory written by a
                tensor storage's ``dumps``.
            device: where sampled items are returned.
            trusted: skip the check that the files hold plain tensors only.

        Returns:
            The reopened storage.
        """
        path = Path(path)
        meta = read_json(path / "storage.json")
        ndim = int(meta.get("ndim", 1))
        max_size = int(meta["max_size"])
        storage = cls(max_size, scratch_dir=None, device=device, ndim=ndim)
        storage._apply_dump(storage._prepare_dump(path, trusted))
        return storage

    # -- files ----------------------------------------------------------------------------------
    def _prepare_dump(self, path: Path, trusted: bool) -> LoadPlan:
        data, meta, filled, cursor, torn = _open_dir(path, trusted)
        self._check_meta(meta, path)
        if data is None:
            return LoadPlan(0, self._max_size if self.ndim > 1 else self.slots, 1, (path, None))
        batch = _batch_shape(data)
        lead = torch.Size(batch[: self.ndim - 1])
        slots = self._max_size // max(lead.numel(), 1)
        if len(batch) < self.ndim or batch[self.ndim - 1] != slots:
            raise ValueError(
                f"{path}: saved data of batch shape {tuple(batch)} does not fit a storage of "
                f"max_size={self._max_size} and ndim={self.ndim}"
            )
        if filled < slots:
            # The header stores the count before the cursor; below capacity they agree.
            cursor = filled
        filled, cursor = check_counters(filled, cursor, slots, str(path / "header.bin"))
        if torn is not None and torn.size:
            cursor = int(torn[0])
        return LoadPlan(filled, slots, lead.numel(), (path, (data, filled, cursor, torn)))

    def _apply_dump(self, plan: LoadPlan) -> None:
        path, content = plan.payload
        self._release_temp()
        self.torn_slots = torch.zeros(0, dtype=torch.long)
        self._dir = path
        if content is None:
            self._storage = None
            self._filled = self._cursor = 0
            self._version += 1
            return
        data, filled, cursor, torn = content
        self._memmap_data = data
        self._adopt(
            _plain(data) if isinstance(data, TensorDictBase) else data.as_subclass(torch.Tensor)
        )
        self._open_header(path)
        # With torn slots, the cursor is on the first of them, so that a round-robin writer
        # repairs them first.
        self._filled, self._cursor = filled, cursor
        self._version += 1
        if torn is not None and torn.size:
            self.torn_slots = torch.from_numpy(torn.astype(np.int64))
            warn_once(
                f"{path}: {torn.size} slot(s) were being written when the process stopped and "
                f"hold a mix of old and new data (slots {torn[:8].tolist()}...); they are "
                f"listed in storage.torn_slots and will be overwritten first"
            )

    def _open_header(self, path: Path) -> None:
        self._header = np.memmap(path / "header.bin", dtype=np.int64, mode="r+", shape=(4,))
        dirty_path = path / "dirty.bin"
        if not dirty_path.exists() or dirty_path.stat().st_size != self.slots:
            np.zeros(self.slots, dtype=np.uint8).tofile(dirty_path)
        self._dirty = np.memmap(dirty_path, dtype=np.uint8, mode="r+", shape=(self.slots,))

    def _release_temp(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None

    def _allocate(self, data: TensorDictBase | torch.Tensor) -> None:
        if self._scratch_dir is None:
            path = Path(tempfile.mkdtemp(prefix="torchrl_memmap_"))
            self._finalizer = weakref.finalize(self, shutil.rmtree, str(path), True)
        else:
            path = self._scratch_dir
            if (path / "storage.json").exists():
                if not self._existsok:
                    raise FileExistsError(f"{path} already holds a storage")
                (path / "storage.json").unlink()
                shutil.rmtree(path / "data", ignore_errors=True)
            path.mkdir(parents=True, exist_ok=True)
        nb = self.ndim
        shape = _batch_shape(data)
        lead = torch.Size(shape[: nb - 1])
        batch = torch.Size([*lead, self._slots_for(data)])
        if isinstance(data, TensorDictBase):
            template = _alloc_like(data, batch, nb, torch.device("cpu"), fill=False)
            mm = template.memmap_like(prefix=path / "data", existsok=True)
            plain = _plain(mm)
        else:
            mm = MemoryMappedTensor.zeros(
                (*batch, *data.shape[nb:]), dtype=data.dtype, filename=path / "data.memmap"
            )
            plain = mm.as_subclass(torch.Tensor)
        self._memmap_data = mm
        self._dir = path
        self._adopt(plain)
        (path / "header.bin").write_bytes(_encode_header(0, 0))
        np.zeros(self.slots, dtype=np.uint8).tofile(path / "dirty.bin")
        self._open_header(path)
        # storage.json comes last: a directory without it holds no storage.
        atomic_write_json(path / "storage.json", self._meta())

    # -- writes: dirty mark, data, header, clear mark ----------------------------------------------
    def _write(self, index: int | slice | torch.Tensor, data: Any, nb: int) -> None:
        dirty = self._dirty
        if dirty is None:
            super()._write(index, data, nb)
            return
        slots_np: Any = index.cpu().numpy() if isinstance(index, torch.Tensor) else index
        # The order is what makes a kill harmless: mark, write, publish the count, unmark.
        dirty[slots_np] = 1
        super()._write(index, data, nb)

    def _note_write(self, slot_index: int | slice | torch.Tensor) -> None:
        super()._note_write(slot_index)
        if self._header is not None and self._dirty is not None:
            self._header[1] = self._filled
            self._header[2] = self._cursor
            slots_np: Any = (
                slot_index.cpu().numpy() if isinstance(slot_index, torch.Tensor) else slot_index
            )
            self._dirty[slots_np] = 0
            if self.torn_slots.numel():
                keep = ~np.isin(self.torn_slots.numpy(), np.arange(self.slots)[slots_np])
                self.torn_slots = self.torn_slots[torch.from_numpy(keep)]

    def get(self, index: Any) -> Any:
        out = super().get(index)
        if self._out_device != self.device:
            out = out.to(self._out_device, non_blocking=True)
        return out

    def _empty(self) -> None:
        super()._empty()
        if self._header is not None:
            self._header[1] = 0
            self._header[2] = 0

    def _load_data(self, data: Any, filled: int, cursor: int) -> None:
        if self._storage is None:
            self._allocate(data)
        super()._load_data(data, filled, cursor)
        if self._dirty is not None:
            # Every slot was rewritten in full: none is torn (_write marked them all).
            self._dirty[:] = 0
        if self._header is not None:
            self._header[1] = self._filled
            self._header[2] = self._cursor

    # -- dumps / loads ------------------------------------------------------------------------------
    def dumps(self, path: str | Path) -> None:
        path = Path(path)
        if self._dir is not None and path.exists() and _same_dir(path, self._dir):
            # Already there: data and header are live; flush them and refresh the layout file.
            if self._header is not None and self._dirty is not None:
                self._header.flush()
                self._dirty.flush()
            atomic_write_json(path / "storage.json", self._meta())
            return
        if self._storage is None:
            _replace_dir(path, lambda tmp: self._dump_into(tmp))
            return

        source_dir = self._dir
        assert source_dir is not None  # allocated storages have their files

        def fill(tmp: Path) -> None:
            for name in ("data", "data.memmap", "header.bin", "dirty.bin"):
                src = source_dir / name
                if src.is_dir():
                    shutil.copytree(src, tmp / name)
                elif src.exists():
                    shutil.copyfile(src, tmp / name)
            atomic_write_json(tmp / "storage.json", self._meta())

        _replace_dir(path, fill)

    def loads(self, path: str | Path, *, trusted: bool = False) -> None:
        """Maps the files in ``path`` in place (no copy): later writes go to those files.

        Args:
            path: a directory written by ``dumps`` (or a ``scratch_dir``).
            trusted: skip the check that the files hold plain tensors only.
        """
        self._apply_dump(self._prepare_dump(Path(path), trusted))

    def _meta(self) -> dict[str, Any]:
        meta = super()._meta()
        meta["class"] = type(self).__name__
        return meta

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["scratch_dir"] = str(self._dir) if self._dir is not None else None
        return state
