"""Small helpers shared by storages, samplers, writers and buffers (not part of the public API)."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from tensordict import MemoryMappedTensor, TensorDict, TensorDictBase, is_non_tensor

from torchrl._td_compat import new_unchecked
from torchrl._types import DeviceLike, IndexLike, NestedKey

#: An item index: a tensor for ``ndim == 1`` storages, a tuple ``(lead..., t)`` otherwise.
Index = torch.Tensor | tuple[torch.Tensor, ...]
#: ``max_size`` of an unbounded ``ListStorage``.
UNBOUNDED = 2**62

#: Version of the on-disk layout written by ``dumps``; ``loads`` refuses other versions.
FORMAT_VERSION = 1

T = TypeVar("T")

_REDUCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "max": lambda x: x.amax(-1),
    "min": lambda x: x.amin(-1),
    "sum": lambda x: x.sum(-1),
    "mean": lambda x: x.mean(-1),
    "median": lambda x: x.median(-1).values,
}


def check_reduction(reduction: str) -> str:
    """Returns ``reduction`` if it names a supported reduction, else raises ``ValueError``."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {sorted(_REDUCTIONS)}, got {reduction!r}")
    return reduction


def reduce_trailing(values: torch.Tensor, batch_dims: int, reduction: str) -> torch.Tensor:
    """Reduces every dim of ``values`` past the first ``batch_dims`` with ``reduction``."""
    if values.ndim <= batch_dims:
        return values
    flat = values.reshape(*values.shape[:batch_dims], -1)
    if not flat.is_floating_point():
        flat = flat.double()
    return _REDUCTIONS[reduction](flat)


def as_long_tensor(index: IndexLike) -> torch.Tensor:
    """``index`` (int, sequence, numpy array or tensor) as an int64 CPU-or-same-device tensor."""
    if isinstance(index, torch.Tensor):
        if index.dtype == torch.bool:
            return index.nonzero().squeeze(-1)
        if index.dtype != torch.long:
            if index.is_floating_point():
                raise TypeError(f"indices must be integers, got a tensor of dtype {index.dtype}")
            index = index.long()
        return index
    if isinstance(index, np.ndarray):
        if index.dtype.kind not in "iub":
            raise TypeError(f"indices must be integers, got an array of dtype {index.dtype}")
        return as_long_tensor(torch.from_numpy(index))
    out = torch.as_tensor(index)
    if out.is_floating_point():
        raise TypeError(f"indices must be integers, got {index!r}")
    return as_long_tensor(out)


def atomic_write_bytes(path: str | Path, payload: bytes) -> None:
    """Writes ``payload`` to ``path`` through a temporary file and a rename.

    A crash leaves either the old file or the new one, never a half-written file.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | Path, obj: object) -> None:
    """Writes ``obj`` as JSON to ``path`` atomically (temporary file + rename)."""
    atomic_write_bytes(path, json.dumps(obj, indent=1, sort_keys=True).encode())


def atomic_torch_save(obj: object, path: str | Path) -> None:
    """``torch.save(obj, path)`` through a temporary file and a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def safe_torch_load(
    path: str | Path,
    *,
    trusted: bool = False,
    map_location: torch.device | str | dict[str, str] | None = None,
    hint: str = "",
    allow: Sequence[Any] = (),
) -> Any:
    """Reads a file written by ``torch.save`` without running code from it, unless ``trusted``.

    By default the file is read with ``torch.load(..., weights_only=True)``: tensors, numbers,
    strings, ``None`` and lists/tuples/dicts of those load; anything whose unpickling would call
    other Python code is refused. ``trusted=True`` reads arbitrary pickles (with a warning):
    unpickling can run any code, so use it only on files you wrote yourself.

    Args:
        path: the file.
        trusted: allow arbitrary Python objects (and so arbitrary code) in the file.
        map_location: passed to ``torch.load``.
        hint: how to pass ``trusted=True`` at the caller's level (for the error message).
        allow: more classes and functions safe loading may use (data types that run no code,
            e.g. numpy's array reconstruction for files saved by older versions).

    Returns:
        The object saved in the file.

    Raises:
        pickle.UnpicklingError: the file holds objects that safe loading refuses.

    Examples:
        >>> import tempfile
        >>> path = tempfile.mkdtemp() + "/state.pt"
        >>> torch.save({"cursor": 3, "perm": torch.arange(2)}, path)
        >>> safe_torch_load(path)
        {'cursor': 3, 'perm': tensor([0, 1])}
    """
    path = Path(path)
    if trusted:
        warnings.warn(
            f"loading {path} with trusted=True: unpickling runs whatever code the file names; "
            f"only load files you wrote yourself",
            UserWarning,
            stacklevel=3,
        )
        return torch.load(path, map_location=map_location, weights_only=False)
    try:
        with torch.serialization.safe_globals(list(allow)):
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        named = re.search(r"GLOBAL ([\w.]+)", str(err))
        reason = f" (it names the Python global {named.group(1)})" if named else f" ({err})"
        raise pickle.UnpicklingError(
            f"{path} holds Python objects that safe loading (torch.load(weights_only=True)) "
            f"refuses{reason}. Unpickling them could run "
            f"arbitrary code. If you wrote this file yourself and trust it, load it with "
            f"{hint or 'trusted=True'}."
        ) from None


