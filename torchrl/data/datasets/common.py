"""The parent of every offline dataset reader: find the raw data, convert it once, reopen it fast.

A reader turns a dataset on disk (an HDF5 file, a Minari folder, gzipped arrays, parquet files) into
a replay buffer. The first time, it converts the raw data into a memory-mapped TensorDict in the TED
layout (see ``DESIGN.md``) under ``<root>/<dataset_id>/``; every later time it reopens that copy,
which takes milliseconds and reads nothing into memory until a batch is sampled. Nothing is ever
downloaded unless the caller passes ``download=True`` and the reader supports it.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import DONE, NEXT, REWARD, TERMINATED, TRUNCATED
from torchrl._types import NestedKey
from torchrl.data.postprocs import split_trajectories
from torchrl.data.replay_buffers.replay_buffers import TensorDictReplayBuffer
from torchrl.data.replay_buffers.samplers import RandomSampler, Sampler, SliceSampler
from torchrl.data.replay_buffers.storages import Storage, TensorStorage
from torchrl.data.replay_buffers.writers import ImmutableDatasetWriter, Writer
from torchrl.data.specs import Binary, Composite, TensorSpec, Unbounded

__all__ = [
    "DATASETS_ROOT_ENV",
    "EPISODE",
    "BaseDatasetExperienceReplay",
    "DatasetFormatError",
    "DatasetNotFoundError",
    "default_root",
    "drop_stale_copies",
    "slice_sampler",
    "ted_from_arrays",
]

DATASETS_ROOT_ENV = "TORCHRL_DATASETS_ROOT"
"""Environment variable naming the directory under which readers look for and cache datasets."""

EPISODE = "episode"
"""Key of the per-transition trajectory id (int64) that every reader writes."""

_COMPLETE = ".complete"  # written last inside a converted copy: a copy without it is discarded
_METADATA = "metadata.json"


class DatasetNotFoundError(FileNotFoundError):
    """A dataset is not where a reader looks for it; the message says where, what and how to get it.

    Examples:
        >>> import tempfile
        >>> from torchrl.data.datasets import D4RLExperienceReplay
        >>> with tempfile.TemporaryDirectory() as root:  # doctest: +IGNORE_EXCEPTION_DETAIL
        ...     D4RLExperienceReplay("hopper-medium-v2", root=root)
        Traceback (most recent call last):
        ...
        DatasetNotFoundError: D4RL dataset 'hopper-medium-v2' not found: no D4RL HDF5 file ...
    """


class DatasetFormatError(ValueError):
    """A dataset file is malformed; the message names the file, the key and what was expected.

    Examples:
        >>> import pathlib, tempfile
        >>> from torchrl.data.datasets.atari_dqn import read_dqn_replay_array
        >>> with tempfile.TemporaryDirectory() as root:  # doctest: +IGNORE_EXCEPTION_DETAIL
        ...     path = pathlib.Path(root, "$store$_reward_ckpt.0.gz")
        ...     _ = path.write_text("not gzip")
        ...     read_dqn_replay_array(path)
        Traceback (most recent call last):
        ...
        DatasetFormatError: /tmp/.../$store$_reward_ckpt.0.gz: cannot read key '$store$_reward' as a gzipped numpy array: Not a gzipped file (b'no')
    """


def default_root(subdir: str) -> Path:
    """Returns the directory a reader uses when no ``root=`` is given.

    ``$TORCHRL_DATASETS_ROOT/<subdir>`` when that variable is set, else
    ``~/.cache/torchrl/<subdir>``.

    Args:
        subdir: the reader's folder name (``"d4rl"``, ``"minari"``, ...).

    Returns:
        The directory (not created).

    Examples:
        >>> default_root("d4rl").name
        'd4rl'
    """
    base = os.environ.get(DATASETS_ROOT_ENV)
    if base:
        return Path(base).expanduser() / subdir
    return Path("~/.cache/torchrl").expanduser() / subdir


def ted_from_arrays(
    observation: torch.Tensor | TensorDictBase,
    action: torch.Tensor | TensorDictBase,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    next_observation: torch.Tensor | TensorDictBase,
    *,
    episode: torch.Tensor | None = None,
    observation_key: str = "observation",
) -> TensorDict:
    """Builds a flat TED batch of ``N`` transitions from per-transition arrays.

    ``done = terminated | truncated``; the root ``"done"``, ``"terminated"`` and ``"truncated"``
    flags are all false (a stored transition always starts from a live state). Trajectory ids
    (``"episode"``) are counted from the done flags when not given.

    Args:
        observation: ``[N, *obs_shape]`` tensor, or a TensorDict of batch ``[N]`` for nested
            (dict) observations, which are stored under ``observation_key`` as they are.
        action: ``[N, *action_shape]`` tensor (or TensorDict of batch ``[N]``).
        reward: ``[N]`` or ``[N, 1]``.
        terminated: ``[N]`` or ``[N, 1]``, any dtype (non-zero is true).
        truncated: ``[N]`` or ``[N, 1]``.
        next_observation: like ``observation``, the observation after each transition.
        episode: ``[N]`` int64 trajectory ids; counted from ``done`` when ``None``.
        observation_key: the key observations are stored under.

    Returns:
        A TensorDict of batch ``[N]``.

    Examples:
        >>> obs = torch.arange(4.0).unsqueeze(-1)
        >>> td = ted_from_arrays(obs, torch.zeros(4, 1), torch.ones(4),
        ...     torch.tensor([0, 1, 0, 0]), torch.tensor([0, 0, 0, 1]), obs + 1)
        >>> td["episode"].tolist(), td["next", "done"].squeeze(-1).tolist()
        ([0, 0, 1, 1], [False, True, False, True])
    """
    n = observation.shape[0]
    flags = [
        _column(x, n, name) for x, name in ((terminated, "terminated"), (truncated, "truncated"))
    ]
    terminated_b, truncated_b = (f.bool() for f in flags)
    done = terminated_b | truncated_b
    if episode is None:
        episode = torch.zeros(n, dtype=torch.int64)
        if n > 1:
            episode[1:] = done[:-1, 0].to(torch.int64).cumsum(0)
    elif episode.shape != (n,):
        raise ValueError(f"episode must have shape [{n}], got {list(episode.shape)}")
    reward_c = _column(reward, n, "reward")
    if not reward_c.is_floating_point():
        reward_c = reward_c.float()
    false = torch.zeros(n, 1, dtype=torch.bool)
    return TensorDict(
        {
            observation_key: observation,
            "action": action,
            EPISODE: episode.to(torch.int64),
            DONE: false,
            TERMINATED: false.clone(),
            TRUNCATED: false.clone(),
            NEXT: {
                observation_key: next_observation,
                REWARD: reward_c,
                DONE: done,
                TERMINATED: terminated_b,
                TRUNCATED: truncated_b,
            },
        },
        batch_size=[n],
    )


def drop_stale_copies(data_path_root: str | Path, source_signature: Any) -> bool:
    """Deletes the converted copies under ``data_path_root`` made from another source version.

    Readers record a signature of their raw source under the ``"source"`` key of the
    metadata they return from ``_write``; when the signature recorded there differs from
    ``source_signature`` (or cannot be read), the ``flat`` and ``split`` copies are removed so
    that the next load converts the source again. Nothing happens without recorded metadata.

    Args:
        data_path_root: the folder of the converted copies (a reader's ``data_path_root``).
        source_signature: a JSON-able signature of the raw source as it is now.

    Returns:
        Whether the copies were deleted.

    Examples:
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "flat").mkdir()
        >>> _ = (root / "metadata.json").write_text(json.dumps({"source": {"size": 1}}))
        >>> drop_stale_copies(root, {"size": 1}), (root / "flat").exists()
        (False, True)
        >>> drop_stale_copies(root, {"size": 2}), (root / "flat").exists()
        (True, False)
    """
    root = Path(data_path_root)
    meta_path = root / _METADATA
    if not meta_path.is_file():
        return False
    try:
        recorded = json.loads(meta_path.read_text()).get("source")
    except (OSError, ValueError):
        recorded = None
    if recorded == source_signature:
        return False
    for name in ("flat", "split"):
        shutil.rmtree(root / name, ignore_errors=True)
    return True


def slice_sampler(
    sampler: Sampler | None,
    slice_len: int | None,
    num_slices: int | None,
    strict_length: bool = True,
) -> Sampler | None:
    """The sampler a reader uses given its ``sampler=``, ``slice_len=`` and ``num_slices=``.

    Without ``slice_len`` and ``num_slices``, ``sampler`` is returned as is; otherwise a
    :class:`~torchrl.data.replay_buffers.samplers.SliceSampler` over the trajectories keyed
    by ``"episode"`` is built (passing ``sampler`` as well is an error).

    Args:
        sampler: the sampler passed to the reader, or ``None``.
        slice_len: length of the sampled sub-trajectories, or ``None``.
        num_slices: number of sub-trajectories per batch, or ``None``.
        strict_length: whether slices shorter than ``slice_len`` are discarded.

    Returns:
        The sampler to hand to the replay buffer (``None`` for the default one).

    Examples:
        >>> type(slice_sampler(None, 4, None)).__name__
        'SliceSampler'
        >>> slice_sampler(None, None, None) is None
        True
    """
    if slice_len is None and num_slices is None:
        return sampler
    if sampler is not None:
        raise ValueError("pass either sampler= or slice_len=/num_slices=, not both")
    return SliceSampler(
        slice_len=slice_len,
        num_slices=num_slices,
        traj_key=EPISODE,
        strict_length=strict_length,
    )


def _column(x: torch.Tensor, n: int, name: str) -> torch.Tensor:
    x = torch.as_tensor(x)
    if x.shape == (n,):
        return x.unsqueeze(-1)
    if x.shape == (n, 1):
        return x
    raise ValueError(f"{name} must have shape [{n}] or [{n}, 1], got {list(x.shape)}")


class BaseDatasetExperienceReplay(TensorDictReplayBuffer):
    """Parent class of the offline dataset readers (a replay buffer over a fixed dataset).

    A subclass says where its raw data lives and how to read it; this class converts it once into a
    memory-mapped TED TensorDict at :attr:`data_path` (written to a temporary folder and renamed,
    so an interrupted conversion leaves nothing half-written) and reopens that copy afterwards.
    Samples come from a :class:`~torchrl.data.replay_buffers.RandomSampler` and writes are refused
    (:class:`~torchrl.data.replay_buffers.ImmutableDatasetWriter`) unless other ones are given.

    Subclasses set :attr:`cache_name` and implement :meth:`_source_exists`,
    :meth:`_missing_message` and :meth:`_convert`; :meth:`_download` when they can download, and
    :meth:`_write` when the data should be written in chunks rather than built in memory.

    Args:
        dataset_id: the dataset's name; the converted copy lives under ``<root>/<dataset_id>``.
        batch_size: default number of transitions per :meth:`sample`.
        root: cache directory (default :func:`default_root` of :attr:`cache_name`).
        download: fetch the raw data when it is missing (only readers that can); ``"force"``
            converts again even when a converted copy exists.
        sampler: default ``RandomSampler()``.
        writer: default ``ImmutableDatasetWriter()``.
        collate_fn, pin_memory, prefetch, transform: as in :class:`ReplayBuffer`.
        split_trajs: store one zero-padded row per trajectory (batch ``[num_trajs, max_len]``,
            with a boolean ``"mask"`` entry) instead of flat transitions, so that a sample is a
            batch of whole trajectories.

    Examples:
        A reader whose "raw data" is built in memory (a real one reads files):

        >>> import tempfile, torch
        >>> from torchrl.data.datasets import ted_from_arrays
        >>> class TwoEpisodes(BaseDatasetExperienceReplay):
        ...     cache_name = "two_episodes"
        ...     def _source_exists(self):
        ...         return True
        ...     def _missing_message(self):
        ...         return "always there"
        ...     def _convert(self):
        ...         obs = torch.arange(6.0).unsqueeze(-1)
        ...         terminated = torch.tensor([0, 0, 1, 0, 0, 1])
        ...         return ted_from_arrays(
        ...             obs, torch.zeros(6, 1), torch.ones(6), terminated, torch.zeros(6), obs + 1
        ...         )
        >>> tmp = tempfile.TemporaryDirectory()
        >>> data = TwoEpisodes("demo", batch_size=4, root=tmp.name)  # converted once, memory-mapped
        >>> len(data), data[:]["episode"].tolist()
        (6, [0, 0, 0, 1, 1, 1])
        >>> data.sample()["observation"].shape
        torch.Size([4, 1])
        >>> tmp.cleanup()
    """

    cache_name: ClassVar[str] = "datasets"

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None = None,
        *,
        root: str | Path | None = None,
        download: bool | str = False,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        split_trajs: bool = False,
    ) -> None:
        if not isinstance(dataset_id, str) or not dataset_id:
            raise ValueError(f"dataset_id must be a non-empty string, got {dataset_id!r}")
        if download not in (True, False, "force"):
            raise ValueError(f"download must be True, False or 'force', got {download!r}")
        self.dataset_id = dataset_id
        self.root = Path(root).expanduser() if root is not None else default_root(self.cache_name)
        self.download = download
        self.split_trajs = bool(split_trajs)
        data = self._load()
        super().__init__(
            storage=self._make_storage(data),
            sampler=sampler if sampler is not None else RandomSampler(),
            writer=writer if writer is not None else ImmutableDatasetWriter(),
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            batch_size=batch_size,
        )

    # -- paths -------------------------------------------------------------------------------
    @property
    def data_path_root(self) -> Path:
        """The folder that holds this dataset's converted copies."""
        return self.root / self.dataset_id

    @property
    def data_path(self) -> Path:
        """The converted copy in use (``flat`` transitions, or ``split`` per trajectory)."""
        return self.data_path_root / ("split" if self.split_trajs else "flat")

    @property
    def metadata(self) -> dict[str, Any]:
        """What the reader recorded about the source at conversion (a JSON-able dict)."""
        path = self.data_path_root / _METADATA
        return json.loads(path.read_text()) if path.exists() else {}

    @property
    def specs(self) -> Composite:
        """Specs of one stored transition, read from the data (override for the source's spaces)."""
        data = self._storage.get(0)
        if self.split_trajs:
            data = data[0]
        return _infer_specs(data)

    def delete(self) -> None:
        """Deletes the converted copies of this dataset (never the raw source)."""
        shutil.rmtree(self.data_path_root, ignore_errors=True)

    # -- hooks ---------------------------------------------------------------------------------
    @abstractmethod
    def _source_exists(self) -> bool:
        """Whether the raw dataset is present locally."""

    @abstractmethod
    def _missing_message(self) -> str:
        """Where the raw data is expected, its name and format, and how to obtain it."""

    @abstractmethod
    def _convert(self) -> TensorDictBase:
        """Reads the raw data into a flat TED TensorDict (batch ``[N]``)."""

    def _download(self) -> None:
        """Fetches the raw data (only called with ``download=True``)."""
        raise DatasetNotFoundError(
            f"{type(self).__name__} cannot download {self.dataset_id!r}: " + self._missing_message()
        )

    def _make_storage(self, data: TensorDictBase) -> Storage:
        """The storage over the reopened copy (override to rebuild entries at sampling time)."""
        return TensorStorage(data)

    def _write(self, dest: Path) -> dict[str, Any]:
        """Writes the flat converted copy as a memory-mapped TensorDict at ``dest``.

        Returns:
            Metadata to store beside the copy (JSON-able).
        """
        self._convert().memmap_(prefix=dest)
        return {}

    # -- conversion ----------------------------------------------------------------------------
    def _load(self) -> TensorDictBase:
        flat = self.data_path_root / "flat"
        if self.download == "force" or not (flat / _COMPLETE).exists():
            if not self._source_exists():
                if not self.download:
                    raise DatasetNotFoundError(self._missing_message())
                self._download()
            self._convert_into(flat, self._write)
        if not self.split_trajs:
            return TensorDict.load_memmap(flat)
        split = self.data_path_root / "split"
        if self.download == "force" or not (split / _COMPLETE).exists():
            source = TensorDict.load_memmap(flat)

            def write_split(dest: Path) -> dict[str, Any]:
                split_trajectories(source, trajectory_key=EPISODE).memmap_(prefix=dest)
                return {}

            self._convert_into(split, write_split)
        return TensorDict.load_memmap(split)

    def _convert_into(self, dest: Path, write: Callable[[Path], dict[str, Any]]) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            meta = write(tmp)
            (tmp / _COMPLETE).touch()
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if meta:
            (dest.parent / _METADATA).write_text(json.dumps(meta, indent=1, sort_keys=True))


def _infer_specs(data: TensorDictBase) -> Composite:
    specs: dict[NestedKey, TensorSpec] = {}
    for key, value in data.items():
        if isinstance(value, TensorDictBase):
            specs[key] = _infer_specs(value)
        elif isinstance(value, torch.Tensor):
            if value.dtype == torch.bool:
                specs[key] = Binary(
                    n=value.shape[-1] if value.ndim else 1, shape=value.shape, dtype=torch.bool
                )
            else:
                specs[key] = Unbounded(shape=value.shape, dtype=value.dtype)
    return Composite(specs)
