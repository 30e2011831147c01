"""One checkpoint for a whole run: modules, optimizers, replay buffers, collectors and RNG states.

A checkpoint is a directory: one sub-folder per registered component (written by that
component's adapter) and ``manifest.json``, which names the components and their adapters. The
``"archive"`` format stores the same tree in one ZIP file. Either is first written next to its
target under a temporary name and then renamed into place, so an interrupted save never leaves a
half-written checkpoint at ``path``; loading recognises the container by itself. State dicts are
stored without pickle by default (TensorDict files and a JSON schema, see
:class:`StateDictCheckpointAdapter`), and nothing is unpickled on load unless the caller passes
``trusted=True``.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import shutil
import tempfile
import uuid
import warnings
import zipfile
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal

import torch

from torchrl.data.replay_buffers.utils import atomic_write_json, safe_torch_load
from torchrl.trainers.checkpoint import (
    fsync_dir,
    get_rng_states,
    save_checkpoint,
    set_rng_states,
)

__all__ = [
    "Checkpoint",
    "CheckpointAdapter",
    "CheckpointError",
    "CheckpointFormat",
    "CheckpointLoadResult",
    "CheckpointOptions",
    "CheckpointRotation",
    "CheckpointStrictness",
    "DumpLoadCheckpointAdapter",
    "GlobalRNGState",
    "JSONCheckpointAdapter",
    "StateDictCheckpointAdapter",
    "StateDictFormat",
    "read_manifest",
]

#: Container layouts: a folder tree, or the same tree in one ZIP file.
CheckpointFormat = Literal["directory", "archive"]
#: How archive members are stored: as they are, or deflate-compressed.
ArchiveCompression = Literal["stored", "deflate"]
#: What :meth:`Checkpoint.load` does with missing or unloadable requested components.
CheckpointStrictness = Literal["error", "warn", "ignore"]

MANIFEST = "manifest.json"
#: Bumped when the layout of a checkpoint directory changes.
MANIFEST_VERSION = 1
#: The name suffix of the archives that :class:`CheckpointRotation` writes.
ARCHIVE_SUFFIX = ".zip"
_STRICTNESS = ("error", "warn", "ignore")
_FORMATS = ("directory", "archive")
_COMPRESSION = {"stored": zipfile.ZIP_STORED, "deflate": zipfile.ZIP_DEFLATED}


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or restored (missing, corrupted, or incompatible entry).

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:  # doctest: +IGNORE_EXCEPTION_DETAIL
        ...     Checkpoint(policy=torch.nn.Linear(2, 1)).load(folder)
        Traceback (most recent call last):
        ...
        CheckpointError: /tmp/.../manifest.json is missing: the checkpoint is partial
    """


@dataclasses.dataclass(frozen=True)
class CheckpointOptions:
    """Arguments forwarded to one component's save and load methods.

    Args:
        save_args: positional arguments for ``state_dict`` (state-dict adapters) or after the
            path (dump adapters).
        save_kwargs: keyword arguments used while saving.
        load_args: positional arguments after the state (``load_state_dict``) or the path.
        load_kwargs: keyword arguments used while restoring.

    Examples:
        >>> options = CheckpointOptions(load_kwargs={"strict": False})
        >>> options.merged(CheckpointOptions(load_kwargs={"assign": True})).load_kwargs
        {'strict': False, 'assign': True}
    """

    save_args: tuple[Any, ...] | None = None
    save_kwargs: Mapping[str, Any] | None = None
    load_args: tuple[Any, ...] | None = None
    load_kwargs: Mapping[str, Any] | None = None

    def merged(self, override: CheckpointOptions | None) -> CheckpointOptions:
        """These options with ``override`` applied: keywords merged, given positionals replace.

        Args:
            override: the operation-level options, or ``None``.

        Returns:
            The combined options.
        """
        if override is None:
            return self
        return CheckpointOptions(
            save_args=override.save_args if override.save_args is not None else self.save_args,
            save_kwargs={**(self.save_kwargs or {}), **(override.save_kwargs or {})},
            load_args=override.load_args if override.load_args is not None else self.load_args,
            load_kwargs={**(self.load_kwargs or {}), **(override.load_kwargs or {})},
        )


@dataclasses.dataclass
class CheckpointLoadResult:
    """What :meth:`Checkpoint.load` restored.

    Args:
        loaded: components restored.
        missing: requested components the checkpoint does not hold.
        incompatible: components that could not be restored, mapped to the reason.
        unrequested: components in the checkpoint that were not requested or not registered.
        values: what adapters returned (the saved value of JSON components).
        manifest: the parsed ``manifest.json``.

    Examples:
        >>> CheckpointLoadResult().loaded
        set()
    """

    loaded: set[str] = dataclasses.field(default_factory=set)
    missing: set[str] = dataclasses.field(default_factory=set)
    incompatible: dict[str, str] = dataclasses.field(default_factory=dict)
    unrequested: set[str] = dataclasses.field(default_factory=set)
    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    manifest: dict[str, Any] = dataclasses.field(default_factory=dict)


