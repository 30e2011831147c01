"""Minari datasets as replay buffers, and our own data written as Minari datasets.

:class:`MinariExperienceReplay` reads a dataset from Minari's local store (the folder named by
``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``) with the ``minari`` package, converts it
once, episode by episode, into a memory-mapped TED copy, and reopens that copy afterwards without
touching Minari again. :func:`export_minari` goes the other way: it cuts a TED batch (a collector's
output or a replay buffer's content) into episodes and writes them with Minari's own writer, so
that any Minari tool can read them.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
from torchrl.data.replay_buffers.utils import nested_key_str
from torchrl.data.replay_buffers.writers import RoundRobinWriter, Writer
from torchrl.data.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    TensorSpec,
    Unbounded,
)

__all__ = [
    "MINARI_DATASETS_PATH_ENV",
    "MinariExperienceReplay",
    "export_minari",
    "minari_dataset_path",
    "space_to_spec",
]

_has_minari = importlib.util.find_spec("minari") is not None

MINARI_DATASETS_PATH_ENV = "MINARI_DATASETS_PATH"
"""Environment variable naming Minari's local store (Minari's own default: ``~/.minari/datasets``)."""

_INSTALL_HINT = 'pip install "torchrl[offline]"'
_MINARI_MAIN_FILE = "main_data.hdf5"  # the hdf5 backend's one data file
_MINARI_METADATA = "metadata.json"
_EPISODE_FIELDS = ("observations", "actions", "rewards", "terminations", "truncations")
_INFO = "info"  # where numeric Minari infos are stored (root and under "next")


def _import_minari() -> Any:
    if not _has_minari:
        raise ImportError(
            f"reading or writing Minari datasets needs the minari package: {_INSTALL_HINT}"
        )
    import minari

    return minari


def minari_dataset_path(dataset_id: str) -> Path:
    """Returns the folder where Minari keeps ``dataset_id`` locally (nothing is created).

    ``$MINARI_DATASETS_PATH/<dataset_id>`` when that variable is set, else
    ``~/.minari/datasets/<dataset_id>``, as Minari itself decides. The data lives in its ``data``
    subfolder (``metadata.json`` and, for the hdf5 backend, ``main_data.hdf5``).

    Args:
        dataset_id: a Minari dataset id, e.g. ``"mujoco/pusher/expert-v0"``.

    Returns:
        The dataset's folder.

    Examples:
        >>> minari_dataset_path("cartpole/random-v0").parts[-2:]
        ('cartpole', 'random-v0')
    """
    base = os.environ.get(MINARI_DATASETS_PATH_ENV)
    root = Path(base).expanduser() if base else Path("~/.minari/datasets").expanduser()
    return root / dataset_id


# -- gymnasium spaces <-> specs ---------------------------------------------------------------------
def _torch_dtype(np_dtype: Any) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=np_dtype)).dtype


def space_to_spec(space: Any) -> TensorSpec:
    """Maps a gymnasium space to the spec of one value of it.

    ``Box`` becomes :class:`Bounded` when all its bounds are finite, else :class:`Unbounded`;
    ``Discrete`` becomes :class:`Categorical` (a :class:`Bounded` integer spec when its ``start``
    is not 0), ``MultiDiscrete`` :class:`MultiCategorical`, ``MultiBinary`` :class:`Binary`, and
    ``Dict`` / ``Tuple`` a :class:`Composite` (a ``Tuple``'s entries are keyed ``"0"``, ``"1"``,
    ... as :class:`MinariExperienceReplay` stores them).

    Args:
        space: a ``gymnasium.spaces.Space``.

    Returns:
        The spec (batch-less: its shape is the space's shape).

    Raises:
        TypeError: for a space without a tensor form (``Text``, ``Graph``, ``Sequence``, ...).

    Examples:
        >>> import gymnasium as gym
        >>> space_to_spec(gym.spaces.Discrete(3))
        Categorical(n=3, shape=torch.Size([]), dtype=torch.int64, device=None)
        >>> space_to_spec(gym.spaces.Box(-1.0, 1.0, shape=(2,))).shape
        torch.Size([2])
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        dtype = _torch_dtype(space.dtype)
        low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        if bool(torch.isfinite(low).all()) and bool(torch.isfinite(high).all()):
            return Bounded(low, high, shape=space.shape, dtype=dtype)
        return Unbounded(shape=space.shape, dtype=dtype)
    if isinstance(space, spaces.Discrete):
        dtype = _torch_dtype(space.dtype)
        start, n = int(space.start), int(space.n)
        if start == 0:
            return Categorical(n, dtype=dtype)
        return Bounded(start, start + n - 1, shape=(), dtype=dtype)
    if isinstance(space, spaces.MultiDiscrete):
        dtype = _torch_dtype(space.dtype)
        if np.any(np.asarray(space.start) != 0):
            first = torch.as_tensor(np.asarray(space.start))
            return Bounded(first, first + torch.as_tensor(space.nvec) - 1, dtype=dtype)
        return MultiCategorical(torch.as_tensor(space.nvec), dtype=dtype)
    if isinstance(space, spaces.MultiBinary):
        return Binary(shape=space.shape, dtype=_torch_dtype(space.dtype))
    if isinstance(space, spaces.Dict):
        return Composite({key: space_to_spec(sub) for key, sub in space.spaces.items()})
    if isinstance(space, spaces.Tuple):
        return Composite({str(i): space_to_spec(sub) for i, sub in enumerate(space.spaces)})
    raise TypeError(
        f"space_to_spec: no tensor spec for a {type(space).__name__} space ({space}); supported: "
        "Box, Discrete, MultiDiscrete, MultiBinary, Dict, Tuple"
    )


def _value_shape(space: Any) -> tuple[int, ...] | None:
    """Shape of one value of a leaf space (None for Dict/Tuple)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return ()
    if isinstance(space, (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)):
        return tuple(space.shape)
    return None


# -- reading ------------------------------------------------------------------------------------------
def _as_tensor(value: Any, where: str) -> torch.Tensor:
    array = np.asarray(value)
    if array.dtype == object or array.dtype.kind in "SUV":
        raise DatasetFormatError(
            f"{where}: expected numeric arrays, got dtype {array.dtype} (text or object data has "
            "no tensor form)"
        )
    return torch.from_numpy(np.ascontiguousarray(array))


def _read_space_value(value: Any, space: Any, length: int, where: str) -> torch.Tensor | TensorDict:
    """One episode's values of ``space`` (leading dim ``length``) as a tensor or TensorDict."""
    from gymnasium import spaces

    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        if isinstance(space, spaces.Dict):
            items = list(space.spaces.items())
            if not isinstance(value, dict):
                raise DatasetFormatError(
                    f"{where}: expected a group of {sorted(space.spaces)} (a Dict space), got "
                    f"{type(value).__name__}"
                )
            missing = [k for k, _ in items if k not in value]
            if missing:
                raise DatasetFormatError(
                    f"{where}: missing {missing} (the Dict space has {sorted(space.spaces)})"
                )
            subvalues = [value[k] for k, _ in items]
            keys = [k for k, _ in items]
        else:
            if not isinstance(value, (tuple, list)) or len(value) != len(space.spaces):
                raise DatasetFormatError(
                    f"{where}: expected {len(space.spaces)} entries (a Tuple space), got "
                    f"{type(value).__name__}"
                )
            subvalues = list(value)
            keys = [str(i) for i in range(len(space.spaces))]
        subspaces = list(space.spaces.values()) if isinstance(space, spaces.Dict) else space.spaces
        return TensorDict(
            {
                key: _read_space_value(sub, subspace, length, f"{where}/{key}")
                for key, sub, subspace in zip(keys, subvalues, subspaces)
            },
            batch_size=[length],
        )
    shape = _value_shape(space)
    if shape is None:
        raise DatasetFormatError(
            f"{where}: {type(space).__name__} spaces have no tensor form; supported: Box, "
            "Discrete, MultiDiscrete, MultiBinary, Dict, Tuple"
        )
    tensor = _as_tensor(value, where)
    if tuple(tensor.shape) != (length, *shape):
        raise DatasetFormatError(
            f"{where}: expected shape {[length, *shape]} ({length} entries of the space's shape "
            f"{list(shape)}), got {list(tensor.shape)}"
        )
    return tensor


def _read_infos(infos: Any, steps: int, where: str, skipped: set[str]) -> TensorDict | None:
    """Numeric info entries of one episode as a TensorDict of ``steps + 1`` or ``steps`` rows."""
    if not infos:
        return None
    leaves: dict[str, Any] = {}
    for key, value in infos.items():
        if isinstance(value, dict):
            sub = _read_infos(value, steps, f"{where}/{key}", skipped)
            if sub is not None:
                leaves[key] = sub
            continue
        array = np.asarray(value)
        if array.dtype == object or array.dtype.kind in "SUV" or array.ndim == 0:
            skipped.add(f"{where}/{key}")
            continue
        leaves[key] = torch.from_numpy(np.ascontiguousarray(array))
    if not leaves:
        return None
    lengths = {v.shape[0] for v in leaves.values()}
    if len(lengths) != 1 or not lengths <= {steps, steps + 1}:
        raise DatasetFormatError(
            f"{where}: expected every info entry to hold {steps + 1} (one per observation) or "
            f"{steps} (one per step) rows, got lengths "
            f"{ {k: v.shape[0] for k, v in leaves.items()} }"
        )
    return TensorDict(leaves, batch_size=[lengths.pop()])


def _episode_to_ted(
    episode: Any, observation_space: Any, action_space: Any, where: str, skipped: set[str]
) -> TensorDict:
    """A Minari episode (``T`` steps, ``T + 1`` observations) as ``T`` flat TED transitions."""
    rewards = _as_tensor(episode.rewards, f"{where}/rewards")
    if rewards.ndim != 1:
        raise DatasetFormatError(
            f"{where}/rewards: expected one reward per step (shape [T]), got {list(rewards.shape)}"
        )
    steps = rewards.shape[0]
    if steps == 0:
        raise DatasetFormatError(f"{where}: the episode has no steps")
    flags = []
    for name in ("terminations", "truncations"):
        flag = _as_tensor(getattr(episode, name), f"{where}/{name}")
        if tuple(flag.shape) != (steps,):
            raise DatasetFormatError(
                f"{where}/{name}: expected shape [{steps}] (one flag per step, as rewards), got "
                f"{list(flag.shape)}"
            )
        flags.append(flag.bool())
    observations = _read_space_value(
        episode.observations, observation_space, steps + 1, f"{where}/observations"
    )
    actions = _read_space_value(episode.actions, action_space, steps, f"{where}/actions")
    if rewards.is_floating_point() and rewards.dtype != torch.float32:
        rewards = rewards.float()
    td = ted_from_arrays(
        observations[:-1],
        actions,
        rewards,
        flags[0],
        flags[1],
        observations[1:],
        episode=torch.full((steps,), int(episode.id), dtype=torch.int64),
    )
    infos = _read_infos(episode.infos, steps, f"{where}/infos", skipped)
    if infos is not None:
        if infos.shape[0] == steps + 1:
            td[_INFO] = infos[:-1]
            td[NEXT, _INFO] = infos[1:]
        else:
            td[NEXT, _INFO] = infos
    return td


class MinariExperienceReplay(BaseDatasetExperienceReplay):
    """A Minari dataset from Minari's local store as a replay buffer of TED transitions.

    The dataset is read with the ``minari`` package from ``$MINARI_DATASETS_PATH/<dataset_id>``
    (Minari's default: ``~/.minari/datasets``) and converted once, an episode at a time, into a
    memory-mapped copy under ``<root>/<dataset_id>``; later instances reopen that copy instantly,
    without Minari, unless the Minari dataset changed since (then it is converted again). ``"episode"`` holds Minari's episode ids; ``terminations`` / ``truncations``
    become ``("next", "terminated")`` / ``("next", "truncated")`` (``done`` is their union); Dict and
    Tuple observations stay nested under ``"observation"`` and ``("next", "observation")``; numeric
    ``infos`` land under ``"info"`` / ``("next", "info")``. :attr:`specs` maps the dataset's spaces
    (:func:`space_to_spec`); :attr:`metadata` holds Minari's metadata (env spec, step counts, ...).

    Args:
        dataset_id: the Minari dataset id, e.g. ``"mujoco/pusher/expert-v0"``.
        batch_size: default number of transitions per :meth:`sample`.
        root: cache folder of converted copies (default ``$TORCHRL_DATASETS_ROOT/minari``).
        download: when the dataset is not in Minari's store, fetch it with Minari's download
            (needs network); ``"force"`` also converts again. Never attempted unless asked.
        load_from_local_minari: read Minari's local store; ``False`` ignores a local copy, so the
            data must come from ``download=True``.
        split_trajs: store one zero-padded row per episode (with a ``"mask"`` entry).
        sampler: default ``RandomSampler()``.
        writer: default ``ImmutableDatasetWriter()``.
        collate_fn: as in :class:`ReplayBuffer`.
        pin_memory: as in :class:`ReplayBuffer`.
        prefetch: as in :class:`ReplayBuffer`.
        transform: as in :class:`ReplayBuffer`.

    Raises:
        DatasetNotFoundError: the dataset is in neither the cache nor Minari's store (the message
            says where it was looked for and how to obtain it).
        DatasetFormatError: the Minari files are damaged (the message names file, key, expectation).
        ImportError: the ``minari`` package is missing and a conversion is needed.

    Examples:
        >>> data = MinariExperienceReplay("cartpole/random-v0", batch_size=32)  # doctest: +SKIP
        >>> data.sample()["next", "done"].shape  # doctest: +SKIP
        torch.Size([32, 1])
    """

    cache_name = "minari"

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None = None,
        *,
        root: str | Path | None = None,
        download: bool | str = False,
        load_from_local_minari: bool = True,
        split_trajs: bool = False,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Any = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Any = None,
    ) -> None:
        self.load_from_local_minari = bool(load_from_local_minari)
        # The base class sets these too; the stale-copy check needs them before it converts.
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

    @property
    def minari_path(self) -> Path:
        """The dataset's folder in Minari's local store (its data is under ``data/``)."""
        return minari_dataset_path(self.dataset_id)

    @property
    def specs(self) -> Composite:
        """Specs of one transition, with observation and action specs from the dataset's spaces."""
        specs = super().specs
        meta = self.metadata
        if "observation_space" not in meta or "action_space" not in meta:
            return specs
        from minari.serialization import deserialize_space

        observation_spec = space_to_spec(deserialize_space(meta["observation_space"]))
        specs[OBSERVATION] = observation_spec
        specs[NEXT, OBSERVATION] = observation_spec.clone()
        specs[ACTION] = space_to_spec(deserialize_space(meta["action_space"]))
        return specs

    def _drop_stale_copy(self) -> None:
        """Removes converted copies made from another version of the Minari dataset."""
        if (self.data_path_root / "metadata.json").is_file() and self._source_exists():
            drop_stale_copies(self.data_path_root, _signature(self.minari_path / "data"))

    # -- hooks ----------------------------------------------------------------------------------
    def _source_exists(self) -> bool:
        return self.load_from_local_minari and (self.minari_path / "data").is_dir()

    def _missing_message(self) -> str:
        store = os.environ.get(MINARI_DATASETS_PATH_ENV)
        where = (
            f"${MINARI_DATASETS_PATH_ENV}={store}"
            if store
            else f"${MINARI_DATASETS_PATH_ENV} is unset, so Minari's default ~/.minari/datasets"
        )
        head = f"Minari dataset {self.dataset_id!r} not found"
        if not self.load_from_local_minari:
            head += " (load_from_local_minari=False: the local Minari store is not read)"
        return (
            f"{head}: expected a Minari dataset (format 'minari': data/{_MINARI_METADATA} and "
            f"data/{_MINARI_MAIN_FILE} for the hdf5 backend) in {self.minari_path / 'data'} "
            f"({where}), and no converted copy in {self.data_path_root}. To get it: "
            f"`minari download {self.dataset_id}` when online (or download=True here), or write "
            "one from your own data with "
            f"torchrl.data.datasets.minari_data.export_minari(data, {self.dataset_id!r}, env_id=...)."
        )

    def _download(self) -> None:
        minari = _import_minari()
        try:
            minari.download_dataset(self.dataset_id, force_download=self.download == "force")
        except Exception as err:
            raise DatasetNotFoundError(
                f"downloading {self.dataset_id!r} with minari failed ({type(err).__name__}: "
                f"{err}). " + self._missing_message()
            ) from err

    def _open(self) -> tuple[Any, dict[str, Any]]:
        """Checks the Minari files, then opens them with minari; returns (dataset, raw metadata)."""
        data_dir = self.minari_path / "data"
        meta_file = data_dir / _MINARI_METADATA
        if not meta_file.is_file():
            raise DatasetFormatError(
                f"{meta_file}: missing; a Minari dataset keeps its spaces, data format and step "
                f"counts in data/{_MINARI_METADATA}"
            )
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError) as err:
            raise DatasetFormatError(f"{meta_file}: not readable JSON ({err})") from err
        if not isinstance(meta, dict):
            raise DatasetFormatError(f"{meta_file}: expected a JSON object, got {type(meta)}")
        for key, kind in (("data_format", str), ("total_steps", int), ("total_episodes", int)):
            if not isinstance(meta.get(key), kind):
                raise DatasetFormatError(
                    f"{meta_file}: key {key!r} must be a {kind.__name__}, got {meta.get(key)!r}"
                )
        if "env_spec" not in meta and not {"observation_space", "action_space"} <= meta.keys():
            raise DatasetFormatError(
                f"{meta_file}: expected 'observation_space' and 'action_space' (or 'env_spec'), "
                f"found keys {sorted(meta)}"
            )
        if meta["data_format"] == "hdf5":
            _check_hdf5(data_dir / _MINARI_MAIN_FILE, meta["total_episodes"])
        minari = _import_minari()
        try:
            dataset = minari.load_dataset(self.dataset_id)
        except Exception as err:
            raise DatasetFormatError(
                f"{data_dir}: minari cannot open dataset {self.dataset_id!r} "
                f"({type(err).__name__}: {err})"
            ) from err
        return dataset, meta

    def _episodes(
        self, dataset: Any, meta: dict[str, Any], skipped: set[str]
    ) -> Iterator[TensorDict]:
        data_file = self.minari_path / "data" / _MINARI_MAIN_FILE
        where_file = data_file if meta["data_format"] == "hdf5" else data_file.parent
        obs_space, act_space = dataset.observation_space, dataset.action_space
        episodes = iter(dataset.iterate_episodes())
        for i in range(meta["total_episodes"]):
            where = f"{where_file}: episode_{i}"
            try:
                episode = next(episodes)
            except StopIteration:
                raise DatasetFormatError(
                    f"{where_file}: metadata.json says {meta['total_episodes']} episodes, the "
                    f"data holds {i}"
                ) from None
            except DatasetFormatError:
                raise
            except Exception as err:
                raise DatasetFormatError(
                    f"{where}: minari cannot decode it ({type(err).__name__}: {err})"
                ) from err
            yield _episode_to_ted(episode, obs_space, act_space, where, skipped)

    def _convert(self) -> TensorDictBase:
        dataset, meta = self._open()
        episodes: list[TensorDictBase] = list(self._episodes(dataset, meta, set()))
        return TensorDict.cat(episodes)

    def _write(self, dest: Path) -> dict[str, Any]:
        skipped: set[str] = set()
        dataset, meta = self._open()
        total = meta["total_steps"]
        meta_file = self.minari_path / "data" / _MINARI_METADATA
        if total <= 0:
            raise DatasetFormatError(f"{meta_file}: 'total_steps' is {total}, the dataset is empty")
        out: TensorDictBase | None = None
        pos = 0
        for td in self._episodes(dataset, meta, skipped):
            n = td.shape[0]
            if out is None:
                # Sparse memory-mapped files of the final size, filled an episode at a time: the
                # dataset is never held in memory whole.
                out = td[:1].expand(total).memmap_like(prefix=dest)
            if pos + n > total:
                raise DatasetFormatError(
                    f"{meta_file}: 'total_steps' is {total}, but the episodes hold more steps"
                )
            try:
                out[pos : pos + n] = td
            except (KeyError, RuntimeError, ValueError) as err:
                raise DatasetFormatError(
                    f"episode {int(td[EPISODE][0])} of {self.minari_path}: its entries differ "
                    f"from the first episode's ({err})"
                ) from err
            pos += n
        if pos != total:
            raise DatasetFormatError(
                f"{meta_file}: 'total_steps' is {total}, the episodes hold {pos} steps"
            )
        meta = dict(meta)
        meta.update(
            {
                "format": "minari",
                "minari_path": str(self.minari_path),
                "source": _signature(self.minari_path / "data"),
                "skipped_info_keys": sorted(skipped),
            }
        )
        return meta