def read_json(path: str | Path) -> Any:
    """Reads a JSON file, with an error naming the file when it is missing or corrupt."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} does not exist: nothing was saved there") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err})") from err


def check_format_version(meta: dict[str, Any], path: str | Path) -> None:
    """Raises ``ValueError`` when a saved file has another on-disk format version."""
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(
            f"{path} has format version {version!r}; this torchrl reads version {FORMAT_VERSION}"
        )


def default_collate(items: Sequence[Any]) -> Any:
    """Stacks a list of samples read from a :class:`ListStorage` into a batch.

    TensorDicts and tensors are stacked along a new first dim; anything else goes through
    :func:`torch.utils.data.default_collate`, and objects it cannot batch come back as a list.

    Examples:
        >>> default_collate([torch.zeros(2), torch.ones(2)]).shape
        torch.Size([2, 2])
        >>> default_collate(["a", "b"])
        ['a', 'b']
    """
    if not isinstance(items, (list, tuple)):
        return items
    if len(items) == 0:
        return items
    first = items[0]
    if isinstance(first, TensorDictBase):
        return torch.stack(list(items), 0)
    if isinstance(first, torch.Tensor):
        return torch.stack(list(items), 0)
    try:
        return torch.utils.data.default_collate(list(items))
    except TypeError:
        return list(items)


def identity(x: T) -> T:
    """Returns ``x`` unchanged (the collate function of tensor storages)."""
    return x


def nested_key_str(key: NestedKey) -> str:
    """A readable form of a (possibly nested) key for error messages."""
    return repr(key) if isinstance(key, str) else repr(tuple(key))


def td_new(source: dict[str, Any], batch_size: torch.Size, device: DeviceLike = None) -> TensorDict:
    """Builds a TensorDict from already-checked tensors without re-validating them.

    The hot sampling path builds one TensorDict per sample; skipping tensordict's per-entry checks
    saves about a third of the time. The entries must have the right leading shape.
    """
    return new_unchecked(source, batch_size=batch_size, device=device)


# ---------------------------------------------------------------------------------------------
# Tensor layouts
# ---------------------------------------------------------------------------------------------


def batch_shape(data: object) -> torch.Size:
    """The batch shape of a TensorDict, or the full shape of a tensor (the storable kinds)."""
    if isinstance(data, TensorDictBase):
        return data.batch_size
    if isinstance(data, torch.Tensor):
        return data.shape
    raise TypeError(
        f"tensor storages hold TensorDicts or tensors, got {type(data).__name__}; "
        f"use ListStorage for other objects"
    )


def split_index(index: IndexLike, ndim: int) -> list[torch.Tensor]:
    """The ``ndim`` broadcast index tensors of an item index ``(lead..., t)`` or ``[..., ndim]``."""
    if isinstance(index, tuple):
        if len(index) != ndim:
            raise IndexError(f"expected an index with {ndim} parts, got {len(index)}")
        parts = [as_long_tensor(p) for p in index]
        return list(torch.broadcast_tensors(*parts))
    idx = as_long_tensor(index)
    if idx.ndim == 0 or idx.shape[-1] != ndim:
        raise IndexError(
            f"a storage with ndim={ndim} takes a tuple of {ndim} index tensors or a tensor of "
            f"shape [..., {ndim}], got shape {tuple(idx.shape)}"
        )
    return list(idx.unbind(-1))


def tensor_leaves(
    td: TensorDictBase, prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Any]]:
    """Every ``(key path, tensor)`` leaf of ``td``; raises on non-tensor entries."""
    out = []
    for key, value in td.items():
        # a NonTensorStack (strings...) is a TensorDictBase too, but holds no tensor
        if isinstance(value, TensorDictBase) and not is_non_tensor(value):
            out.extend(tensor_leaves(value, (*prefix, key)))
        elif isinstance(value, torch.Tensor):
            out.append(((*prefix, key), value))
        else:
            raise TypeError(
                f"entry {nested_key_str((*prefix, key))} is a {type(value).__name__}: tensor "
                f"storages hold tensors only; use ListStorage for other objects"
            )
    return out


def alloc_like(
    td: TensorDictBase, batch: torch.Size, skip: int, device: torch.device | None, fill: bool
) -> TensorDict:
    """A zeroed TensorDict of batch ``batch`` with the layout of ``td`` past its ``skip`` dims."""
    source: dict[str, Any] = {}
    for key, value in td.items():
        if isinstance(value, TensorDictBase) and not is_non_tensor(value):
            sub_batch = torch.Size([*batch, *value.batch_size[skip:]])
            source[key] = alloc_like(value, sub_batch, value.batch_dims, device, fill)
        elif isinstance(value, torch.Tensor):
            shape = (*batch, *value.shape[skip:])
            dev = device if device is not None else value.device
            if fill:
                source[key] = torch.zeros(shape, dtype=value.dtype, device=dev)
            else:
                # Expanded zeros: the right shape and dtype without memory, for memmap_like.
                source[key] = torch.zeros((), dtype=value.dtype, device=dev).expand(shape)
        else:
            raise TypeError(
                f"entry {key!r} is a {type(value).__name__}: tensor storages hold tensors only; "
                f"use ListStorage for other objects"
            )
    return TensorDict(source, batch_size=batch, device=device)


def as_plain_tensors(td: TensorDictBase) -> TensorDict:
    """The same TensorDict with memory-mapped leaves seen as plain tensors (faster indexing)."""
    source: dict[str, Any] = {}
    for key, value in td.items():
        if isinstance(value, TensorDictBase):
            source[key] = as_plain_tensors(value)
        elif isinstance(value, torch.Tensor):
            source[key] = value.as_subclass(torch.Tensor)
    return new_unchecked(source, batch_size=td.batch_size)


def make_gather_plan(td: TensorDictBase, numel: int, nb: int) -> list[tuple[str, Any, Any]]:
    """Per entry: ``(name, flat leaf view, None)`` or ``(name, sub-plan, extra batch dims)``."""
    plan: list[tuple[str, Any, Any]] = []
    for key, value in td.items():
        if isinstance(value, TensorDictBase):
            extra = tuple(value.batch_size[nb:])
            plan.append((key, make_gather_plan(value, numel, nb), extra))
        else:
            plan.append((key, value.view(numel, *value.shape[nb:]), None))
    return plan


def run_gather_plan(
    plan: list[tuple[str, Any, Any]],
    flat: torch.Tensor,
    root: torch.Size,
    batch: torch.Size,
    device: torch.device | None,
) -> TensorDict:
    """Gathers the rows ``flat`` of every leaf into a new (nested) TensorDict of batch ``batch``."""
    source: dict[str, Any] = {}
    for key, item, extra in plan:
        if extra is None:
            source[key] = torch.index_select(item, 0, flat)
        else:
            source[key] = run_gather_plan(item, flat, root, torch.Size([*root, *extra]), device)
    return new_unchecked(source, batch_size=batch, device=device)


# ---------------------------------------------------------------------------------------------
# On-disk layout shared by tensor storages (dumps) and LazyMemmapStorage (live files)
#
#   storage.json   layout: class, kind, max_size, ndim, shape; written last (atomically)
#   header.bin     int64[4]: magic, filled, cursor, reserved; updated after each write
#   dirty.bin      uint8[slots]: 1 while a slot is being written (torn-write detection)
#   data/ | data.memmap   the items (tensordict memmap directory, or one raw tensor file)
# ---------------------------------------------------------------------------------------------

_MAGIC = 0x7472_6C72_6200_0001  # "trlrb" + format 1


def encode_header(filled: int, cursor: int) -> bytes:
    """The bytes of ``header.bin``: magic number, item count, write position, reserved."""
    return np.array([_MAGIC, filled, cursor, 0], dtype=np.int64).tobytes()


def replace_dir(path: Path, fill: Callable[[Path], object]) -> None:
    """Fills a fresh temporary directory, then swaps it in place of ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        fill(tmp)
        if path.exists():
            trash = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(path, trash)
            os.replace(tmp, path)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


