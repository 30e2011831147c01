"""LeRobot datasets (robot demonstrations as parquet files) read offline with ``datasets``.

A LeRobot dataset folder holds ``meta/info.json`` (features, fps, codebase version) and its
frames as parquet files under ``data/`` (``data/chunk-000/episode_000000.parquet`` in v2.x,
``data/chunk-000/file-000.parquet`` in v3.x), one row per frame with dotted column names:
``observation.state``, ``action``, ``episode_index``, ``frame_index``, ``timestamp``,
``next.reward``, ``next.done``, ``index``, ``task_index``... Camera streams are mp4 files under
``videos/``: decoding them is not supported here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
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
    slice_sampler,
    ted_from_arrays,
)
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.writers import Writer

__all__ = ["LeRobotExperienceReplay", "lerobot_columns_to_tensordict", "lerobot_home"]

_has_datasets = importlib.util.find_spec("datasets") is not None

_INSTALL = 'pip install "torchrl[offline]"'
_DEFAULT_KEY_MAP: dict[str, NestedKey] = {"episode_index": EPISODE}
_UNSUPPORTED_DTYPES = ("video", "image")


def lerobot_home() -> Path:
    """LeRobot's local dataset folder: ``$HF_LEROBOT_HOME``, else ``$HF_HOME/lerobot``.

    Returns:
        The folder (``~/.cache/huggingface/lerobot`` when neither variable is set).

    Examples:
        >>> lerobot_home().name in ("lerobot",) or "HF_LEROBOT_HOME" in os.environ
        True
    """
    if os.environ.get("HF_LEROBOT_HOME"):
        return Path(os.environ["HF_LEROBOT_HOME"]).expanduser()
    hf_home = os.environ.get("HF_HOME", "~/.cache/huggingface")
    return Path(hf_home).expanduser() / "lerobot"


def _hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    return Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser() / "hub"


def _as_tensor(name: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    array = np.asarray(value)
    if array.dtype == object:
        try:
            array = np.stack([np.asarray(v) for v in array])
        except ValueError as err:
            raise ValueError(
                f"column {name!r}: rows have different shapes; expected one fixed shape per row"
            ) from err
    if array.dtype.kind not in "biuf":
        raise TypeError(
            f"column {name!r} has dtype {array.dtype}; expected numbers or booleans (drop "
            f"text columns such as 'task' before converting)"
        )
    return torch.from_numpy(np.ascontiguousarray(array))


def lerobot_columns_to_tensordict(
    columns: Mapping[str, Any], *, key_map: Mapping[str, NestedKey] | None = None
) -> TensorDict:
    """Turns LeRobot's dotted columns into a flat TensorDict of nested keys.

    ``"observation.state"`` becomes ``("observation", "state")``, ``"next.reward"`` becomes
    ``("next", "reward")`` and ``"episode_index"`` becomes ``"episode"`` (the TED trajectory id);
    ``key_map`` overrides or adds names. Values keep their dtype; ``[N]`` columns stay ``[N]``.

    Args:
        columns: column name -> ``[N, ...]`` array (tensor, numpy array, or list of rows).
        key_map: column name -> key, applied before the dotted split.

    Returns:
        A TensorDict of batch ``[N]``.

    Raises:
        ValueError: columns of different lengths, ragged rows, or two columns naming one key.
        TypeError: a non-numeric column (text).

    Examples:
        >>> td = lerobot_columns_to_tensordict({
        ...     "observation.state": torch.zeros(4, 2),
        ...     "action": torch.zeros(4, 2),
        ...     "episode_index": torch.tensor([0, 0, 1, 1]),
        ...     "next.reward": torch.ones(4),
        ... })
        >>> td["observation", "state"].shape, td["episode"].tolist(), td["next", "reward"].shape
        (torch.Size([4, 2]), [0, 0, 1, 1], torch.Size([4]))
    """
    mapping = dict(_DEFAULT_KEY_MAP)
    if key_map is not None:
        mapping.update(key_map)
    if not columns:
        raise ValueError("columns is empty: expected at least one column")
    tensors = {name: _as_tensor(name, value) for name, value in columns.items()}
    lengths = {name: t.shape[0] if t.ndim else None for name, t in tensors.items()}
    sizes = set(lengths.values())
    if len(sizes) != 1 or None in sizes:
        raise ValueError(f"every column needs the same number of rows [N, ...], got {lengths}")
    n = next(iter(tensors.values())).shape[0]
    out = TensorDict(batch_size=[n])
    seen: dict[tuple[str, ...], str] = {}
    for name, value in tensors.items():
        target = mapping.get(name, name)
        key = tuple(target.split(".")) if isinstance(target, str) else tuple(target)
        if key in seen:
            raise ValueError(f"columns {seen[key]!r} and {name!r} both map to key {key}")
        seen[key] = name
        out.set(key if len(key) > 1 else key[0], value)
    return out


def _features(source: Path) -> dict[str, dict[str, Any]]:
    info = source / "meta" / "info.json"
    if not info.is_file():
        return {}
    try:
        features = json.loads(info.read_text()).get("features", {})
    except json.JSONDecodeError as err:
        raise DatasetFormatError(f"{info}: not valid JSON ({err})") from err
    if not isinstance(features, dict):
        raise DatasetFormatError(f"{info}: key 'features' must be a mapping, got {features!r}")
    return features


def _per_frame(td: TensorDictBase, key: NestedKey, n: int, where: Path) -> torch.Tensor | None:
    """The ``[N]`` column at ``key`` (``[N, 1]`` accepted), or ``None`` when absent."""
    value = td.get(key, None)
    if value is None:
        return None
    if value.numel() != n:
        raise DatasetFormatError(
            f"{where}: column {'.'.join(key) if isinstance(key, tuple) else key!r} must hold one "
            f"value per frame ([{n}] or [{n}, 1]), got shape {list(value.shape)}"
        )
    return value.reshape(n)


class LeRobotExperienceReplay(BaseDatasetExperienceReplay):
    """Replay buffer over a LeRobot dataset's parquet files, converted once to TED.

    The dataset is looked for in ``data_dir``, else ``lerobot_home()/<dataset_id>``, else the
    Hugging Face hub cache (``$HF_HUB_CACHE`` or ``$HF_HOME/hub``, the newest snapshot of
    ``datasets--<org>--<name>``); nothing is downloaded unless ``download=True``
    (``huggingface_hub.snapshot_download``). Reading uses the ``datasets`` package, which works
    with ``HF_DATASETS_OFFLINE=1``. Observation columns (``observation.*``) go under
    ``"observation"``, ``("next", "observation")`` is the episode's next frame (the last frame
    repeats its own), ``next.reward`` is the reward (zeros when absent, as in imitation data),
    ``next.done`` ends an episode as terminated and an episode's last frame without it is
    truncated. Other numeric columns (``frame_index``, ``timestamp``, ``index``, ...) are kept.
    Video and image features (mp4 files, encoded images) are not decoded: they are skipped (see
    ``metadata["skipped_columns"]``) and naming one in ``columns`` raises; text columns are
    skipped too.

    Args:
        dataset_id: the hub repository id (``"lerobot/pusht"``); names the converted copy.
        batch_size: default number of frames per :meth:`sample`.
        root: cache directory (default ``$TORCHRL_DATASETS_ROOT/lerobot``).
        download: fetch the repository with ``huggingface_hub`` when it is missing.
        data_dir: the dataset folder (holding ``data/`` and ``meta/``).
        columns: the parquet columns to read (default: every numeric one).
        key_map: column name -> key overrides (see :func:`lerobot_columns_to_tensordict`).
        slice_len: sample sub-trajectories of this length (a :class:`SliceSampler`).
        num_slices: sample this many sub-trajectories per batch (a :class:`SliceSampler`).
        strict_length: with slices, drop episodes shorter than a slice.
        split_trajs: store one zero-padded row per episode instead of flat frames.
        sampler: default ``RandomSampler()`` (exclusive with ``slice_len``/``num_slices``).
        writer: default ``ImmutableDatasetWriter()``.
        collate_fn: as in :class:`ReplayBuffer`.
        pin_memory: as in :class:`ReplayBuffer`.
        prefetch: as in :class:`ReplayBuffer`.
        transform: as in :class:`ReplayBuffer`.

    Examples:
        >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
        >>> folder = tempfile.mkdtemp()
        >>> os.makedirs(os.path.join(folder, "data"))
        >>> table = pa.table({"observation.state": [[0.0], [1.0], [2.0]],
        ...     "action": [[1.0], [1.0], [0.0]], "episode_index": [0, 0, 1]})
        >>> pq.write_table(table, os.path.join(folder, "data", "episode_000000.parquet"))
        >>> data = LeRobotExperienceReplay("toy", 2, data_dir=folder, root=folder)
        >>> data[torch.arange(3)]["next", "observation", "state"].squeeze(-1).tolist()
        [1.0, 1.0, 2.0]
    """

    cache_name: ClassVar[str] = "lerobot"

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None = None,
        *,
        root: str | Path | None = None,
        download: bool | str = False,
        data_dir: str | Path | None = None,
        columns: Sequence[str] | None = None,
        key_map: Mapping[str, NestedKey] | None = None,
        slice_len: int | None = None,
        num_slices: int | None = None,
        strict_length: bool = True,
        split_trajs: bool = False,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        sampler = slice_sampler(sampler, slice_len, num_slices, strict_length)
        if columns is not None and (isinstance(columns, str) or not columns):
            raise ValueError(f"columns must be a non-empty list of column names, got {columns!r}")
        self._data_dir = Path(data_dir).expanduser() if data_dir is not None else None
        self._skipped: list[str] = []
        self.columns = list(columns) if columns is not None else None
        self.key_map = dict(key_map) if key_map is not None else None
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

    # -- where the data is ----------------------------------------------------------------------
    def candidate_dirs(self) -> list[Path]:
        """The folders searched for the dataset, in order."""
        if self._data_dir is not None:
            return [self._data_dir]
        org, _, name = self.dataset_id.rpartition("/")
        hub = _hub_cache() / f"datasets--{org.replace('/', '--')}--{name}" / "snapshots"
        snapshots = sorted(hub.iterdir(), key=lambda p: p.stat().st_mtime) if hub.is_dir() else []
        return [lerobot_home() / self.dataset_id, *reversed(snapshots)]

    @property
    def source_dir(self) -> Path | None:
        """The first candidate folder holding parquet files under ``data/`` (or ``None``)."""
        for folder in self.candidate_dirs():
            if (folder / "data").is_dir() and any((folder / "data").rglob("*.parquet")):
                return folder
        return None

    def _source_exists(self) -> bool:
        return self.source_dir is not None

    def _missing_message(self) -> str:
        where = ", ".join(str(p) for p in self.candidate_dirs()) or "(no candidate folder)"
        return (
            f"LeRobot dataset {self.dataset_id!r} not found: expected a LeRobot folder "
            f"(meta/info.json and parquet frames under data/) in one of: {where}. Obtain it "
            f"online with `huggingface-cli download {self.dataset_id} --repo-type dataset` (or "
            f"pass download=True), or pass data_dir= to a local copy."
        )

    def _download(self) -> None:
        if importlib.util.find_spec("huggingface_hub") is None:
            raise ImportError(f"download=True needs huggingface_hub: {_INSTALL}")
        from huggingface_hub import snapshot_download

        snapshot_download(repo_id=self.dataset_id, repo_type="dataset")

    # -- conversion ------------------------------------------------------------------------------
    def _read_columns(self, source: Path) -> tuple[dict[str, np.ndarray], list[str]]:
        if not _has_datasets:
            raise ImportError(
                f"LeRobotExperienceReplay reads parquet files with the `datasets` package: "
                f"{_INSTALL}"
            )
        import datasets

        features = _features(source)
        unsupported = {
            name for name, f in features.items() if f.get("dtype") in _UNSUPPORTED_DTYPES
        }
        if self.columns is not None:
            asked = sorted(unsupported & set(self.columns))
            if asked:
                raise NotImplementedError(
                    f"columns {asked} of {self.dataset_id!r} are video/image features; "
                    f"LeRobotExperienceReplay does not decode them (read numeric columns only)"
                )
        files = sorted(str(p) for p in (source / "data").rglob("*.parquet"))
        with tempfile.TemporaryDirectory(prefix="torchrl-lerobot-") as cache:
            try:
                table = datasets.load_dataset(
                    "parquet", data_files=files, split="train", cache_dir=cache
                )
            except Exception as err:
                raise DatasetFormatError(
                    f"{source / 'data'}: cannot read the parquet files of {self.dataset_id!r}: "
                    f"{err}"
                ) from err
            present = list(table.column_names)
            if self.columns is not None:
                absent = sorted(set(self.columns) - set(present))
                if absent:
                    raise DatasetFormatError(
                        f"{source / 'data'}: columns {absent} are not in the parquet files "
                        f"(present: {present})"
                    )
            wanted = self.columns if self.columns is not None else present
            wanted = [c for c in wanted if c not in unsupported]
            data = table.select_columns(wanted).with_format("numpy")[:]
        out: dict[str, np.ndarray] = {}
        skipped = sorted(unsupported & set(present))
        for name in wanted:
            value = np.asarray(data[name])
            if value.dtype.kind not in "biuf" and value.dtype != object:
                if self.columns is not None:
                    raise TypeError(
                        f"column {name!r} of {self.dataset_id!r} holds {value.dtype} values; "
                        f"only numeric columns are read"
                    )
                skipped.append(name)
                continue
            if value.dtype == object and value.size and isinstance(value.flat[0], dict):
                skipped.append(name)  # encoded images (struct of bytes and path)
                continue
            out[name] = value
        return out, sorted(skipped)

    def _convert(self) -> TensorDictBase:
        source = self.source_dir
        if source is None:
            raise DatasetNotFoundError(self._missing_message())
        columns, skipped = self._read_columns(source)
        self._skipped = skipped
        where = source / "data"
        for required in ("episode_index", "action"):
            if required not in columns:
                raise DatasetFormatError(
                    f"{where}: column {required!r} is missing (read: {sorted(columns)})"
                )
        if not any(c.startswith("observation.") for c in columns):
            raise DatasetFormatError(
                f"{where}: no 'observation.*' column to read (read: {sorted(columns)})"
            )
        frame = columns.get("frame_index", np.zeros_like(columns["episode_index"]))
        order = np.lexsort((frame, columns["episode_index"]))
        columns = {k: v[order] for k, v in columns.items()}
        try:
            td = lerobot_columns_to_tensordict(columns, key_map=self.key_map)
        except (ValueError, TypeError) as err:
            raise DatasetFormatError(f"{where}: {err}") from err
        episode = td.get(EPISODE).to(torch.int64).reshape(-1)
        n = episode.shape[0]
        last = torch.ones(n, dtype=torch.bool)
        last[:-1] = episode[1:] != episode[:-1]
        observation = td.get(OBSERVATION)
        following = torch.arange(n) + (~last).long()
        next_observation = observation[following]
        reward = _per_frame(td, (NEXT, REWARD), n, where)
        done = _per_frame(td, (NEXT, DONE), n, where)
        terminated = done.bool() if done is not None else torch.zeros(n, dtype=torch.bool)
        ted = ted_from_arrays(
            observation,
            td.get(ACTION),
            reward if reward is not None else torch.zeros(n),
            terminated,
            last & ~terminated,
            next_observation,
            episode=episode,
        )
        skip = {OBSERVATION, ACTION, EPISODE, (NEXT, REWARD), (NEXT, DONE)}
        for key, value in td.items(include_nested=True, leaves_only=True):
            if key in skip or (isinstance(key, tuple) and key[0] == OBSERVATION):
                continue
            if key in ((NEXT, TERMINATED), (NEXT, TRUNCATED)):
                continue
            ted.set(key, value)
        return ted

    def _write(self, dest: Path) -> dict[str, Any]:
        ted = self._convert()
        ted.memmap_(prefix=dest)
        if self._skipped:
            warnings.warn(
                f"LeRobotExperienceReplay({self.dataset_id!r}): columns {self._skipped} were not "
                f"read (video, image or text features are not decoded)",
                stacklevel=4,
            )
        return {
            "format": "lerobot",
            "source": str(self.source_dir),
            "frames": int(ted.shape[0]),
            "episodes": int(ted.get(EPISODE).unique().numel()),
            "skipped_columns": self._skipped,
        }