def _signature(data_dir: Path) -> dict[str, Any]:
    """Identifies one version of a Minari dataset: Minari rewrites metadata.json on every update."""
    out: dict[str, Any] = {"path": str(data_dir.resolve())}
    for name in (_MINARI_METADATA, _MINARI_MAIN_FILE):
        path = data_dir / name
        if path.is_file():
            stat = path.stat()
            out[name] = [stat.st_size, stat.st_mtime_ns]
    return out


def _check_hdf5(path: Path, total_episodes: int) -> None:
    """The hdf5 backend's file opens and holds every episode's groups (no data is read)."""
    import h5py

    if not path.is_file():
        raise DatasetFormatError(
            f"{path}: missing; an hdf5-backed Minari dataset keeps its episodes in "
            f"data/{_MINARI_MAIN_FILE}"
        )
    try:
        file = h5py.File(path, "r")
    except OSError as err:
        raise DatasetFormatError(f"{path}: not a readable HDF5 file ({err})") from err
    with file:
        for i in range(total_episodes):
            group = file.get(f"episode_{i}")
            if not isinstance(group, h5py.Group):
                raise DatasetFormatError(
                    f"{path}: key 'episode_{i}' is missing (metadata.json says {total_episodes} "
                    "episodes, stored as groups episode_0, episode_1, ...)"
                )
            for field in _EPISODE_FIELDS:
                if field not in group:
                    raise DatasetFormatError(
                        f"{path}: key 'episode_{i}/{field}' is missing (each episode holds "
                        f"{', '.join(_EPISODE_FIELDS)})"
                    )