_TD_TYPE = "<class 'tensordict._td.TensorDict'>"


def _check_plain_memmap(directory: Path) -> None:
    """Checks that a tensordict memmap directory holds plain tensors only, reading JSON alone.

    tensordict's loader imports the class a ``meta.json`` names and unpickles ``*.pickle`` files
    (non-tensor data): a crafted dump could run code through either. Tensor storages only ever
    write plain TensorDicts of tensors, so anything else is refused before tensordict reads it.
    """
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} does not exist: the storage data is missing")
    for root, _, files in os.walk(directory):
        where = Path(root)
        for name in files:
            if name != "meta.json" and not name.endswith(".memmap"):
                raise ValueError(
                    f"{where / name} is not part of a tensor storage dump (only meta.json and "
                    f"*.memmap files are read safely); if you trust this directory, load it "
                    f"with trusted=True"
                )
        if "meta.json" not in files:
            continue
        meta = read_json(where / "meta.json")
        bad = meta.get("_type") != _TD_TYPE or meta.get("_class", "tensordict:TensorDict") != (
            "tensordict:TensorDict"
        )
        for entry in meta.values():
            if isinstance(entry, dict):
                is_td = entry.get("type") == "TensorDict" and len(entry) == 1
                is_tensor = str(entry.get("dtype", "")).startswith("torch.")
                bad = bad or not (is_td or is_tensor)
        if bad:
            raise ValueError(
                f"{where / 'meta.json'} describes something other than a TensorDict of tensors; "
                f"loading it could import and run code it names. If you trust this directory, "
                f"load it with trusted=True"
            )


