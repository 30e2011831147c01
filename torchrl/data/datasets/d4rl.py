"""D4RL's HDF5 files as replay buffers, and any of our data written back to that layout.

A D4RL file holds one array per field, all with the same number of rows ``N`` (one row per
transition, trajectories stored one after the other)::

    observations       [N, *obs_shape]
    actions            [N, *action_shape]
    rewards            [N]
    terminals          [N]   the transition ended the episode in a terminal state
    timeouts           [N]   the episode was cut after this transition (time limit)
    next_observations  [N, *obs_shape]   optional
    infos/...          [N, ...]          optional, nested groups
    metadata/...                         optional (not per transition)

:class:`D4RLExperienceReplay` converts such a file once into a memory-mapped TED TensorDict and
reopens it afterwards; :func:`export_d4rl` writes a TED TensorDict or a replay buffer's content to
the same layout, so that data collected with torchrl can be read by any D4RL-aware code.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, DONE, NEXT, OBSERVATION, REWARD, TERMINATED, TRUNCATED
from torchrl._types import NestedKey
from torchrl.data.datasets.common import (
    EPISODE,
    BaseDatasetExperienceReplay,
    DatasetFormatError,
    DatasetNotFoundError,
    default_root,
    drop_stale_copies,
    ted_from_arrays,
)
from torchrl.data.replay_buffers.query import DEFAULT_TRAJECTORY_KEYS, trajectory_bounds
from torchrl.data.replay_buffers.replay_buffers import ReplayBuffer
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.writers import Writer
from torchrl.data.specs import Bounded, Composite

__all__ = [
    "D4RL_DATASET_DIR_ENV",
    "D4RL_DATASET_URLS",
    "D4RLExperienceReplay",
    "export_d4rl",
]

_has_h5py = importlib.util.find_spec("h5py") is not None

D4RL_DATASET_DIR_ENV = "D4RL_DATASET_DIR"
"""The variable the ``d4rl`` package reads for its download folder (``~/.d4rl/datasets``)."""

_D4RL_DEFAULT_DIR = "~/.d4rl/datasets"
_D4RL_URL = "http://rail.eecs.berkeley.edu/datasets/offline_rl/"


def _standard_urls() -> dict[str, str]:
    urls = {}
    # The MuJoCo locomotion datasets (v2), the ones most papers report on.
    for env in ("halfcheetah", "hopper", "walker2d"):
        for kind in ("random", "medium", "expert", "medium-replay", "medium-expert", "full-replay"):
            file = f"{env}_{kind.replace('-', '_')}-v2.hdf5"
            urls[f"{env}-{kind}-v2"] = f"{_D4RL_URL}gym_mujoco_v2/{file}"
    for size in ("umaze", "medium", "large"):
        urls[f"maze2d-{size}-v1"] = f"{_D4RL_URL}maze2d/maze2d-{size}-sparse-v1.hdf5"
    return urls


D4RL_DATASET_URLS: dict[str, str] = _standard_urls()
"""Download URL of the standard D4RL dataset ids; the file name is the URL's last part."""

_REQUIRED = ("observations", "actions", "rewards", "terminals")
_KNOWN = {*_REQUIRED, "timeouts", "next_observations", "infos", "metadata"}
_METADATA_ARRAY_LIMIT = 64  # metadata arrays up to this size are recorded by value
_TERMINATED_ONLY_DIR = "terminated_as_done"


def _import_h5py() -> Any:
    if not _has_h5py:
        raise ImportError(
            'reading and writing D4RL files needs h5py: pip install "torchrl[offline]"'
        )
    import h5py

    return h5py