# -- writing --------------------------------------------------------------------------------------------
def _flat_source(data: Any) -> TensorDictBase:
    """A flat ``[N]`` TensorDict of transitions, in time order, from a TensorDict or a buffer."""
    if isinstance(data, ReplayBuffer):
        n = len(data)
        if n == 0:
            raise ValueError("export_minari: the replay buffer is empty")
        content = data.storage.get(torch.arange(n))
        if not isinstance(content, TensorDictBase):
            raise TypeError(
                "export_minari: the replay buffer must store TensorDicts, got "
                f"{type(content).__name__}"
            )
        capacity = int(data.storage.max_size)
        if isinstance(data.writer, RoundRobinWriter) and data.write_count > capacity == n:
            # A full round-robin buffer has overwritten its oldest items: its oldest surviving
            # item sits at the write cursor, so rotate to put the items back in time order.
            start = data.write_count % capacity
            content = torch.cat([content[start:], content[:start]])
        return content
    if not isinstance(data, TensorDictBase):
        raise TypeError(
            f"export_minari: data must be a TensorDict or a replay buffer, got {type(data).__name__}"
        )
    if data.batch_dims == 0 or data.numel() == 0:
        raise ValueError(
            f"export_minari: data must hold transitions, got batch size {list(data.batch_size)}"
        )
    if data.batch_dims == 1:
        return data
    # Time is the last batch dim: each row's steps are kept together, and a row's last, unfinished
    # trajectory must not merge with the next row's first one.
    flat = data.reshape(-1)
    if not any(key in data.keys(True) for key in DEFAULT_TRAJECTORY_KEYS):
        done = _done_flags(data).reshape(-1, data.shape[-1])
        rows, steps = done.shape
        local = torch.zeros(rows, steps, dtype=torch.int64)
        local[:, 1:] = done[:, :-1].to(torch.int64).cumsum(-1)
        row_offset = torch.arange(rows).unsqueeze(-1) * (steps + 1)
        flat = flat.copy()
        flat.set(EPISODE, (local + row_offset).reshape(-1))
    return flat