def open_storage_dir(
    path: Path, trusted: bool = False
) -> tuple[Any, dict[str, Any], int, int, np.ndarray | None]:
    """Maps a saved storage directory: ``(data or None, meta, filled, cursor, dirty slots)``.

    Unless ``trusted``, the data directory is checked to hold plain tensors only.
    """
    meta = read_json(path / "storage.json")
    check_format_version(meta, path / "storage.json")
    if meta["kind"] == "list":
        return None, meta, 0, 0, None
    header = np.fromfile(path / "header.bin", dtype=np.int64)
    if header.size < 3 or header[0] != _MAGIC:
        raise ValueError(f"{path / 'header.bin'} is not a torchrl storage header")
    filled, cursor = int(header[1]), int(header[2])
    if not meta.get("allocated", True):
        return None, meta, 0, 0, None
    if meta["kind"] == "tensordict":
        if not trusted:
            _check_plain_memmap(path / "data")
        data = TensorDict.load_memmap(path / "data", allow_pickle=trusted)
    else:
        data = MemoryMappedTensor.from_filename(
            path / "data.memmap",
            dtype=getattr(torch, meta["dtype"]),
            shape=torch.Size(meta["tensor_shape"]),
        )
    torn = None
    if (path / "dirty.bin").exists():
        dirty = np.fromfile(path / "dirty.bin", dtype=np.uint8)
        torn = np.flatnonzero(dirty[:filled])
    return data, meta, filled, cursor, torn


def same_dir(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name the same existing directory."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