class CheckpointAdapter(ABC):
    """Saves one component into a folder of its own and restores it from there.

    Examples:
        An adapter that stores a ``list`` of strings as a text file, one per line:

        >>> import tempfile
        >>> class LinesAdapter(CheckpointAdapter):
        ...     adapter_id = "example.lines"
        ...     def save(self, component, path, *, args, kwargs):
        ...         (path / "lines.txt").write_text("\\n".join(component))
        ...     def load(self, component, path, *, map_location, tensor_load_kwargs, args, kwargs):
        ...         component[:] = (path / "lines.txt").read_text().split("\\n")
        >>> saved, restored = ["a", "b"], []
        >>> source, target = Checkpoint(), Checkpoint()
        >>> source.register("notes", saved, adapter=LinesAdapter())
        >>> target.register("notes", restored, adapter=LinesAdapter())
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = source.save(folder + "/ckpt")
        ...     result = target.load(path)
        >>> restored, sorted(result.loaded)
        (['a', 'b'], ['notes'])
    """

    #: Stored in the manifest; loading checks it matches the registered adapter.
    adapter_id: str = ""

    @abstractmethod
    def save(
        self, component: Any, path: Path, *, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> Any:
        """Writes ``component`` below the (existing, empty) folder ``path``."""

    @abstractmethod
    def load(
        self,
        component: Any,
        path: Path,
        *,
        map_location: Any,
        tensor_load_kwargs: Mapping[str, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any:
        """Restores ``component`` from ``path``; may return a value (kept in ``result.values``).

        ``tensor_load_kwargs`` holds ``trusted`` (allow arbitrary pickles) among others.
        """


def _safe_load(path: Path, map_location: Any, tensor_load_kwargs: Mapping[str, Any]) -> Any:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the checkpoint is partial")
    return safe_torch_load(
        path,
        trusted=bool(tensor_load_kwargs.get("trusted", False)),
        map_location=map_location,
        hint="Checkpoint.load(path, trusted=True)",
    )


#: How :class:`StateDictCheckpointAdapter` stores a state dict: a TensorDict folder, a TensorDict
#: archive, a consolidated TensorDict file (all three with a JSON schema, never pickled), or
#: ``torch.save``.
StateDictFormat = Literal["directory", "archive", "consolidated", "torch"]
_PAYLOAD_FORMATS = ("directory", "archive", "consolidated", "torch")
#: The JSON file that describes the structure of a pickle-free state-dict payload.
_SCHEMA = "state_schema.json"
_SCHEMA_VERSION = 1
#: Where each pickle-free format keeps its tensors, next to the schema.
_TENSOR_FILES = {"directory": "state", "archive": "state.tdz", "consolidated": "state.td"}
_TORCH_FILE = "state.pt"
_PICKLE_FREE_HINT = (
    "pickle-free payloads hold tensors, dicts, lists, tuples, torch.Size, str, int, float, "
    "bool and None; use StateDictCheckpointAdapter(payload_format='torch') to pickle other "
    "objects (those beyond torch.load's weights_only types then load only with trusted=True)"
)


def _key_repr(path: str, key: Any) -> str:
    return f"{path}[{key!r}]"


class _StateEncoder:
    """Splits a state dict into tensor leaves (numbered) and a JSON tree that refers to them."""

    def __init__(self, payload_format: str) -> None:
        self.payload_format = payload_format
        self.tensors: dict[str, torch.Tensor] = {}

    def _refuse(self, path: str, value: Any, why: str = "") -> CheckpointError:
        return CheckpointError(
            f"state{path} is a {type(value).__module__}.{type(value).__qualname__}{why}, which "
            f"payload_format={self.payload_format!r} cannot store: {_PICKLE_FREE_HINT}"
        )

    def encode(self, value: Any, path: str = "") -> Any:
        # Exact types only: a numpy float or an IntEnum would come back as a plain float or
        # int, so they are refused rather than silently changed.
        kind = type(value)
        if value is None or kind in (bool, int, float, str):
            return value  # json writes and reads nan and inf floats as NaN and Infinity
        if isinstance(value, torch.Tensor):
            return self._tensor(value, path)
        if kind in (dict, OrderedDict):
            items = []
            for key, item in value.items():
                if key is not None and type(key) not in (str, int, float, bool):
                    raise self._refuse(f"{path} key {key!r}", key, " (a dict key)")
                items.append([key, self.encode(item, _key_repr(path, key))])
            node: dict[str, Any] = {"dict": items}
            if kind is OrderedDict:
                node["ordered"] = True
                # nn.Module.state_dict() keeps per-module versions in ``_metadata``.
                metadata = getattr(value, "_metadata", None)
                if metadata is not None:
                    node["metadata"] = self.encode(metadata, f"{path}._metadata")
            return node
        if kind is list:
            return {"list": [self.encode(v, _key_repr(path, i)) for i, v in enumerate(value)]}
        if kind is tuple:
            return {"tuple": [self.encode(v, _key_repr(path, i)) for i, v in enumerate(value)]}
        if kind is torch.Size:
            return {"size": list(value)}
        raise self._refuse(path, value)

    def _tensor(self, value: torch.Tensor, path: str) -> dict[str, Any]:
        if value.layout != torch.strided or value.is_quantized or value.is_nested:
            raise self._refuse(path, value, f" with layout {value.layout}")
        if value.device.type == "meta":
            raise self._refuse(path, value, " on the meta device (it holds no data)")
        key = f"t{len(self.tensors)}"
        self.tensors[key] = value.detach().resolve_conj().resolve_neg().to("cpu")
        return {
            "tensor": key,
            "device": str(value.device),
            "dtype": str(value.dtype).removeprefix("torch."),
            "shape": list(value.shape),
        }


def _target_device(saved: str, map_location: Any) -> str | torch.device:
    if map_location is None:
        return saved
    if isinstance(map_location, (str, torch.device)):
        return map_location
    if isinstance(map_location, Mapping):
        return map_location.get(saved, saved)
    raise CheckpointError(
        f"map_location={map_location!r}: pickle-free state-dict payloads take a device, a "
        f"device string or a dict of device strings (a callable works only with "
        f"payload_format='torch')"
    )


class _StateDecoder:
    """Rebuilds a state dict from the JSON tree and its tensor leaves."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], map_location: Any, source: Path):
        self.tensors = tensors
        self.map_location = map_location
        self.source = source

    def _corrupted(self, why: str) -> CheckpointError:
        return CheckpointError(f"{self.source} is corrupted ({why})")

    def decode(self, node: Any) -> Any:
        if node is None or type(node) in (bool, int, float, str):
            return node
        if not isinstance(node, dict):
            raise self._corrupted(f"unknown schema node {node!r:.80}")
        if "tensor" in node:
            return self._tensor(node)
        if "dict" in node:
            pairs = node["dict"]
            if not isinstance(pairs, list) or not all(
                isinstance(p, list) and len(p) == 2 for p in pairs
            ):
                raise self._corrupted("a dict node is not a list of [key, value] pairs")
            if node.get("ordered"):
                out: dict[Any, Any] = OrderedDict((k, self.decode(v)) for k, v in pairs)
                if "metadata" in node:
                    out._metadata = self.decode(node["metadata"])  # type: ignore[attr-defined]
                return out
            return {k: self.decode(v) for k, v in pairs}
        if "list" in node:
            return [self.decode(v) for v in node["list"]]
        if "tuple" in node:
            return tuple(self.decode(v) for v in node["tuple"])
        if "size" in node:
            return torch.Size(node["size"])
        raise self._corrupted(f"unknown schema node {node!r:.80}")

    def _tensor(self, node: dict[str, Any]) -> torch.Tensor:
        try:
            stored = self.tensors[node["tensor"]]
        except (KeyError, TypeError):
            raise self._corrupted(f"the tensor {node.get('tensor')!r} is not stored") from None
        # A plain in-memory copy: the loaded leaves map the payload files, which may be a
        # temporary extraction of an archive.
        tensor = stored.as_subclass(torch.Tensor).clone()
        dtype, shape = node.get("dtype"), node.get("shape")
        if str(tensor.dtype).removeprefix("torch.") != dtype or list(tensor.shape) != shape:
            raise self._corrupted(
                f"the tensor {node['tensor']!r} is {tensor.dtype} of shape "
                f"{list(tensor.shape)}, the schema says {dtype} of shape {shape}"
            )
        device = _target_device(str(node.get("device", "cpu")), self.map_location)
        return tensor if torch.device(device) == tensor.device else tensor.to(device)


def _save_state_payload(
    state: Any, path: Path, payload_format: str, archive_compression: str | int | None
) -> None:
    """Writes ``state`` below the folder ``path`` in ``payload_format``."""
    if payload_format == "torch":
        save_checkpoint(state, path / _TORCH_FILE)
        return
    from tensordict import TensorDict

    encoder = _StateEncoder(payload_format)
    tree = encoder.encode(state)
    tensors = TensorDict(encoder.tensors, batch_size=[])
    target = path / _TENSOR_FILES[payload_format]
    if payload_format == "directory":
        tensors.save(target)
    elif payload_format == "archive":
        tensors.save(target, archive=True, compression=archive_compression)
    else:
        tensors.consolidate(filename=target)
    schema = {
        "schema_version": _SCHEMA_VERSION,
        "payload_format": payload_format,
        "tensors": len(encoder.tensors),
        # TensorDict reads a truncated leaf file without complaint: the sizes let the
        # loader tell a damaged payload from a good one before reading it.
        "files": _file_sizes(path),
        "state": tree,
    }
    atomic_write_json(path / _SCHEMA, schema)


def _file_sizes(path: Path) -> dict[str, int]:
    """The size of every payload file below ``path`` (the schema excepted), by relative path."""
    sizes = {}
    for folder, _, files in os.walk(path):
        for name in files:
            full = Path(folder) / name
            rel = full.relative_to(path).as_posix()
            if rel != _SCHEMA:
                sizes[rel] = full.stat().st_size
    return sizes


def _detect_payload_format(path: Path) -> str:
    if (path / _SCHEMA).is_file():
        schema = _read_json(path / _SCHEMA)
        fmt = schema.get("payload_format") if isinstance(schema, dict) else None
        if fmt not in _TENSOR_FILES:
            raise CheckpointError(
                f"{path / _SCHEMA} is corrupted (payload_format {fmt!r} is not one of "
                f"{tuple(_TENSOR_FILES)})"
            )
        return fmt
    if (path / _TORCH_FILE).is_file():
        return "torch"
    raise CheckpointError(
        f"{path} holds neither {_SCHEMA} nor {_TORCH_FILE}: the checkpoint is partial"
    )


def _load_state_payload(
    path: Path, map_location: Any, tensor_load_kwargs: Mapping[str, Any]
) -> Any:
    """Reads the state dict below ``path``, whichever payload format wrote it."""
    fmt = _detect_payload_format(path)
    if fmt == "torch":
        return _safe_load(path / _TORCH_FILE, map_location, tensor_load_kwargs)
    from tensordict import TensorDict

    schema = _read_json(path / _SCHEMA)
    if schema.get("schema_version") != _SCHEMA_VERSION or "state" not in schema:
        raise CheckpointError(
            f"{path / _SCHEMA} has schema version {schema.get('schema_version')!r}; this "
            f"torchrl reads version {_SCHEMA_VERSION}"
        )
    source = path / _TENSOR_FILES[fmt]
    if not source.exists():
        raise CheckpointError(f"{source} is missing: the checkpoint is partial")
    expected = schema.get("files")
    found = _file_sizes(path)
    if not isinstance(expected, dict) or found != expected:
        damaged = sorted(
            name
            for name in set(found) | set(expected or {})
            if found.get(name) != (expected or {}).get(name)
        )
        raise CheckpointError(
            f"{path} is corrupted or partial: the payload files {damaged} differ from what "
            f"{_SCHEMA} records"
        )
    try:
        if fmt == "consolidated":
            tensors = TensorDict.from_consolidated(source)
        else:
            # allow_pickle=False: a forged payload with pickled leaves is refused.
            tensors = TensorDict.load(source, allow_pickle=False)
        flat = {key: tensors.get(key) for key in tensors.keys()}
    except CheckpointError:
        raise
    except Exception as err:
        raise CheckpointError(f"{source} is corrupted ({type(err).__name__}: {err})") from err
    if len(flat) != schema.get("tensors"):
        raise CheckpointError(
            f"{source} is corrupted (it holds {len(flat)} tensors, the schema "
            f"{schema.get('tensors')!r})"
        )
    state = _StateDecoder(flat, map_location, path / _SCHEMA).decode(schema["state"])
    if fmt == "consolidated":
        # A consolidated TensorDict sits in a reference cycle that keeps its file mapped until
        # a collection: collect now, so that an archive's temporary extraction can be removed.
        del tensors, flat
        gc.collect()
    return state


class StateDictCheckpointAdapter(CheckpointAdapter):
    """For objects with ``state_dict()`` / ``load_state_dict(state)`` (modules, optimizers,
    collectors, :class:`GlobalRNGState`).

    The default payload never pickles: the tensors go through TensorDict's own saving and a
    JSON schema (``state_schema.json``) keeps the structure around them (nested dicts with
    str/int/float/bool/None keys, lists, tuples, ``torch.Size``, str, int, float, bool,
    None; ``OrderedDict`` and a module state dict's ``_metadata`` are kept). Tuples come back
    as tuples, tensors as plain contiguous CPU tensors moved to their saved device (or to
    ``map_location``). Loading recognises all four formats by the files it finds, including
    the ``state.pt`` of older checkpoints.

    Args:
        payload_format: how :meth:`save` writes the state: ``"directory"`` (a TensorDict
            folder, one file per tensor), ``"archive"`` (one TensorDict ``.tdz`` file),
            ``"consolidated"`` (one consolidated TensorDict file) or ``"torch"``
            (``torch.save``; the only one that stores arbitrary Python objects, which then load
            only with ``trusted=True``).
        archive_compression: the compression of the ``"archive"`` payload, as TensorDict's
            ``save(compression=)`` takes it (e.g. ``"deflate"``); only with that format.

    Raises:
        ValueError: an unknown ``payload_format``, or ``archive_compression`` without
            ``payload_format="archive"``.

    Examples:
        >>> StateDictCheckpointAdapter().payload_format
        'directory'
        >>> StateDictCheckpointAdapter(payload_format="torch").adapter_id
        'torchrl.state_dict'
    """

    adapter_id = "torchrl.state_dict"

    def __init__(
        self,
        payload_format: StateDictFormat = "directory",
        *,
        archive_compression: str | int | None = None,
    ) -> None:
        if payload_format not in _PAYLOAD_FORMATS:
            raise ValueError(
                f"payload_format must be one of {_PAYLOAD_FORMATS} (got {payload_format!r})"
            )
        if archive_compression is not None and payload_format != "archive":
            raise ValueError(
                f"archive_compression={archive_compression!r} applies to "
                f"payload_format='archive' only (got payload_format={payload_format!r})"
            )
        self._payload_format: StateDictFormat = payload_format
        self.archive_compression = archive_compression

    @property
    def payload_format(self) -> StateDictFormat:
        """The format :meth:`save` writes (loading reads all of them)."""
        return self._payload_format

    def save(
        self, component: Any, path: Path, *, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> None:
        _save_state_payload(
            component.state_dict(*args, **kwargs),
            path,
            self._payload_format,
            self.archive_compression,
        )

    def load(
        self,
        component: Any,
        path: Path,
        *,
        map_location: Any,
        tensor_load_kwargs: Mapping[str, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> None:
        state = _load_state_payload(path, map_location, tensor_load_kwargs)
        component.load_state_dict(state, *args, **kwargs)


class DumpLoadCheckpointAdapter(CheckpointAdapter):
    """For objects that save themselves into a folder: ``dumps(path)`` / ``loads(path)``
    (replay buffers) or ``dump(path)`` / ``load(path)``.

    Examples:
        >>> DumpLoadCheckpointAdapter().adapter_id
        'torchrl.dump_load'
    """

    adapter_id = "torchrl.dump_load"

    def save(
        self, component: Any, path: Path, *, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> None:
        dump = component.dumps if hasattr(component, "dumps") else component.dump
        dump(path / "data", *args, **kwargs)

    def load(
        self,
        component: Any,
        path: Path,
        *,
        map_location: Any,
        tensor_load_kwargs: Mapping[str, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> None:
        if not (path / "data").exists():
            raise CheckpointError(f"{path / 'data'} is missing: the checkpoint is partial")
        if hasattr(component, "loads"):
            # torchrl's replay buffers read safely unless told the dump is trusted.
            trusted = bool(tensor_load_kwargs.get("trusted", False))
            component.loads(path / "data", *args, trusted=trusted, **kwargs)
        else:
            component.load(path / "data", *args, **kwargs)


class JSONCheckpointAdapter(CheckpointAdapter):
    """For JSON values (config, counters, metrics): stored as ``value.json``, never pickled.

    A registered ``dict`` or ``list`` is updated in place on load; the saved value is also
    returned (``result.values[name]``).

    Examples:
        >>> JSONCheckpointAdapter().adapter_id
        'torchrl.json'
    """

    adapter_id = "torchrl.json"

    def save(
        self, component: Any, path: Path, *, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> None:
        try:
            json.dumps(component)
        except (TypeError, ValueError) as err:
            raise CheckpointError(f"value is not JSON-serializable ({err})") from err
        atomic_write_json(path / "value.json", component)

    def load(
        self,
        component: Any,
        path: Path,
        *,
        map_location: Any,
        tensor_load_kwargs: Mapping[str, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any:
        value = _read_json(path / "value.json")
        if isinstance(component, dict) and isinstance(value, dict):
            component.clear()
            component.update(value)
        elif isinstance(component, list) and isinstance(value, list):
            component[:] = value
        return value


class GlobalRNGState:
    """The process-wide generators (Python ``random``, numpy, torch CPU and CUDA) as a component.

    Examples:
        >>> rng = GlobalRNGState()
        >>> state = rng.state_dict()
        >>> a = torch.rand(2)
        >>> rng.load_state_dict(state)
        >>> torch.equal(a, torch.rand(2))
        True
    """

    def state_dict(self) -> dict[str, Any]:
        """The current generator states (tensors and plain values: loads without pickle)."""
        return get_rng_states()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores the states returned by :meth:`state_dict`."""
        set_rng_states(dict(state_dict))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing: the checkpoint is partial") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path} is corrupted (not valid JSON: {err})") from err


def _default_adapter(name: str, obj: Any) -> CheckpointAdapter:
    if hasattr(obj, "dumps") and hasattr(obj, "loads"):
        return DumpLoadCheckpointAdapter()
    if hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"):
        return StateDictCheckpointAdapter()
    if hasattr(obj, "dump") and hasattr(obj, "load"):
        return DumpLoadCheckpointAdapter()
    if obj is None or isinstance(obj, (dict, list, str, int, float, bool)):
        return JSONCheckpointAdapter()
    raise CheckpointError(
        f"component {name!r}: no adapter for {type(obj).__name__} (it has no dumps/loads, "
        f"state_dict/load_state_dict, dump/load, and is not a JSON value); pass adapter="
    )


@dataclasses.dataclass
class _Entry:
    obj: Any
    adapter: CheckpointAdapter
    options: CheckpointOptions


class Checkpoint:
    """Saves and restores the named components of a run, together or a few at a time.

    Args:
        format: the container :meth:`save` writes by default: ``"directory"`` (a folder per
            component, best for large replay buffers) or ``"archive"`` (the same tree in one
            ZIP file). :meth:`load` reads either, whatever this says.
        strict: what :meth:`load` does when a requested component is missing or cannot be
            restored: raise :class:`CheckpointError`, warn, or ignore (see the result).
        archive_compression: how archive members are stored: ``"stored"`` (as they are: tensor
            payloads rarely shrink) or ``"deflate"`` (ZIP compression).
        save_components: the names :meth:`save` writes by default (default: all).
        **components: named objects; the adapter is chosen from what the object offers:
            ``dumps``/``loads`` (replay buffers), ``state_dict``/``load_state_dict`` (modules,
            optimizers, collectors, :class:`GlobalRNGState`), or a JSON value.

    Examples:
        >>> import tempfile
        >>> source, target = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
        >>> path = Checkpoint(policy=source, step={"n": 3}).save(tempfile.mkdtemp() + "/ckpt")
        >>> result = Checkpoint(policy=target).load(path)
        >>> sorted(result.loaded), sorted(result.unrequested)
        (['policy'], ['step'])
        >>> torch.equal(source.weight, target.weight)
        True
    """

    def __init__(
        self,
        *,
        format: CheckpointFormat = "directory",
        strict: CheckpointStrictness = "error",
        archive_compression: ArchiveCompression = "stored",
        save_components: Collection[str] | None = None,
        **components: Any,
    ) -> None:
        _check_format(format)
        if strict not in _STRICTNESS:
            raise ValueError(f"strict must be one of {_STRICTNESS} (got {strict!r})")
        if archive_compression not in _COMPRESSION:
            raise ValueError(
                f"archive_compression must be one of {tuple(_COMPRESSION)} "
                f"(got {archive_compression!r})"
            )
        self.format: CheckpointFormat = format
        self.strict = strict
        self.archive_compression = archive_compression
        self._entries: dict[str, _Entry] = {}
        for name, obj in components.items():
            self.register(name, obj)
        self.save_components = None if save_components is None else set(save_components)
        if self.save_components is not None:
            self._check_names(self.save_components)

    @property
    def components(self) -> dict[str, Any]:
        """The registered objects by name."""
        return {name: entry.obj for name, entry in self._entries.items()}

    def register(
        self,
        name: str,
        obj: Any,
        *,
        adapter: CheckpointAdapter | None = None,
        options: CheckpointOptions | None = None,
    ) -> None:
        """Adds (or replaces) the component ``name``.

        Args:
            name: a folder-safe name (letters, digits, ``_``, ``-``, ``.``).
            obj: the object to save and restore.
            adapter: how to save it; chosen from the object when ``None``.
            options: arguments forwarded to its save and load methods.
        """
        if not name or name.startswith(".") or not all(c.isalnum() or c in "_-." for c in name):
            raise ValueError(f"component name {name!r} must be letters, digits, '_', '-', '.'")
        if adapter is None:
            adapter = _default_adapter(name, obj)
        self._entries[name] = _Entry(obj, adapter, options or CheckpointOptions())

    def _check_names(self, names: Collection[str]) -> None:
        unknown = sorted(set(names) - set(self._entries))
        if unknown:
            raise CheckpointError(
                f"unknown component(s) {unknown}; registered: {sorted(self._entries)}"
            )

    def save(
        self,
        path: str | os.PathLike,
        *,
        components: Collection[str] | None = None,
        component_options: Mapping[str, CheckpointOptions] | None = None,
        metadata: Mapping[str, Any] | None = None,
        format: CheckpointFormat | None = None,
    ) -> Path:
        """Writes the selected components to ``path``, replacing what was there.

        Args:
            path: the checkpoint directory, or the archive file (the name is kept as given:
                no suffix is added).
            components: names to save (default: ``save_components``, else all).
            component_options: per-name options merged over the registered ones.
            metadata: JSON values kept in the manifest (step, metrics for rotation).
            format: overrides the checkpoint's ``format`` for this save.

        Returns:
            The path written.
        """
        path = _local_path(path)
        format = self.format if format is None else format
        _check_format(format)
        names = set(self._entries) if components is None else set(components)
        if components is None and self.save_components is not None:
            names = set(self.save_components)
        self._check_names(names)
        self._check_names(component_options or {})
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
        tmp.mkdir()
        try:
            manifest: dict[str, Any] = {
                "format_version": MANIFEST_VERSION,
                "torch_version": torch.__version__,
                "metadata": dict(metadata or {}),
                "components": {},
            }
            for name in sorted(names):
                entry = self._entries[name]
                opts = entry.options.merged((component_options or {}).get(name))
                (tmp / name).mkdir()
                try:
                    entry.adapter.save(
                        entry.obj,
                        tmp / name,
                        args=tuple(opts.save_args or ()),
                        kwargs=dict(opts.save_kwargs or {}),
                    )
                except Exception as err:
                    raise CheckpointError(f"saving component {name!r} failed: {err}") from err
                manifest["components"][name] = {
                    "adapter": entry.adapter.adapter_id,
                    "type": type(entry.obj).__qualname__,
                }
            # Adapters may write without fsync (replay-buffer dumps): the payload must be on
            # disk before the manifest that vouches for it.
            _fsync_tree(tmp)
            try:
                # Written last: a directory without a manifest is never taken for a checkpoint.
                atomic_write_json(tmp / MANIFEST, manifest)
            except TypeError as err:
                raise CheckpointError(f"metadata is not JSON-serializable ({err})") from err
            fsync_dir(tmp)
            if format == "archive":
                _write_archive(tmp, path, _COMPRESSION[self.archive_compression])
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                _replace_path(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        # Leftovers of saves to this path that were killed mid-way (one writer per path).
        for stale in path.parent.glob(f".{path.name}.*"):
            tag = stale.name[len(path.name) + 2 :]
            if len(tag) == 16 and tag[12:] in (".tmp", ".old"):
                _remove(stale)
        return path

    def load(
        self,
        path: str | os.PathLike,
        *,
        components: Collection[str] | None = None,
        component_options: Mapping[str, CheckpointOptions] | None = None,
        map_location: Any = None,
        tensor_load_kwargs: Mapping[str, Any] | None = None,
        strict: CheckpointStrictness | None = None,
        trusted: bool = False,
        extract_dir: str | os.PathLike | None = None,
    ) -> CheckpointLoadResult:
        """Restores the requested components from a checkpoint written by :meth:`save`.

        Args:
            path: the checkpoint directory or archive (recognised by itself).
            components: names to restore (default: all registered).
            component_options: per-name options merged over the registered ones.
            map_location: passed to ``torch.load``.
            tensor_load_kwargs: extra keywords for the adapters' tensor loading.
            strict: overrides the checkpoint's ``strict`` for this call.
            trusted: allow arbitrary pickled objects (they can run any code while loading).
            extract_dir: for an archive, the folder its requested members are extracted to
                (created if needed, kept). By default a temporary folder is used and removed
                after loading, unless a component still maps files from it (a
                ``LazyMemmapStorage`` maps the loaded files in place): then it is kept, with a
                warning naming it.

        Returns:
            A :class:`CheckpointLoadResult`.

        Raises:
            CheckpointError: no manifest or a corrupted one; with ``strict="error"``, a
                requested component missing or failing to load (named in the message;
                components restored before the failing one stay restored).
            pickle.UnpicklingError: a file holds objects that need ``trusted=True`` (raised
                whatever ``strict`` says).
        """
        path = _local_path(path)
        strict = self.strict if strict is None else strict
        if strict not in _STRICTNESS:
            raise ValueError(f"strict must be one of {_STRICTNESS} (got {strict!r})")
        manifest = read_manifest(path)
        requested = set(self._entries) if components is None else set(components)
        self._check_names(requested)
        if path.is_dir():
            return self._load_tree(
                path,
                path,
                manifest,
                requested,
                component_options,
                map_location,
                tensor_load_kwargs,
                strict,
                trusted,
            )
        # An archive: only the requested components' members are extracted, into a folder
        # that the adapters read like a checkpoint directory.
        if extract_dir is not None:
            root = Path(extract_dir)
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = Path(tempfile.mkdtemp(prefix="torchrl-ckpt-"))
        loaded: CheckpointLoadResult | None = None
        try:
            _extract_components(path, root, requested & set(manifest["components"]))
            loaded = self._load_tree(
                path,
                root,
                manifest,
                requested,
                component_options,
                map_location,
                tensor_load_kwargs,
                strict,
                trusted,
            )
        finally:
            if extract_dir is None:
                self._drop_extracted(root, loaded)
        return loaded

    def _drop_extracted(self, root: Path, result: CheckpointLoadResult | None) -> None:
        """Removes the temporary extraction of an archive, unless something still maps it."""
        mapped = _mapped_below(root)
        if mapped is None:  # no /proc/self/maps: assume dump-loaded components may map files
            mapped = result is not None and any(
                isinstance(self._entries[name].adapter, DumpLoadCheckpointAdapter)
                for name in result.loaded
            )
        if not mapped:
            shutil.rmtree(root, ignore_errors=True)
            return
        warnings.warn(
            f"a component loaded from the archive maps its files in place: they stay in {root} "
            f"(pass extract_dir= to choose where, and remove it once done)",
            stacklevel=3,
        )

    def _load_tree(
        self,
        path: Path,
        root: Path,
        manifest: dict[str, Any],
        requested: set[str],
        component_options: Mapping[str, CheckpointOptions] | None,
        map_location: Any,
        tensor_load_kwargs: Mapping[str, Any] | None,
        strict: CheckpointStrictness,
        trusted: bool,
    ) -> CheckpointLoadResult:
        import pickle

        saved = manifest["components"]
        result = CheckpointLoadResult(manifest=manifest)
        result.unrequested = set(saved) - requested
        result.missing = requested - set(saved)
        load_kwargs = {**(tensor_load_kwargs or {}), "trusted": trusted}
        for name in sorted(requested & set(saved)):
            entry = self._entries[name]
            adapter_id = saved[name].get("adapter") if isinstance(saved[name], dict) else None
            if adapter_id != entry.adapter.adapter_id:
                result.incompatible[name] = (
                    f"saved with adapter {adapter_id!r}, registered with "
                    f"{entry.adapter.adapter_id!r}"
                )
                continue
            opts = entry.options.merged((component_options or {}).get(name))
            try:
                value = entry.adapter.load(
                    entry.obj,
                    root / name,
                    map_location=map_location,
                    tensor_load_kwargs=load_kwargs,
                    args=tuple(opts.load_args or ()),
                    kwargs=dict(opts.load_kwargs or {}),
                )
            except pickle.UnpicklingError:
                raise
            except Exception as err:
                result.incompatible[name] = f"{type(err).__name__}: {err}"
                if strict == "error":
                    raise CheckpointError(
                        f"component {name!r} could not be restored from {path}: {err}"
                    ) from err
                continue
            result.loaded.add(name)
            if value is not None:
                result.values[name] = value
        problems = [f"missing: {sorted(result.missing)}"] if result.missing else []
        problems += [f"{k!r}: {v}" for k, v in sorted(result.incompatible.items())]
        if problems and strict == "error":
            raise CheckpointError(f"checkpoint {path}: " + "; ".join(problems))
        if problems and strict == "warn":
            warnings.warn(f"checkpoint {path}: " + "; ".join(problems), stacklevel=3)
        return result


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``manifest.json`` of the checkpoint directory or archive ``path``.

    Args:
        path: a checkpoint directory or archive file.

    Returns:
        The manifest (``format_version``, ``metadata``, ``components``).

    Raises:
        CheckpointError: ``path`` is not a checkpoint, or its manifest is corrupted.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Checkpoint(step={"n": 3}).save(folder + "/ckpt", metadata={"reward": 1.0})
        ...     manifest = read_manifest(path)
        >>> manifest["metadata"], sorted(manifest["components"])
        ({'reward': 1.0}, ['step'])
    """
    path = _local_path(path)
    if path.is_dir():
        manifest = _read_json(path / MANIFEST)
    elif path.is_file():
        manifest = _read_archive_manifest(path)
    else:
        raise CheckpointError(f"no checkpoint directory or archive at {path}")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("components"), dict):
        raise CheckpointError(f"{path / MANIFEST} is corrupted (no 'components' table)")
    if manifest.get("format_version") != MANIFEST_VERSION:
        raise CheckpointError(
            f"{path / MANIFEST} has format version {manifest.get('format_version')!r}; "
            f"this torchrl reads version {MANIFEST_VERSION}"
        )
    return manifest


def _local_path(path: str | os.PathLike) -> Path:
    """``path`` as a local ``Path``; a URI (``s3://...``) is refused rather than made a folder."""
    text = os.fspath(path)
    if isinstance(text, str) and "://" in text:
        raise ValueError(
            f"checkpoints are read and written on the local filesystem; got the URI {text!r} "
            f"(copy the checkpoint to or from remote storage with that storage's own tools)"
        )
    return Path(text)


def _check_format(format: str) -> None:
    if format not in _FORMATS:
        raise ValueError(f"format must be one of {_FORMATS} (got {format!r})")


def _read_archive_manifest(path: Path) -> Any:
    try:
        with zipfile.ZipFile(path) as archive:
            raw = archive.read(MANIFEST)
    except KeyError:
        raise CheckpointError(f"{path / MANIFEST} is missing: the checkpoint is partial") from None
    except (zipfile.BadZipFile, OSError) as err:
        raise CheckpointError(f"{path} is corrupted (not a readable ZIP archive: {err})") from err
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path / MANIFEST} is corrupted (not valid JSON: {err})") from err


def _write_archive(tree: Path, path: Path, compression: int) -> None:
    """Packs the finished checkpoint folder ``tree`` into the ZIP file ``path``, atomically."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "wb") as handle:
            with zipfile.ZipFile(handle, "w", compression=compression) as archive:
                # The manifest first: readers find it without scanning the payloads.
                archive.write(tree / MANIFEST, MANIFEST)
                for folder, dirs, files in os.walk(tree):
                    dirs.sort()
                    rel = Path(folder).relative_to(tree)
                    for name in sorted(files):
                        member = (rel / name).as_posix()
                        if member != MANIFEST:
                            archive.write(Path(folder) / name, member)
            handle.flush()
            os.fsync(handle.fileno())
        _replace_path(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def _extract_components(path: Path, root: Path, names: Collection[str]) -> None:
    """Extracts the members of the components ``names`` from the archive ``path`` below ``root``.

    Member names are checked before anything is written: an absolute name or one climbing out
    with ``..`` marks a forged archive.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                parts = info.filename.split("/")
                if info.filename.startswith("/") or ".." in parts or "\\" in info.filename:
                    raise CheckpointError(
                        f"{path} holds the member {info.filename!r}, which points outside "
                        f"the checkpoint: refusing to read it"
                    )
                if parts[0] in names and not info.is_dir():
                    archive.extract(info, root)
    except (zipfile.BadZipFile, OSError) as err:
        raise CheckpointError(f"{path} is corrupted (not a readable ZIP archive: {err})") from err


def _mapped_below(root: Path) -> bool | None:
    """Whether this process memory-maps a file below ``root``; ``None`` when it cannot tell."""
    maps = Path("/proc/self/maps")
    if not maps.is_file():
        return None
    prefix = f"{os.path.realpath(root)}{os.sep}"
    try:
        text = maps.read_text()
    except OSError:
        return None
    return any(
        (line.split(maxsplit=5)[5:] or [""])[0].startswith(prefix) for line in text.splitlines()
    )


def _remove(path: Path) -> None:
    """Deletes a file or a folder tree, if there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _replace_path(new: Path, path: Path) -> None:
    """Moves the finished checkpoint ``new`` (a folder or a file) to ``path``, replacing an older one.

    A directory cannot be renamed over a non-empty one (nor a file over a folder), so an old
    checkpoint is first moved aside; a crash between the two renames leaves it under its
    ``.old`` name, never half-written data.
    """
    old = None
    if path.exists() and (path.is_dir() or new.is_dir()):
        old = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.old")
        os.replace(path, old)
    os.replace(new, path)
    fsync_dir(path.parent)
    if old is not None:
        _remove(old)


def _fsync_tree(root: Path) -> None:
    """Flushes every file and folder below ``root`` to disk."""
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as handle:
                os.fsync(handle.fileno())
        fsync_dir(folder)


class CheckpointRotation:
    """A directory of checkpoints named by step, keeping the newest and optionally the best.

    Directories (``<prefix>-<step>``) and archives (``<prefix>-<step>.zip``) rotate alike.

    Args:
        directory: where the checkpoints live.
        keep_last: how many of the newest checkpoints to keep (>= 1).
        keep_best: ``(metadata_key, "min" | "max")``: also keep the checkpoint with the best
            value of that metadata entry.
        prefix: the checkpoints are ``<prefix>-<step>`` folders.

    Examples:
        >>> import tempfile
        >>> rotation = CheckpointRotation(tempfile.mkdtemp(), keep_last=1)
        >>> ckpt = Checkpoint(value={"step": 1})
        >>> first = rotation.save(ckpt, step=1)
        >>> second = rotation.save(ckpt, step=2)
        >>> rotation.checkpoints() == (second,)
        True
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        keep_last: int,
        keep_best: tuple[str, Literal["min", "max"]] | None = None,
        prefix: str = "checkpoint",
    ) -> None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1 (got {keep_last})")
        if keep_best is not None and keep_best[1] not in ("min", "max"):
            raise ValueError(f"keep_best mode must be 'min' or 'max' (got {keep_best[1]!r})")
        self.directory = _local_path(directory)
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.prefix = prefix

    def _step(self, path: Path) -> int | None:
        name = path.name
        is_archive = name.endswith(ARCHIVE_SUFFIX)
        if is_archive:
            name = name[: -len(ARCHIVE_SUFFIX)]
        head, sep, tail = name.rpartition("-")
        if head != self.prefix or not sep or not tail.isdigit():
            return None
        # An archive appears under its name only once complete (renamed into place); a
        # folder is complete once its manifest is there.
        complete = path.is_file() if is_archive else (path / MANIFEST).is_file()
        return int(tail) if complete else None

    def checkpoints(self) -> tuple[Path, ...]:
        """The complete checkpoints in the directory, oldest step first."""
        if not self.directory.is_dir():
            return ()
        found = [(s, p) for p in self.directory.iterdir() if (s := self._step(p)) is not None]
        return tuple(p for _, p in sorted(found))

    def latest(self) -> Path | None:
        """The checkpoint with the highest step, if any."""
        found = self.checkpoints()
        return found[-1] if found else None

    def best(self) -> Path | None:
        """The checkpoint with the best ``keep_best`` metric, if configured and any has it."""
        if self.keep_best is None:
            return None
        key, mode = self.keep_best
        scored = []
        for p in self.checkpoints():
            try:
                value = read_manifest(p)["metadata"].get(key)
            except CheckpointError:
                continue  # a corrupted entry is never the best one
            if isinstance(value, (int, float)):
                scored.append((value if mode == "min" else -value, p))
        return min(scored, key=lambda item: item[0])[1] if scored else None

    def save(
        self,
        checkpoint: Checkpoint,
        *,
        step: int,
        metadata: Mapping[str, Any] | None = None,
        components: Collection[str] | None = None,
        format: CheckpointFormat | None = None,
    ) -> Path:
        """Saves ``checkpoint`` as ``<prefix>-<step>`` and deletes those no longer kept.

        Args:
            checkpoint: what to save.
            step: the training step (orders the checkpoints).
            metadata: JSON values for the manifest; ``keep_best`` reads its metric here.
            components: names to save (default: the checkpoint's default).
            format: the container (default: the checkpoint's ``format``); archives are named
                ``<prefix>-<step>.zip``. Both kinds in one directory rotate together.

        Returns:
            The new checkpoint's path.
        """
        if step < 0:
            raise ValueError(f"step must be >= 0 (got {step})")
        format = checkpoint.format if format is None else format
        _check_format(format)
        stem = self.directory / f"{self.prefix}-{step:012d}"
        path = stem.with_name(stem.name + ARCHIVE_SUFFIX) if format == "archive" else stem
        path = checkpoint.save(
            path,
            components=components,
            metadata={"step": step, **(metadata or {})},
            format=format,
        )
        # One checkpoint per step: a save of the other container at this step is replaced.
        other = stem if format == "archive" else stem.with_name(stem.name + ARCHIVE_SUFFIX)
        _remove(other)
        keep = set(self.checkpoints()[-self.keep_last :])
        best = self.best()
        if best is not None:
            keep.add(best)
        for old in self.checkpoints():
            if old not in keep:
                _remove(old)
        return path

    def load_latest(self, checkpoint: Checkpoint, **kwargs: Any) -> CheckpointLoadResult:
        """Restores the newest checkpoint into ``checkpoint`` (keywords as :meth:`Checkpoint.load`).

        Raises:
            CheckpointError: the directory holds no checkpoint.
        """
        latest = self.latest()
        if latest is None:
            raise CheckpointError(f"no checkpoint in {self.directory}")
        return checkpoint.load(latest, **kwargs)