def _done_flags(data: TensorDictBase) -> torch.Tensor:
    """``("next", "done")`` (else terminated | truncated), with the trailing 1 dropped."""
    done = data.get((NEXT, DONE), None)
    if done is None:
        parts = [data.get((NEXT, k), None) for k in (TERMINATED, TRUNCATED)]
        found = [p for p in parts if p is not None]
        if not found:
            raise KeyError(
                "export_minari: data has no ('next', 'done'), ('next', 'terminated') or "
                f"('next', 'truncated') entry; its keys: {sorted(map(str, data.keys(True, True)))}"
            )
        done = found[0].bool()
        for p in found[1:]:
            done = done | p.bool()
    return done.reshape(*data.shape, -1).bool().any(-1)


def _infer_space(value: Any, key: str) -> Any:
    """A gymnasium space that holds every value seen (leading dim: transitions)."""
    from gymnasium import spaces

    if isinstance(value, TensorDictBase):
        return spaces.Dict({k: _infer_space(v, f"{key}/{k}") for k, v in value.items()})
    shape = tuple(value.shape[1:])
    if value.dtype == torch.bool:
        return spaces.MultiBinary(list(shape)) if shape else spaces.Discrete(2)
    if value.is_floating_point():
        np_dtype = value[:0].detach().numpy().dtype if value.dtype != torch.bfloat16 else np.float32
        return spaces.Box(-np.inf, np.inf, shape=shape, dtype=np_dtype)
    low, high = int(value.min()), int(value.max())
    np_dtype = value[:0].detach().numpy().dtype
    if low < 0:
        return spaces.Box(low, high, shape=shape, dtype=np_dtype)
    if not shape:
        return spaces.Discrete(high + 1)
    nvec = value.reshape(value.shape[0], -1).amax(0).reshape(shape) + 1
    return spaces.MultiDiscrete(nvec.numpy(), dtype=np_dtype)


