"""The Gen-DGRL Procgen offline datasets ("The Generalization Gap in Offline RL") as replay buffers.

Each dataset (a Procgen game and a data category, e.g. ``"bigfish-1M_E"``) is a folder of episode
files, one per episode. The public archives hold ``.npy`` files, each a pickled dict of arrays
(``np.save`` of a dict); the authors' collector code writes the same dict as an ``.npz`` archive.
Both hold::

    observations  [T + 1, 3, 64, 64] uint8   the reset frame, then the frame after each step
    actions       [T] or [T, 1]      int     the Procgen action (15 discrete actions)
    rewards       [T] or [T, 1]      float
    dones         [T]                bool    the episode ended after this step

and are named ``<timestamp>_<index>_<length>_<level_seed>_<return>.<ext>`` by the collector.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import urllib.request
import uuid
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDictBase

from torchrl._keys import OBSERVATION
from torchrl.data.datasets._episodes import (
    EpisodeFilesReplay,
    safe_unpickle,
    source_signature,
    write_chunks,
)
from torchrl.data.datasets.common import (
    EPISODE,
    DatasetFormatError,
    DatasetNotFoundError,
    slice_sampler,
    ted_from_arrays,
)
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.writers import Writer

__all__ = ["GenDGRLExperienceReplay"]

GEN_DGRL_URL = "https://dl.fbaipublicfiles.com/DGRL/Procgen/Datasets/Compressed/"
"""Where the Gen-DGRL archives are published (``<category path>/<game>.tar.xz``)."""

_GAMES = (
    "bigfish",
    "bossfight",
    "caveflyer",
    "chaser",
    "climber",
    "coinrun",
    "dodgeball",
    "fruitbot",
    "heist",
    "jumper",
    "leaper",
    "maze",
    "miner",
    "ninja",
    "plunder",
    "starpilot",
)
# category -> folder on the server: 1M transitions on 200 training levels from the final PPO
# policy (expert) or a mix of checkpoints (suboptimal), 10M and 25M transitions, and 100k
# transitions on 1 or 40 training levels.
_CATEGORIES = {
    "1M_E": "1M/level_200/expert",
    "1M_S": "1M/level_200/suboptimal",
    "10M": "10M/level_200/expert",
    "25M": "25M/level_200/expert",
    "level_1_E": "100k/level_1/expert",
    "level_1_S": "100k/level_1/suboptimal",
    "level_40_E": "100k/level_40/expert",
    "level_40_S": "100k/level_40/suboptimal",
}
_FILE_NAME = re.compile(r".*_(-?\d+)_(-?[\d.]+)$")  # ..._<level_seed>_<return>
_EPISODE_SUFFIXES = (".npz", ".npy")


def _episode_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.suffix in _EPISODE_SUFFIXES and p.is_file())


@contextmanager
def _open_episode(path: Path) -> Iterator[Mapping[str, Any]]:
    """The arrays of one episode file, by name.

    A ``.npz`` archive is read lazily (one array at a time). A ``.npy`` file holding a pickled
    dict (as the public release stores episodes) is unpickled with a loader that accepts numpy
    arrays and plain data only, so that a file cannot run code.
    """
    if zipfile.is_zipfile(path):
        try:
            archive = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise DatasetFormatError(f"{path}: cannot read the episode archive ({err})") from err
        with archive:
            yield _NpzView(archive)
        return
    with open(path, "rb") as stream:
        try:
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                _, _, dtype = np.lib.format.read_array_header_1_0(stream)
            else:  # 2.0 (and 3.0, whose header differs only in its text encoding)
                _, _, dtype = np.lib.format.read_array_header_2_0(stream)
        except (ValueError, OSError, UnicodeDecodeError) as err:
            raise DatasetFormatError(
                f"{path}: neither a NumPy .npz archive nor a .npy file ({err}); expected a "
                f"Gen-DGRL episode holding the arrays observations, actions, rewards and dones"
            ) from err
        if not dtype.hasobject:
            raise DatasetFormatError(
                f"{path}: a .npy file of one {dtype} array; expected a Gen-DGRL episode (a dict "
                f"of observations, actions, rewards and dones)"
            )
        episode = safe_unpickle(stream, str(path))
    if isinstance(episode, np.ndarray) and episode.shape == ():
        episode = episode.item()
    if not isinstance(episode, Mapping):
        raise DatasetFormatError(
            f"{path}: holds a {type(episode).__name__}, expected a dict of observations, "
            f"actions, rewards and dones"
        )
    yield {str(k): v for k, v in episode.items()}


class _NpzView(Mapping[str, Any]):
    """An ``NpzFile`` as a mapping that reads an array when it is looked up."""

    def __init__(self, archive: Any) -> None:
        self.archive = archive

    def __getitem__(self, key: str) -> Any:
        return self.archive[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.archive.files)

    def __len__(self) -> int:
        return len(self.archive.files)


def _array(archive: Mapping[str, Any], path: Path, key: str) -> np.ndarray:
    if key not in archive:
        raise DatasetFormatError(
            f"{path}: missing key {key!r}; a Gen-DGRL episode holds observations, actions, "
            f"rewards and dones (found {sorted(archive)})"
        )
    try:
        value = np.asarray(archive[key])
    except ValueError as err:  # an object array inside an npz: it would need unpickling
        raise DatasetFormatError(
            f"{path}: key {key!r} is not a plain numeric array ({err})"
        ) from err
    if value.dtype.kind not in "biuf":
        raise DatasetFormatError(
            f"{path}: key {key!r} has dtype {value.dtype}, expected a bool or numeric array"
        )
    return value


def _per_step(value: np.ndarray, t: int, path: Path, key: str) -> np.ndarray:
    if value.shape not in ((t,), (t, 1)):
        raise DatasetFormatError(
            f"{path}: key {key!r} has shape {list(value.shape)}, expected [{t}] or [{t}, 1] "
            f"(one value per step of the {t} actions)"
        )
    return value.reshape(t)


class GenDGRLExperienceReplay(EpisodeFilesReplay):
    """A Gen-DGRL Procgen dataset (episode ``.npy``/``.npz`` files) as TED transitions.

    ``dataset_id`` is ``"<game>-<category>"`` (see :attr:`available_datasets`). The episode files
    are read from ``data_dir`` (default ``<root>/raw/<dataset_id>``, searched recursively) and
    converted once into a memory-mapped copy under ``<root>/<dataset_id>/``. Episode ``k``'s step
    ``t`` gives ``observation = observations[t]``, ``action``, ``("next", "reward")`` and
    ``("next", "observation") = observations[t + 1]``; a step with ``dones`` set is terminated and
    its next frame, which Procgen's auto-reset filled with the next level's first frame, is
    zeroed. An episode whose file ends without ``dones`` is truncated. ``"level_seed"`` comes from
    the file name (``-1`` when it does not follow the authors' pattern). Observations are stored
    as uint8 (cast when a file holds another dtype, as the authors' loader does). Pickled
    ``.npy`` episodes are loaded with an unpickler that accepts numpy arrays and plain data only.

    Args:
        dataset_id: ``"<game>-<category>"`` such as ``"bigfish-1M_E"``; names the converted copy.
        batch_size: default number of transitions per :meth:`sample`.

    Keyword Args:
        root: cache directory (default ``$TORCHRL_DATASETS_ROOT/gen_dgrl``).
        download: fetch ``<game>.tar.xz`` of the category from :data:`GEN_DGRL_URL` when missing.
        data_dir: the folder of episode files.
        slice_len, num_slices, strict_length: sample sub-trajectories (a ``SliceSampler``).
        split_trajs: store one zero-padded row per episode (with a ``"mask"``).
        sampler, writer, collate_fn, pin_memory, prefetch, transform: as in ``ReplayBuffer``.

    Examples:
        >>> import tempfile, numpy as np
        >>> root = tempfile.mkdtemp()
        >>> episode = {"observations": np.zeros((4, 3, 64, 64), np.uint8),
        ...     "actions": np.array([[1], [2], [3]]), "rewards": np.array([[0.0], [0.0], [1.0]]),
        ...     "dones": np.array([False, False, True])}
        >>> np.save(f"{root}/ep_0_3_7_1.00.npy", episode)  # a pickled dict, as released
        >>> data = GenDGRLExperienceReplay("bigfish-1M_E", 2, data_dir=root, root=root)
        >>> data[:]["action"].tolist(), data[:]["level_seed"].tolist()
        ([1, 2, 3], [7, 7, 7])
    """

    cache_name: ClassVar[str] = "gen_dgrl"
    available_datasets: ClassVar[list[str]] = [
        f"{game}-{category}" for game in _GAMES for category in _CATEGORIES
    ]

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None = None,
        *,
        root: str | Path | None = None,
        download: bool | str = False,
        data_dir: str | Path | None = None,
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
        self._init_reader(
            dataset_id,
            batch_size,
            root=root,
            download=download,
            data_dir=data_dir,
            sampler=sampler,
            writer=writer,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            split_trajs=split_trajs,
        )

    # -- hooks -------------------------------------------------------------------------------
    def _source_files(self) -> list[Path]:
        return _episode_files(self.data_dir)

    def _url(self) -> str | None:
        game, _, category = self.dataset_id.partition("-")  # categories hold no "-"
        if game not in _GAMES or category not in _CATEGORIES:
            return None
        return f"{GEN_DGRL_URL}{_CATEGORIES[category]}/{game}.tar.xz"

    def _missing_message(self) -> str:
        url = self._url()
        how = (
            f"pass download=True (fetches {url}, several GB) or download and unpack it there"
            if url is not None
            else f"dataset ids with a public archive are {self.available_datasets[:4]}... "
            f"(GenDGRLExperienceReplay.available_datasets); or pass data_dir= to your files"
        )
        return (
            f"Gen-DGRL dataset {self.dataset_id!r} not found: expected episode files (.npy "
            f"pickled dicts or .npz archives of observations, actions, rewards, dones) under "
            f"{self.data_dir}. "
            f"To get it: {how}."
        )

    def _download(self) -> None:
        url = self._url()
        if url is None:
            raise DatasetNotFoundError(
                f"no public archive is known for {self.dataset_id!r}. " + self._missing_message()
            )
        dest = self.data_dir
        dest.mkdir(parents=True, exist_ok=True)
        archive = dest.with_name(f".{dest.name}.download-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(archive, "wb") as out:
                shutil.copyfileobj(response, out, length=2**20)
            with tarfile.open(archive) as tar:
                tar.extractall(dest, filter="data")
        except (OSError, tarfile.TarError) as err:
            raise DatasetNotFoundError(
                f"downloading Gen-DGRL {self.dataset_id!r} from {url} into {dest} failed: {err}"
            ) from err
        finally:
            archive.unlink(missing_ok=True)

    def _write(self, dest: Path) -> dict[str, Any]:
        files = _episode_files(self.data_dir)
        lengths = []
        for path in files:
            with _open_episode(path) as archive:
                lengths.append(int(_array(archive, path, "actions").shape[0]))
        total = sum(lengths)
        write_chunks(dest, total, self._chunks(files))
        return {
            "format": "gen-dgrl episode files",
            "dataset_id": self.dataset_id,
            "source": source_signature(files),
            "num_transitions": total,
            "num_episodes": sum(1 for n in lengths if n),
        }

    def _chunks(self, files: list[Path]) -> Iterator[tuple[str, TensorDictBase]]:
        offset = 0
        for path in files:
            chunk = _read_episode(path)
            if chunk.shape[0]:
                # a file normally holds one episode; a done before its end starts another one
                ids = chunk.get(EPISODE) + offset
                chunk.set(EPISODE, ids)
                offset = int(ids[-1]) + 1
            yield str(path), chunk


def _level_seed(path: Path) -> int:
    match = _FILE_NAME.match(path.stem)
    return int(match.group(1)) if match else -1


def _read_episode(path: Path) -> TensorDictBase:
    with _open_episode(path) as archive:
        actions = _array(archive, path, "actions")
        t = int(actions.shape[0])
        obs = _array(archive, path, "observations")
        rewards = _per_step(_array(archive, path, "rewards"), t, path, "rewards")
        dones = _per_step(_array(archive, path, "dones"), t, path, "dones").astype(bool)
        actions = _per_step(actions, t, path, "actions")
    if obs.shape[0] not in (t, t + 1):
        raise DatasetFormatError(
            f"{path}: key 'observations' has {obs.shape[0]} rows, expected {t + 1} (the reset "
            f"frame and one per step of the {t} actions) or {t}"
        )
    frames = torch.from_numpy(np.ascontiguousarray(obs.astype(np.uint8, copy=False)))
    following = torch.zeros_like(frames[:t])
    following[: frames.shape[0] - 1] = frames[1 : t + 1]
    done = torch.from_numpy(dones)
    following[done] = 0  # after a done, Procgen's auto-reset frame belongs to the next level
    truncated = torch.zeros(t, dtype=torch.bool)
    if t and not dones[-1]:
        truncated[-1] = True
        if frames.shape[0] == t:  # the frame after the last step was not saved
            following[-1] = 0
    ted = ted_from_arrays(
        frames[:t],
        torch.from_numpy(actions.astype(np.int64)),
        torch.from_numpy(rewards.astype(np.float32)),
        done,
        truncated,
        following,
        observation_key=OBSERVATION,
    )
    ted.set("level_seed", torch.full((t,), _level_seed(path), dtype=torch.int64))
    return ted