class D4RLExperienceReplay(BaseDatasetExperienceReplay):
    """A D4RL dataset (an HDF5 file in D4RL's layout) as a replay buffer of TED transitions.

    The file is found with ``data_file=`` (a path), else with ``from_env=True`` where the ``d4rl``
    package caches its downloads (``$D4RL_DATASET_DIR``, default ``~/.d4rl/datasets``, under
    d4rl's file name for the standard ids), else at ``<root>/<dataset_id>.hdf5``. It is converted
    once, chunk by chunk, into a memory-mapped copy under ``<root>/<dataset_id>/`` (reconverted
    when the file's size or modification time changes); see ``docs/offline_data.rst``.

    ``("next", "terminated")`` is ``terminals``, ``("next", "truncated")`` is
    ``timeouts & ~terminals`` and ``("next", "done")`` their union (``terminated`` alone with
    ``use_truncated_as_done=False``). Trajectories end at every terminal or timeout; their ids
    are in ``"episode"``. ``infos/*`` become ``("info", ...)`` entries, ``metadata/*`` goes to
    :attr:`metadata`. Without ``next_observations``, the next observation is the following row's
    observation within a trajectory; at a trajectory's last row it is unknown and, as TorchRL
    does, zeroed (that row is done: the file's last row, when not terminal or timed out, is
    marked truncated).

    Args:
        dataset_id: the D4RL name (``"halfcheetah-medium-v2"``); names the converted copy.
        batch_size: default number of transitions per :meth:`sample`.

    Keyword Args:
        root: cache directory (default ``$TORCHRL_DATASETS_ROOT/d4rl`` or ``~/.cache/torchrl/d4rl``).
        download: fetch the file from D4RL's server when missing (standard ids only); ``"force"`` reconverts.
        data_file: read this HDF5 file.
        from_env: look for the file in d4rl's download folder.
        use_truncated_as_done: whether timeouts count in ``("next", "done")``.
        split_trajs: store one zero-padded row per trajectory (with a ``"mask"``).
        sampler: default ``RandomSampler()``.
        writer: default ``ImmutableDatasetWriter()``.
        collate_fn: as in :class:`~torchrl.data.ReplayBuffer`.
        pin_memory: as in :class:`~torchrl.data.ReplayBuffer`.
        prefetch: as in :class:`~torchrl.data.ReplayBuffer`.
        transform: as in :class:`~torchrl.data.ReplayBuffer`.

    Examples:
        >>> import tempfile
        >>> from torchrl.data.datasets import ted_from_arrays
        >>> obs = torch.arange(6.0).unsqueeze(-1)
        >>> td = ted_from_arrays(obs, torch.zeros(6, 1), torch.ones(6),
        ...     torch.tensor([0, 0, 1, 0, 0, 0]), torch.zeros(6), obs + 1)
        >>> root = tempfile.TemporaryDirectory()
        >>> path = export_d4rl(td, f"{root.name}/tiny.hdf5")
        >>> data = D4RLExperienceReplay("tiny", batch_size=4, data_file=path, root=root.name)
        >>> len(data), data[:]["episode"].tolist()
        (6, [0, 0, 0, 1, 1, 1])
        >>> root.cleanup()
    """

    cache_name: ClassVar[str] = "d4rl"
    #: Bytes of raw arrays converted at a time (the conversion holds about one chunk in RAM).
    chunk_bytes: ClassVar[int] = 64 * 2**20

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None = None,
        *,
        root: str | Path | None = None,
        download: bool | str = False,
        data_file: str | Path | None = None,
        from_env: bool = False,
        use_truncated_as_done: bool = True,
        split_trajs: bool = False,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        if data_file is not None and from_env:
            raise ValueError("pass either data_file= or from_env=True, not both")
        self.data_file = Path(data_file).expanduser() if data_file is not None else None
        self.from_env = bool(from_env)
        self.use_truncated_as_done = bool(use_truncated_as_done)
        # The base class sets these too; the stale-copy check below needs them first.
        self.dataset_id = dataset_id
        self.root = Path(root).expanduser() if root is not None else default_root(self.cache_name)
        if isinstance(dataset_id, str) and dataset_id and download != "force":
            self._drop_stale_copy()
        super().__init__(
            dataset_id,
            batch_size,
            root=root,
            download=download,
            sampler=sampler,
            writer=writer,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            split_trajs=split_trajs,
        )

    # -- where the file is -------------------------------------------------------------------
    @property
    def data_path_root(self) -> Path:
        """The folder of the converted copies (a sub-folder when timeouts are not dones)."""
        base = self.root / self.dataset_id
        return base if self.use_truncated_as_done else base / _TERMINATED_ONLY_DIR

    @property
    def candidate_paths(self) -> list[Path]:
        """Where the raw HDF5 file is looked for, in order."""
        if self.data_file is not None:
            return [self.data_file]
        if self.from_env:
            folder = Path(os.environ.get(D4RL_DATASET_DIR_ENV) or _D4RL_DEFAULT_DIR).expanduser()
            names = []
            url = D4RL_DATASET_URLS.get(self.dataset_id)
            if url is not None:
                names.append(url.rsplit("/", 1)[-1])
            names.append(f"{self.dataset_id}.hdf5")
            return [folder / name for name in dict.fromkeys(names)]
        return [self.root / f"{self.dataset_id}.hdf5"]

    @property
    def source_path(self) -> Path:
        """The raw file in use: the first candidate that exists, else the first one."""
        paths = self.candidate_paths
        return next((p for p in paths if p.is_file()), paths[0])

    def _source_exists(self) -> bool:
        return any(p.is_file() for p in self.candidate_paths)

    def _missing_message(self) -> str:
        looked = ", ".join(str(p) for p in self.candidate_paths)
        url = D4RL_DATASET_URLS.get(self.dataset_id)
        ways = []
        if url is not None:
            ways.append(f"pass download=True (fetches {url})")
        ways.append(
            f"with the d4rl package, gym.make({self.dataset_id!r}).get_dataset() caches the file "
            f"under ${D4RL_DATASET_DIR_ENV} (default {_D4RL_DEFAULT_DIR}); then pass from_env=True"
        )
        ways.append("write your own data with export_d4rl(data, path) and pass data_file=path")
        return (
            f"D4RL dataset {self.dataset_id!r} not found: no D4RL HDF5 file (observations, actions, "
            f"rewards, terminals, timeouts) at {looked}. To get it: " + "; or ".join(ways) + "."
        )

    def _download(self) -> None:
        url = D4RL_DATASET_URLS.get(self.dataset_id)
        if url is None:
            raise DatasetNotFoundError(
                f"no download URL is known for the D4RL dataset {self.dataset_id!r} (known: "
                f"{', '.join(sorted(D4RL_DATASET_URLS))}). " + self._missing_message()
            )
        dest = self.candidate_paths[0]
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.download-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
                shutil.copyfileobj(response, out, length=2**20)
            os.replace(tmp, dest)
        except OSError as err:
            raise DatasetNotFoundError(
                f"downloading the D4RL dataset {self.dataset_id!r} from {url} to {dest} failed: "
                f"{err}"
            ) from err
        finally:
            tmp.unlink(missing_ok=True)

    def _drop_stale_copy(self) -> None:
        """Removes converted copies made from another version of the source file."""
        if (self.data_path_root / "metadata.json").is_file() and self._source_exists():
            drop_stale_copies(self.data_path_root, _signature(self.source_path))

    # -- conversion ----------------------------------------------------------------------------
    def _convert(self) -> TensorDictBase:
        with _D4RLFile(self.source_path, self.use_truncated_as_done) as source:
            return source.read(0, source.n)

    def _write(self, dest: Path) -> dict[str, Any]:
        path = self.source_path
        with _D4RLFile(path, self.use_truncated_as_done) as source:
            step = source.chunk_rows(self.chunk_bytes)
            first = source.read(0, min(step, source.n))
            out = first[:1].expand(source.n).memmap_like(prefix=dest)
            out[: first.shape[0]] = first
            for start in range(first.shape[0], source.n, step):
                stop = min(start + step, source.n)
                out[start:stop] = source.read(start, stop)
            return {
                "format": "D4RL HDF5",
                "dataset_id": self.dataset_id,
                "source": _signature(path),
                "num_transitions": source.n,
                "num_trajectories": int(source.episode[-1]) + 1,
                "next_observations": "file" if source.has_next else "following row, 0 at ends",
                "has_timeouts": source.has_timeouts,
                "use_truncated_as_done": self.use_truncated_as_done,
                "info_keys": ["/".join(k) for k in source.info_keys],
                "ignored_keys": source.ignored,
                "file_metadata": source.metadata,
            }

    @property
    def specs(self) -> Composite:
        """Specs of one transition, from the data; a bounded action when the file gives bounds.

        Bounds come from ``metadata/action_low`` and ``metadata/action_high`` (or root attributes
        of those names) when the file has them.
        """
        specs = super().specs
        meta = self.metadata.get("file_metadata", {})
        low, high = meta.get("action_low"), meta.get("action_high")
        action = specs[ACTION] if ACTION in specs.keys() else None
        bounds_given = all(isinstance(b, list | float | int) for b in (low, high))
        if action is not None and bounds_given:
            try:
                specs[ACTION] = Bounded(
                    low=torch.as_tensor(low, dtype=torch.float64).expand(action.shape),
                    high=torch.as_tensor(high, dtype=torch.float64).expand(action.shape),
                    shape=action.shape,
                    dtype=action.dtype if action.dtype.is_floating_point else torch.float32,
                )
            except (RuntimeError, ValueError) as err:
                raise DatasetFormatError(
                    f"{self.source_path}: metadata action_low/action_high do not fit actions of "
                    f"shape {list(action.shape)}: {err}"
                ) from err
        return specs