def _write_space_value(value: torch.Tensor | TensorDictBase, space: Any, key: str) -> Any:
    """Values (leading dim: steps) as Minari expects them for ``space``: arrays, dicts, tuples."""
    from gymnasium import spaces

    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        names = (
            list(space.spaces)
            if isinstance(space, spaces.Dict)
            else list(map(str, range(len(space.spaces))))
        )
        subspaces = list(space.spaces.values()) if isinstance(space, spaces.Dict) else space.spaces
        if not isinstance(value, TensorDictBase):
            raise TypeError(
                f"export_minari: {key} must be a TensorDict with entries {names} for a "
                f"{type(space).__name__} space, got a tensor of shape {list(value.shape)}"
            )
        missing = [n for n in names if n not in value.keys()]
        if missing:
            raise KeyError(
                f"export_minari: {key} has no entries {missing} (the space has {names}, the data "
                f"{sorted(value.keys())})"
            )
        converted = [
            _write_space_value(value.get(n), sub, f"{key}/{n}") for n, sub in zip(names, subspaces)
        ]
        if isinstance(space, spaces.Dict):
            return dict(zip(names, converted))
        return tuple(converted)
    if isinstance(value, TensorDictBase):
        raise TypeError(
            f"export_minari: {key} is a TensorDict ({sorted(value.keys())}) but its space is a "
            f"{type(space).__name__}"
        )
    shape = _value_shape(space)
    if shape is None:
        raise TypeError(f"export_minari: {key}: unsupported space {type(space).__name__}")
    n = value.shape[0]
    array = value.detach().cpu()
    if isinstance(space, spaces.Discrete) and tuple(array.shape) == (n, int(space.n)):
        array = array.long().argmax(-1)  # one-hot actions become the category index
    elif tuple(array.shape) == (n, *shape, 1) or (not shape and tuple(array.shape) == (n, 1)):
        array = array.squeeze(-1)
    if tuple(array.shape) != (n, *shape):
        raise ValueError(
            f"export_minari: {key} has shape {list(value.shape[1:])} per step, the space "
            f"{space} expects {list(shape)}"
        )
    return array.numpy().astype(space.dtype, copy=False)