def _signature(path: Path) -> dict[str, Any]:
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


@dataclass
class _D4RLFile:
    """An open, validated D4RL file; :meth:`read` builds TED chunks from its rows."""

    path: Path
    use_truncated_as_done: bool
    n: int = 0
    has_next: bool = False
    has_timeouts: bool = False
    info_keys: list[tuple[str, ...]] = field(default_factory=list)
    info_paths: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __enter__(self) -> _D4RLFile:
        h5py = _import_h5py()
        self._h5py = h5py
        if not self.path.is_file():
            raise DatasetNotFoundError(f"{self.path}: no such D4RL HDF5 file")
        try:
            self.file = h5py.File(self.path, "r")
        except OSError as err:
            raise DatasetFormatError(
                f"{self.path}: not a readable HDF5 file ({err}); expected a D4RL HDF5 file with "
                f"{', '.join(_REQUIRED)} and timeouts"
            ) from err
        try:
            self._check()
        except BaseException:
            self.file.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.file.close()

    # -- validation ---------------------------------------------------------------------------
    def _array(self, name: str, required: bool = True) -> Any:
        if name not in self.file:
            if not required:
                return None
            raise DatasetFormatError(
                f"{self.path}: missing key {name!r}; a D4RL file needs {', '.join(_REQUIRED)} "
                f"(found {sorted(self.file.keys())})"
            )
        obj = self.file[name]
        if not isinstance(obj, self._h5py.Dataset):
            raise DatasetFormatError(f"{self.path}: {name!r} is a group, expected an array")
        if obj.dtype.kind not in "biuf" or obj.dtype.names is not None:
            raise DatasetFormatError(
                f"{self.path}: {name!r} has dtype {obj.dtype}, expected a bool or numeric array"
            )
        if obj.ndim == 0:
            raise DatasetFormatError(f"{self.path}: {name!r} is a scalar, expected [N, ...] rows")
        if name != "observations" and obj.shape[0] != self.n:
            raise DatasetFormatError(
                f"{self.path}: {name!r} has {obj.shape[0]} rows, expected {self.n} (the number of "
                f"rows of 'observations')"
            )
        return obj

    def _check(self) -> None:
        obs = self._array("observations")
        self.n = int(obs.shape[0])
        if self.n == 0:
            raise DatasetFormatError(f"{self.path}: 'observations' has 0 rows, expected some")
        self._array("actions")
        for name in ("rewards", "terminals", "timeouts"):
            arr = self._array(name, required=name != "timeouts")
            if arr is not None and arr.shape[1:] not in ((), (1,)):
                raise DatasetFormatError(
                    f"{self.path}: {name!r} has shape {list(arr.shape)}, expected [{self.n}] or "
                    f"[{self.n}, 1]"
                )
        nxt = self._array("next_observations", required=False)
        if nxt is not None and nxt.shape != obs.shape:
            raise DatasetFormatError(
                f"{self.path}: 'next_observations' has shape {list(nxt.shape)}, expected "
                f"{list(obs.shape)} (the shape of 'observations')"
            )
        self.has_next = nxt is not None
        self.has_timeouts = "timeouts" in self.file
        if "infos" in self.file:
            self._collect_infos(self.file["infos"], ())
        for name in self.file:
            if name in _KNOWN:
                continue
            obj = self.file[name]
            if _is_row_array(obj, self._h5py, self.n):
                self.info_keys.append((name,))
                self.info_paths.append(name)
            else:
                self.ignored.append(name)
        if "metadata" in self.file:
            _collect_metadata(self.file["metadata"], "", self.metadata, self._h5py)
        for name, value in self.file.attrs.items():
            self.metadata.setdefault(str(name), _json_value(value))
        self._flags()

    def _collect_infos(self, group: Any, prefix: tuple[str, ...]) -> None:
        if not isinstance(group, self._h5py.Group):
            self.ignored.append("infos")
            return
        for name, obj in group.items():
            key = (*prefix, name)
            if isinstance(obj, self._h5py.Group):
                self._collect_infos(obj, key)
            elif obj.dtype.kind in "biuf" and obj.ndim and obj.shape[0] == self.n:
                self.info_keys.append(key)
                self.info_paths.append("infos/" + "/".join(key))
            elif obj.dtype.kind in "biuf" and obj.ndim:
                raise DatasetFormatError(
                    f"{self.path}: {'infos/' + '/'.join(key)!r} has {obj.shape[0]} rows, expected "
                    f"{self.n} (the number of rows of 'observations')"
                )
            else:
                self.ignored.append("infos/" + "/".join(key))

    def _flags(self) -> None:
        terminals = self._read_rows("terminals", 0, self.n).reshape(self.n) != 0
        if self.has_timeouts:
            timeouts = self._read_rows("timeouts", 0, self.n).reshape(self.n) != 0
        else:
            timeouts = np.zeros(self.n, dtype=bool)
        truncated = timeouts & ~terminals
        if not self.has_next and not (terminals[-1] or truncated[-1]):
            # The data stops mid-trajectory and the next observation is unknown (zeroed).
            truncated[-1] = True
        ends = terminals | truncated
        episode = np.zeros(self.n, dtype=np.int64)
        np.cumsum(ends[:-1], out=episode[1:])
        self.terminated = torch.from_numpy(terminals)
        self.truncated = torch.from_numpy(truncated)
        self.ends = torch.from_numpy(ends)
        self.episode = torch.from_numpy(episode)

    # -- reading ------------------------------------------------------------------------------
    def _read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        try:
            return np.asarray(self.file[name][start:stop])
        except (OSError, RuntimeError, ValueError) as err:
            raise DatasetFormatError(
                f"{self.path}: reading {name!r} rows {start}:{stop} failed ({err}); the file is "
                f"truncated or corrupt"
            ) from err

    def _tensor(self, name: str, start: int, stop: int) -> torch.Tensor:
        array = self._read_rows(name, start, stop)
        if array.dtype == np.uint16 or array.dtype == np.uint32 or array.dtype == np.uint64:
            array = array.astype(np.int64)  # torch has no unsigned types beyond uint8
        return torch.from_numpy(np.ascontiguousarray(array))

    def chunk_rows(self, chunk_bytes: int) -> int:
        """Rows per chunk so that one chunk of every array takes about ``chunk_bytes``."""
        names = ["observations", "actions", "rewards", *self.info_paths]
        if self.has_next:
            names.append("next_observations")
        row = sum(self.file[k].dtype.itemsize * int(np.prod(self.file[k].shape[1:])) for k in names)
        row += self.file["observations"].dtype.itemsize * int(
            np.prod(self.file["observations"].shape[1:])
        )
        return max(1, chunk_bytes // max(row, 1))

    def read(self, start: int, stop: int) -> TensorDict:
        """Rows ``[start, stop)`` as a flat TED TensorDict."""
        obs = self._tensor("observations", start, stop)
        if self.has_next:
            next_obs = self._tensor("next_observations", start, stop)
        else:
            following = self._tensor("observations", start + 1, min(stop + 1, self.n))
            next_obs = torch.zeros_like(obs)
            next_obs[: following.shape[0]] = following
            unknown = self.ends[start:stop].reshape(-1, *([1] * (obs.ndim - 1)))
            next_obs = torch.where(unknown, torch.zeros((), dtype=obs.dtype), next_obs)
        td = ted_from_arrays(
            obs,
            self._tensor("actions", start, stop),
            self._tensor("rewards", start, stop).reshape(-1),
            self.terminated[start:stop],
            self.truncated[start:stop],
            next_obs,
            episode=self.episode[start:stop],
        )
        if not self.use_truncated_as_done:
            td.set((NEXT, DONE), self.terminated[start:stop].unsqueeze(-1).clone())
        if self.info_keys:
            info = TensorDict(batch_size=[stop - start])
            for key, path in zip(self.info_keys, self.info_paths):
                info.set(key, self._tensor(path, start, stop))
            td.set("info", info)
        return td


def _is_row_array(obj: Any, h5py: Any, n: int) -> bool:
    return (
        isinstance(obj, h5py.Dataset)
        and obj.dtype.kind in "biuf"
        and obj.ndim > 0
        and obj.shape[0] == n
    )


def _json_value(value: Any) -> Any:
    """A JSON-able form of an HDF5 attribute or small dataset (big arrays: shape and dtype)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "SO" and value.size <= _METADATA_ARRAY_LIMIT:
            return [_json_value(v) for v in value.reshape(-1).tolist()]
        if value.size <= _METADATA_ARRAY_LIMIT and value.dtype.kind in "biuf":
            return value.tolist()
        return {"shape": list(value.shape), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def _collect_metadata(group: Any, prefix: str, out: dict[str, Any], h5py: Any) -> None:
    for name, value in group.attrs.items():
        out[f"{prefix}{name}"] = _json_value(value)
    if not isinstance(group, h5py.Group):
        return
    for name, obj in group.items():
        if isinstance(obj, h5py.Group):
            _collect_metadata(obj, f"{prefix}{name}/", out, h5py)
        elif obj.size <= _METADATA_ARRAY_LIMIT:
            out[f"{prefix}{name}"] = _json_value(obj[()])
        else:
            out[f"{prefix}{name}"] = {"shape": list(obj.shape), "dtype": str(obj.dtype)}


# -- export ------------------------------------------------------------------------------------
def export_d4rl(
    data: TensorDictBase | ReplayBuffer,
    path: str | Path,
    *,
    observation_key: NestedKey = OBSERVATION,
    action_key: NestedKey = ACTION,
) -> Path:
    """Writes TED transitions (a TensorDict or a replay buffer's content) as a D4RL HDF5 file.

    ``terminals`` come from ``("next", "terminated")`` and ``timeouts`` from
    ``("next", "truncated")``; ``next_observations`` from ``("next", observation_key)`` when
    present. Every other tensor entry is written under ``infos/`` (an ``"info"`` sub-TensorDict
    at its root, others by their key path); ``"episode"`` and the root done flags are not
    written. A trajectory boundary that no flag marks (a new trajectory id, or the end of one
    env's row in ``[B, T]`` data) is written as a timeout, since D4RL can only tell trajectories
    apart by flags; the very last row is left as it is. ``metadata/`` records the torchrl
    version and the keys. The file is written under a temporary name and renamed.

    Args:
        data: a TensorDict of batch ``[N]`` or ``[B, T]`` (flattened env by env), or a
            :class:`~torchrl.data.ReplayBuffer` whose storage content is written in insertion order.
        path: the file to write (replaced if it exists).

    Keyword Args:
        observation_key: the observation entry (a tensor; dict observations are refused).
        action_key: the action entry.

    Returns:
        The path of the written file.

    Examples:
        >>> import tempfile, h5py
        >>> from torchrl.data.datasets import ted_from_arrays
        >>> obs = torch.arange(4.0).unsqueeze(-1)
        >>> td = ted_from_arrays(obs, torch.zeros(4, 1), torch.ones(4),
        ...     torch.tensor([0, 1, 0, 0]), torch.tensor([0, 0, 0, 1]), obs + 1)
        >>> tmp = tempfile.TemporaryDirectory()
        >>> path = export_d4rl(td, f"{tmp.name}/out.hdf5")
        >>> with h5py.File(path) as f:
        ...     f["terminals"][:].tolist(), f["timeouts"][:].tolist()
        ([False, True, False, False], [False, False, False, True])
        >>> tmp.cleanup()
    """
    h5py = _import_h5py()
    flat, series_ends = _flat_content(data)
    n = flat.shape[0]
    obs_key, act_key = _key_tuple(observation_key), _key_tuple(action_key)
    obs = _required(flat, obs_key, "observation_key")
    action = _required(flat, act_key, "action_key")
    reward = _required(flat, (NEXT, REWARD), "the reward")
    if reward.numel() != n:
        raise ValueError(
            f"export_d4rl: ('next', 'reward') must hold one value per transition, got shape "
            f"{list(reward.shape)} for {n} transitions"
        )
    terminals, timeouts = _d4rl_flags(flat, series_ends)
    next_obs = flat.get((NEXT, *obs_key), None)
    written = {obs_key, act_key, (EPISODE,), (DONE,), (TERMINATED,), (TRUNCATED,)}
    written |= {(NEXT, k) for k in (REWARD, DONE, TERMINATED, TRUNCATED)} | {(NEXT, *obs_key)}
    columns: dict[str, torch.Tensor] = {
        "observations": obs,
        "actions": action,
        "rewards": reward.reshape(n),
        "terminals": terminals,
        "timeouts": timeouts,
    }
    if isinstance(next_obs, torch.Tensor):
        columns["next_observations"] = next_obs
    all_keys = []
    for key, value in flat.items(include_nested=True, leaves_only=True):
        key_t = _key_tuple(key)
        all_keys.append("/".join(key_t))
        if key_t in written or not isinstance(value, torch.Tensor):
            continue
        name = "infos/" + "/".join(key_t[1:] if key_t[0] == "info" and len(key_t) > 1 else key_t)
        if name in columns:
            raise ValueError(
                f"export_d4rl: entries {name!r} and {'/'.join(key_t)!r} would both be written to "
                f"{name!r}; rename one of them"
            )
        columns[name] = value
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with h5py.File(tmp, "w") as f:
            for name, value in columns.items():
                _write_column(f, name, value)
            meta = f.create_group("metadata")
            meta["torchrl_version"] = _torchrl_version()
            meta["writer"] = "torchrl.data.datasets.export_d4rl"
            meta["observation_key"] = "/".join(obs_key)
            meta["action_key"] = "/".join(act_key)
            meta["keys"] = json.dumps(sorted(all_keys))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _key_tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def _required(flat: TensorDictBase, key: tuple[str, ...], what: str) -> torch.Tensor:
    value = flat.get(key, None)
    if value is None:
        keys = sorted("/".join(_key_tuple(k)) for k in flat.keys(True, True))
        raise KeyError(f"export_d4rl: {what} entry {'/'.join(key)!r} is not in the data ({keys})")
    if not isinstance(value, torch.Tensor) or isinstance(value, TensorDictBase):
        raise TypeError(
            f"export_d4rl: {what} entry {'/'.join(key)!r} must be a tensor (D4RL files hold one "
            f"array per field), got {type(value).__name__}"
        )
    return value


def _flat_content(data: Any) -> tuple[TensorDictBase, torch.Tensor | None]:
    """The transitions as batch ``[N]`` and the rows that end one env's series (``[B, T]`` data)."""
    if isinstance(data, ReplayBuffer):
        data = _buffer_content(data)
    if not isinstance(data, TensorDictBase):
        raise TypeError(
            f"export_d4rl: data must be a TensorDict or a ReplayBuffer, got {type(data).__name__}"
        )
    if data.batch_dims == 1:
        if data.shape[0] == 0:
            raise ValueError("export_d4rl: the data holds no transitions")
        return data, None
    if data.batch_dims == 2:
        n_series, length = data.shape
        if n_series * length == 0:
            raise ValueError("export_d4rl: the data holds no transitions")
        series_ends = torch.zeros(n_series, length, dtype=torch.bool)
        series_ends[:, -1] = True
        return data.reshape(-1), series_ends.reshape(-1)
    raise ValueError(
        f"export_d4rl: expected transitions of batch [N] or [B, T], got batch size "
        f"{list(data.batch_size)}"
    )


def _buffer_content(buffer: ReplayBuffer) -> TensorDictBase:
    storage = buffer.storage
    if len(storage) == 0:
        raise ValueError("export_d4rl: the replay buffer is empty")
    filled = storage.shape[-1]
    cursor = int(buffer.writer.state_dict().get("cursor", 0))
    # A full ring's oldest item sits at the writer's cursor (0 when it never wrapped).
    order = torch.arange(filled)
    if filled == storage.slots:
        order = (order + cursor) % filled
    if storage.ndim == 1:
        content = storage.get(order)
    else:
        lead = storage.shape[:-1]
        grids = torch.meshgrid(*[torch.arange(s) for s in lead], order, indexing="ij")
        content = storage.get(tuple(grids))
    if isinstance(content, list):
        content = torch.stack(content)
    if not isinstance(content, TensorDictBase):
        raise TypeError(
            f"export_d4rl: the replay buffer must hold TensorDicts, got {type(content).__name__}"
        )
    if storage.ndim > 2:
        content = content.reshape(-1, filled)
    return content


def _flag(flat: TensorDictBase, name: str) -> torch.Tensor | None:
    value = flat.get((NEXT, name), None)
    if value is None:
        return None
    n = flat.shape[0]
    return value.reshape(n, -1).bool().any(-1)


def _d4rl_flags(
    flat: TensorDictBase, series_ends: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    n = flat.shape[0]
    terminated, truncated, done = (_flag(flat, k) for k in (TERMINATED, TRUNCATED, DONE))
    zeros = torch.zeros(n, dtype=torch.bool)
    if truncated is None:
        truncated = zeros.clone()
    if terminated is None:
        terminated = done & ~truncated if done is not None else zeros.clone()
    cuts = zeros.clone() if series_ends is None else series_ends.clone()
    if any(k in flat.keys(True, True) for k in DEFAULT_TRAJECTORY_KEYS):
        bounds = trajectory_bounds(flat)
        cuts[bounds[:-1, 1] - 1] = True
    cuts[-1] = False  # the data may stop mid-trajectory: no flag is invented for its last row
    return terminated, truncated | (cuts & ~terminated)


def _write_column(f: Any, name: str, value: torch.Tensor) -> None:
    value = value.detach()
    if value.dtype == torch.bfloat16:
        value = value.float()
    n = value.shape[0]
    sample = value[:1].cpu().numpy()
    dset = f.create_dataset(name, shape=(n, *value.shape[1:]), dtype=sample.dtype)
    row_bytes = max(sample.nbytes, 1)
    step = max(1, (64 * 2**20) // row_bytes)
    for start in range(0, n, step):
        stop = min(start + step, n)
        dset[start:stop] = value[start:stop].cpu().numpy()


def _torchrl_version() -> str:
    try:
        return importlib.metadata.version("torchrl")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