def _numpy_tree(value: TensorDictBase) -> dict[str, Any]:
    return {
        k: _numpy_tree(v) if isinstance(v, TensorDictBase) else v.detach().cpu().numpy()
        for k, v in value.items()
    }


def export_minari(
    data: TensorDictBase | ReplayBuffer,
    dataset_id: str,
    *,
    env_id: str | None = None,
    observation_space: Any = None,
    action_space: Any = None,
    observation_key: NestedKey = OBSERVATION,
    action_key: NestedKey = ACTION,
    trajectory_key: NestedKey | None = None,
    algorithm_name: str | None = None,
    author: str | None = None,
    author_email: str | None = None,
    code_permalink: str | None = None,
    description: str | None = None,
    data_format: str | None = None,
    jpeg_encoding: bool = False,
    overwrite: bool = False,
    chunk_steps: int = 100_000,
) -> Any:
    """Writes TED transitions as a Minari dataset in Minari's local store.

    The transitions are cut into episodes at their trajectory ids (``trajectory_key``, else
    ``("collector", "traj_ids")``, ``"traj_ids"`` or ``"episode"``; else at their done flags, and at
    the end of each row of a ``[B, T]`` batch). An episode's observations are its transitions'
    observations plus the last next observation; a trajectory cut off by the end of the data stays
    unfinished (no termination or truncation flag is invented). Episodes are written in chunks of
    about ``chunk_steps`` steps with Minari's ``create_dataset_from_buffers``; on failure the
    partial dataset is deleted.

    Args:
        data: a TED TensorDict (batch ``[N]`` or ``[*B, T]``) or a replay buffer storing them.
        dataset_id: the Minari id to write, e.g. ``"cartpole/sac-replay-v0"``.
        env_id: a gymnasium id: made once for its spaces and recorded as the env spec.
        observation_space: the observation space (default: the env's, else inferred from data).
        action_space: the action space (default: the env's, else inferred from data).
        observation_key: the observation entry (also read under ``"next"``).
        action_key: the action entry.
        trajectory_key: the trajectory-id entry (auto-detected when ``None``).
        algorithm_name: recorded in the metadata.
        author: recorded in the metadata.
        author_email: recorded in the metadata.
        code_permalink: recorded in the metadata.
        description: recorded in the metadata.
        data_format: Minari's backend (``"hdf5"``, ``"arrow"``; default Minari's).
        jpeg_encoding: let Minari JPEG-encode image spaces (lossy); off by default.
        overwrite: replace an existing dataset of that id instead of raising.
        chunk_steps: about how many steps are held in memory at once while writing.

    Returns:
        The ``minari.MinariDataset`` written.

    Raises:
        FileExistsError: the dataset exists and ``overwrite`` is false.
        KeyError: an entry the export reads is missing (the message names it).
        ValueError: a value does not fit its space (the message names the key and both shapes).

    Examples:
        >>> import os, tempfile, warnings
        >>> from unittest import mock
        >>> from torchrl.data.datasets import ted_from_arrays
        >>> obs = torch.randn(11, 3)
        >>> data = ted_from_arrays(obs[:-1], torch.randn(10, 1), torch.ones(10),
        ...     torch.arange(10) % 5 == 4, torch.zeros(10), obs[1:])
        >>> with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # Minari asks for provenance (author, ...)
        ...     with mock.patch.dict(os.environ, MINARI_DATASETS_PATH=tmp):
        ...         dataset = export_minari(data, "toy/demo-v0")
        ...         reader = MinariExperienceReplay("toy/demo-v0", root=tmp)
        ...     print(dataset.total_episodes, len(reader))
        2 10
    """
    minari = _import_minari()
    if not isinstance(dataset_id, str) or not dataset_id:
        raise ValueError(
            f"export_minari: dataset_id must be a non-empty string, got {dataset_id!r}"
        )
    if chunk_steps <= 0:
        raise ValueError(f"export_minari: chunk_steps must be positive, got {chunk_steps}")
    flat = _flat_source(data)
    keys = set(flat.keys(True))
    obs_key = (observation_key,) if isinstance(observation_key, str) else tuple(observation_key)
    for key in (obs_key, (NEXT, *obs_key), action_key, (NEXT, REWARD)):
        unravelled = key[0] if isinstance(key, tuple) and len(key) == 1 else key
        if unravelled not in keys:
            raise KeyError(
                f"export_minari: data has no {nested_key_str(unravelled)} entry; its keys: "
                f"{sorted(map(str, flat.keys(True, True)))}"
            )
    n = flat.shape[0]
    done = _done_flags(flat)
    terminated = flat.get((NEXT, TERMINATED), None)
    terminated = done if terminated is None else terminated.reshape(n, -1).bool().any(-1)
    truncated = flat.get((NEXT, TRUNCATED), None)
    truncated = (
        (done & ~terminated) if truncated is None else truncated.reshape(n, -1).bool().any(-1)
    )
    observations = flat.get(obs_key)
    next_observations = flat.get((NEXT, *obs_key))
    actions = flat.get(action_key)
    rewards = flat.get((NEXT, REWARD)).reshape(n, -1)
    if rewards.shape[1] != 1:
        raise ValueError(
            f"export_minari: ('next', 'reward') must hold one reward per step, got shape "
            f"{list(flat.get((NEXT, REWARD)).shape)}"
        )
    infos, next_infos = flat.get(_INFO, None), flat.get((NEXT, _INFO), None)

    gym_env = None
    if env_id is not None:
        import gymnasium

        gym_env = gymnasium.make(env_id)
        observation_space = observation_space or gym_env.observation_space
        action_space = action_space or gym_env.action_space
    if observation_space is None:
        observation_space = _infer_space(torch.cat([observations, next_observations]), "obs")
    if action_space is None:
        action_space = _infer_space(actions, "action")

    path = minari_dataset_path(dataset_id)
    if path.exists():
        if not overwrite:
            raise FileExistsError(
                f"export_minari: Minari dataset {dataset_id!r} already exists at {path}; pass "
                "overwrite=True to replace it"
            )
        shutil.rmtree(path)

    from minari.data_collector import EpisodeBuffer

    def buffers() -> Iterator[list[Any]]:
        chunk: list[Any] = []
        size = 0
        for start, stop in trajectory_bounds(flat, trajectory_key).tolist():
            ep_obs = torch.cat([observations[start:stop], next_observations[stop - 1 : stop]])
            ep_infos = None
            if next_infos is not None:
                ep_infos_td = next_infos[start:stop]
                if infos is not None:
                    ep_infos_td = torch.cat([infos[start : start + 1], ep_infos_td])
                ep_infos = _numpy_tree(ep_infos_td)
            chunk.append(
                EpisodeBuffer(
                    observations=_write_space_value(ep_obs, observation_space, "observation"),
                    actions=_write_space_value(actions[start:stop], action_space, "action"),
                    rewards=rewards[start:stop, 0].detach().cpu().numpy(),
                    terminations=terminated[start:stop].cpu().numpy(),
                    truncations=truncated[start:stop].cpu().numpy(),
                    infos=ep_infos,
                )
            )
            size += stop - start
            if size >= chunk_steps:
                yield chunk
                chunk, size = [], 0
        if chunk:
            yield chunk

    extra: dict[str, Any] = {}
    if "jpeg_encoding" in inspect.signature(minari.create_dataset_from_buffers).parameters:
        extra["jpeg_encoding"] = jpeg_encoding
    if data_format is not None:
        extra["data_format"] = data_format
    dataset = None
    try:
        for chunk in buffers():
            if dataset is None:
                dataset = minari.create_dataset_from_buffers(
                    dataset_id,
                    chunk,
                    env=gym_env,
                    algorithm_name=algorithm_name,
                    author=author,
                    author_email=author_email,
                    code_permalink=code_permalink,
                    action_space=action_space,
                    observation_space=observation_space,
                    description=description,
                    **extra,
                )
            else:
                dataset.update_dataset_from_buffer(chunk)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    finally:
        if gym_env is not None:
            gym_env.close()
    return dataset
