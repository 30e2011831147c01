"""V-D4RL (pixel-based offline DeepMind Control datasets) as replay buffers.

V-D4RL publishes each dataset (``"main/walker_walk/random/64px"``, ...) as a folder of episode
files in the layout of the DrQ-v2 and DreamerV2 replay buffers it was collected with: ``.npz``
archives (DrQ) or ``.hdf5`` files (Dreamer), one row per time step::

    observation | image | pixels   [L, 3, H, W] or [L, H, W, 3] uint8   the frame at step t
    action                         [L, A]   the action that led to this step (zeros at a reset)
    reward                         [L]      the reward received on arriving at this step
    discount                       [L]      0 where the step is terminal
    is_first / is_last / is_terminal, or step_type (0 first, 1 mid, 2 last)   optional
    anything else (e.g. proprioceptive state)                                  [L, ...]

Rows ``t`` and ``t + 1`` of one episode make the transition ``(pixels[t], action[t + 1],
reward[t + 1], pixels[t + 1])``, so an episode of ``L`` rows gives ``L - 1`` transitions.
"""

from __future__ import annotations

import importlib.util
import zipfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import ACTION, NEXT
from torchrl.data.datasets._episodes import EpisodeFilesReplay, source_signature, write_chunks
from torchrl.data.datasets.common import (
    EPISODE,
    DatasetFormatError,
    slice_sampler,
    ted_from_arrays,
)
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.storages import IndexLike, Storage, TensorStorage
from torchrl.data.replay_buffers.writers import Writer

__all__ = ["VD4RLExperienceReplay", "VD4RL_REPO_ID"]

_has_h5py = importlib.util.find_spec("h5py") is not None

VD4RL_REPO_ID = "conglu/vd4rl"
"""The Hugging Face dataset repository holding V-D4RL (files under ``vd4rl/<dataset_id>/``)."""

PIXELS = "pixels"
STATE = "state"
_PIXEL_KEYS = ("observation", "image", "pixels")
_FLAG_KEYS = ("is_first", "is_last", "is_terminal", "step_type")
_INSTALL = 'pip install "torchrl[offline]"'


def _episode_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.suffix in (".npz", ".hdf5") and p.is_file())


def _read_file(path: Path, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays of one V-D4RL file (npz archive or HDF5 file, datasets at its root).

    Only ``keys`` (those present) are read when given: counting steps needs no frames.
    """
    if path.suffix == ".npz":
        if not zipfile.is_zipfile(path):
            raise DatasetFormatError(f"{path}: not a NumPy .npz archive")
        try:
            with np.load(path, allow_pickle=False) as archive:
                names = [k for k in archive.files if keys is None or k in keys]
                return {k: archive[k] for k in names}
        except (OSError, ValueError) as err:
            raise DatasetFormatError(
                f"{path}: cannot read the archive ({err}); expected plain numeric arrays"
            ) from err
    if not _has_h5py:
        raise ImportError(f"reading V-D4RL .hdf5 files needs h5py: {_INSTALL}")
    import h5py

    try:
        with h5py.File(path, "r") as file:
            return {
                k: v[()]
                for k, v in file.items()
                if isinstance(v, h5py.Dataset) and (keys is None or k in keys)
            }
    except OSError as err:
        raise DatasetFormatError(f"{path}: not a readable HDF5 file ({err})") from err


def _starts(arrays: dict[str, np.ndarray], rows: int, path: Path) -> np.ndarray:
    """First row of each episode in a file (the whole file is one episode without flags)."""
    for key in ("is_first", "step_type"):
        if key in arrays and arrays[key].size != rows:
            raise DatasetFormatError(
                f"{path}: key {key!r} has shape {list(arrays[key].shape)}, expected [{rows}] "
                f"(one flag per step, as 'action')"
            )
    if "is_first" in arrays:
        first = arrays["is_first"].reshape(rows).astype(bool)
    elif "step_type" in arrays:
        first = arrays["step_type"].reshape(rows) == 0
    else:
        first = np.zeros(rows, dtype=bool)
    first[0] = True
    return np.flatnonzero(first)


def _episode_ted(arrays: dict[str, np.ndarray], lo: int, hi: int, path: Path) -> TensorDict:
    """The ``hi - lo - 1`` transitions of the episode in rows ``lo .. hi - 1``."""
    rows = {k: torch.from_numpy(np.ascontiguousarray(v[lo:hi])) for k, v in arrays.items()}
    pixel_key = next(k for k in _PIXEL_KEYS if k in rows)
    pixels = rows.pop(pixel_key)
    if pixels.ndim == 4 and pixels.shape[-1] in (1, 3) and pixels.shape[1] not in (1, 3):
        pixels = pixels.permute(0, 3, 1, 2).contiguous()  # Dreamer's HWC -> CHW
    action = rows.pop(ACTION)
    reward = rows.pop("reward").reshape(-1).float()
    discount = rows.pop("discount", None)
    is_terminal = rows.pop("is_terminal", None)
    for key in _FLAG_KEYS:
        rows.pop(key, None)
    n = hi - lo - 1
    if is_terminal is not None:
        terminated = is_terminal.reshape(-1)[1:].bool()
    elif discount is not None:
        terminated = discount.reshape(-1)[1:] == 0
    else:
        terminated = torch.zeros(n, dtype=torch.bool)
    truncated = torch.zeros(n, dtype=torch.bool)
    truncated[-1] = not bool(terminated[-1])
    state = TensorDict({k: v for k, v in rows.items()}, batch_size=[hi - lo])
    ted = ted_from_arrays(
        TensorDict({PIXELS: pixels[:-1], STATE: state[:-1]}, [n]),
        action[1:],
        reward[1:],
        terminated,
        truncated,
        TensorDict({PIXELS: pixels[1:], STATE: state[1:]}, [n]),
        observation_key="_obs",
    )
    for key in (PIXELS, STATE):
        ted.set(key, ted.get(("_obs", key)))
        ted.set((NEXT, key), ted.get((NEXT, "_obs", key)))
    ted = ted.exclude("_obs", (NEXT, "_obs"))
    if not ted.get(STATE).keys():
        ted = ted.exclude(STATE, (NEXT, STATE))
    if discount is not None:
        ted.set("discount", discount.reshape(-1)[1:].float())
    return ted


def _check(arrays: dict[str, np.ndarray], path: Path) -> int:
    pixel_keys = [k for k in _PIXEL_KEYS if k in arrays]
    missing = [k for k in (ACTION, "reward") if k not in arrays]
    if not pixel_keys or missing:
        raise DatasetFormatError(
            f"{path}: missing key {missing[0] if missing else 'observation'!r}; a V-D4RL "
            f"episode file holds observation (or image), action, reward and discount (found "
            f"{sorted(arrays)})"
        )
    rows = int(arrays[ACTION].shape[0])
    for key, value in arrays.items():
        if value.dtype.kind not in "biuf":
            raise DatasetFormatError(
                f"{path}: key {key!r} has dtype {value.dtype}, expected a numeric array"
            )
        if value.ndim == 0 or value.shape[0] != rows:
            raise DatasetFormatError(
                f"{path}: key {key!r} has shape {list(value.shape)}, expected {rows} rows (one "
                f"per step, as 'action')"
            )
    pixels = arrays[pixel_keys[0]]
    if pixels.ndim != 4 or pixels.dtype != np.uint8:
        raise DatasetFormatError(
            f"{path}: key {pixel_keys[0]!r} has shape {list(pixels.shape)} and dtype "
            f"{pixels.dtype}, expected uint8 frames [L, 3, H, W] or [L, H, W, 3]"
        )
    return rows


class PixelStorage(TensorStorage):
    """A read-only storage that hands out float pixels in ``[0, 1]``, resized on request.

    The stored frames stay ``uint8`` (4x less disk and page cache); each batch read converts
    ``"pixels"`` and ``("next", "pixels")`` to ``float32 / 255`` and, with ``image_size``, resizes
    them (bilinear).

    Args:
        data: the stored TensorDict (batch ``[N]``) with uint8 ``[N, C, H, W]`` pixels.
        image_size: ``None`` (keep the size), an int (square) or ``(height, width)``.
        keys: the pixel entries to convert.

    Examples:
        >>> data = TensorDict({"pixels": torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)}, [2])
        >>> PixelStorage(data, image_size=2, keys=("pixels",)).get(0)["pixels"].shape
        torch.Size([3, 2, 2])
    """

    def __init__(
        self,
        data: TensorDictBase,
        *,
        image_size: int | Sequence[int] | None = None,
        keys: Sequence[Any] = (PIXELS, (NEXT, PIXELS)),
    ) -> None:
        super().__init__(data)
        if image_size is not None:
            size = [image_size, image_size] if isinstance(image_size, int) else list(image_size)
            if len(size) != 2 or any(not isinstance(s, int) or s < 1 for s in size):
                raise ValueError(
                    f"image_size must be a positive int or (height, width), got {image_size!r}"
                )
            self.image_size: list[int] | None = size
        else:
            self.image_size = None
        self.keys = tuple(keys)

    def get(self, index: IndexLike) -> TensorDictBase:
        out = super().get(index)
        assert isinstance(out, TensorDictBase)
        for key in self.keys:
            frames = out.get(key, None)
            if frames is None:
                continue
            frames = frames.float().div_(255.0)
            if self.image_size is not None:
                flat = frames.reshape(-1, *frames.shape[-3:])
                flat = torch.nn.functional.interpolate(
                    flat, size=self.image_size, mode="bilinear", align_corners=False
                )
                frames = flat.reshape(*frames.shape[:-2], *self.image_size)
            out.set(key, frames)
        return out

    def set(self, index: int | slice | torch.Tensor, data: Any) -> None:
        raise RuntimeError(f"{type(self).__name__} is read-only (a converted dataset)")


class VD4RLExperienceReplay(EpisodeFilesReplay):
    """A V-D4RL dataset (DrQ ``.npz`` / Dreamer ``.hdf5`` episodes) as TED transitions.

    The files are read from ``data_dir`` (default ``<root>/raw/vd4rl/<dataset_id>``, where
    ``download=True`` puts them) and converted once into a memory-mapped copy under
    ``<root>/<dataset_id>/``. Pixels are stored as uint8 ``[3, H, W]`` under ``"pixels"`` (Dreamer's
    ``[H, W, 3]`` frames are transposed); every other per-step array except the action, reward,
    discount and flags goes under ``"state"``. Rows ``t`` and ``t + 1`` give one transition (the
    files record at each row the action and reward that *led to* it); episodes are cut at
    ``is_first`` (or ``step_type == 0``), else a file is one episode. A transition is terminated
    where ``is_terminal`` is set (else where ``discount == 0``); an episode's last transition,
    when not terminated, is truncated. ``"discount"`` is kept. With ``totensor=True`` (default)
    sampled pixels are ``float32`` in ``[0, 1]``, resized to ``image_size`` when given.

    Args:
        dataset_id: e.g. ``"main/walker_walk/random/64px"`` (see :attr:`available_datasets`).
        batch_size: default number of transitions per :meth:`sample`.

    Keyword Args:
        root: cache directory (default ``$TORCHRL_DATASETS_ROOT/vd4rl``).
        download: fetch the dataset's files from the ``conglu/vd4rl`` Hugging Face repository.
        data_dir: the folder of episode files.
        totensor: hand out float pixels in ``[0, 1]`` (``False``: the stored uint8).
        image_size: resize sampled pixels (int or ``(height, width)``); needs ``totensor``.
        num_workers: threads reading episode files during the conversion.
        slice_len, num_slices, strict_length: sample sub-trajectories (a ``SliceSampler``).
        split_trajs: store one zero-padded row per episode (with a ``"mask"``).
        sampler, writer, collate_fn, pin_memory, prefetch, transform: as in ``ReplayBuffer``.

    Examples:
        >>> import tempfile, numpy as np
        >>> root = tempfile.mkdtemp()
        >>> np.savez(f"{root}/episode.npz", observation=np.zeros((4, 3, 8, 8), np.uint8),
        ...     action=np.arange(4.0).reshape(4, 1), reward=np.arange(4.0), discount=np.ones(4))
        >>> data = VD4RLExperienceReplay("main/walker_walk/random/64px", 2, data_dir=root,
        ...     root=root)
        >>> data[:]["action"].squeeze(-1).tolist(), data[:]["pixels"].dtype
        ([1.0, 2.0, 3.0], torch.float32)
    """

    cache_name: ClassVar[str] = "vd4rl"
    available_datasets: ClassVar[list[str]] = [
        *(f"distracting/walker_walk_random/64px/{lvl}" for lvl in ("easy", "hard", "medium")),
        *(
            f"main/{task}/{kind}/64px"
            for task in ("cheetah_run", "humanoid_walk", "walker_walk")
            for kind in ("expert", "medium", "medium_expert", "medium_replay", "random")
        ),
        "multitask/cheetah_run_random/64px",
        "multitask/walker_walk_random/64px",
    ]

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None = None,
        *,
        root: str | Path | None = None,
        download: bool | str = False,
        data_dir: str | Path | None = None,
        totensor: bool = True,
        image_size: int | Sequence[int] | None = None,
        num_workers: int = 0,
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
        if image_size is not None and not totensor:
            raise ValueError("image_size= resizes float pixels: it needs totensor=True")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
        sampler = slice_sampler(sampler, slice_len, num_slices, strict_length)
        self.totensor = bool(totensor)
        self.image_size = image_size
        self.num_workers = num_workers
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

    def _raw_dir(self) -> Path:
        return self.root / "raw" / "vd4rl" / self.dataset_id

    # -- hooks -------------------------------------------------------------------------------
    def _source_files(self) -> list[Path]:
        return _episode_files(self.data_dir)

    def _missing_message(self) -> str:
        known = self._unlisted_note()
        return (
            f"V-D4RL dataset {self.dataset_id!r} not found{known}: expected DrQ-style .npz or "
            f"Dreamer-style .hdf5 episode files (observation/image, action, reward, discount) "
            f"under {self.data_dir}. To get it: pass download=True (fetches vd4rl/"
            f"{self.dataset_id}/ from the Hugging Face dataset {VD4RL_REPO_ID}), or run "
            f"`huggingface-cli download {VD4RL_REPO_ID} --repo-type dataset --include "
            f"'vd4rl/{self.dataset_id}/*' --local-dir {self.root / 'raw'}`, or pass data_dir=."
        )

    def _download(self) -> None:
        self._download_from_hub(VD4RL_REPO_ID, f"vd4rl/{self.dataset_id}/*")

    def _write(self, dest: Path) -> dict[str, Any]:
        files = self._source_files()
        total = episodes = 0
        for path in files:
            # count from the actions and flags only; every array is checked when written
            arrays = _read_file(path, (ACTION, "is_first", "step_type"))
            if ACTION not in arrays:
                raise DatasetFormatError(
                    f"{path}: missing key 'action'; a V-D4RL episode file holds observation "
                    f"(or image), action, reward and discount"
                )
            rows = int(arrays[ACTION].shape[0])
            if rows == 0:
                continue
            bounds = [*_starts(arrays, rows, path).tolist(), rows]
            total += sum(max(hi - lo - 1, 0) for lo, hi in zip(bounds[:-1], bounds[1:]))
            episodes += sum(1 for lo, hi in zip(bounds[:-1], bounds[1:]) if hi - lo > 1)
        write_chunks(dest, total, self._chunks(files))
        return {
            "format": "v-d4rl episodes",
            "dataset_id": self.dataset_id,
            "source": source_signature(files),
            "num_transitions": total,
            "num_episodes": episodes,
        }

    def _read_all(self, files: list[Path]) -> Iterator[tuple[dict[str, np.ndarray], Path]]:
        if self.num_workers == 0:
            for path in files:
                yield _read_file(path), path
            return
        # a bounded window of files in flight, so that memory holds a few files, not all
        window = 2 * self.num_workers
        with ThreadPoolExecutor(self.num_workers) as pool:
            for lo in range(0, len(files), window):
                batch = files[lo : lo + window]
                yield from zip(pool.map(_read_file, batch), batch)

    def _chunks(self, files: list[Path]) -> Iterator[tuple[str, TensorDictBase]]:
        episode = 0
        for arrays, path in self._read_all(files):
            rows = _check(arrays, path)
            bounds = [*_starts(arrays, rows, path).tolist(), rows]
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                if hi - lo < 2:
                    continue  # a lone reset row makes no transition
                ted = _episode_ted(arrays, lo, hi, path)
                ted.set(EPISODE, torch.full((hi - lo - 1,), episode, dtype=torch.int64))
                episode += 1
                yield f"{path} (rows {lo}..{hi - 1})", ted

    def _make_storage(self, data: TensorDictBase) -> Storage:
        if not self.totensor:
            return TensorStorage(data)
        return PixelStorage(data, image_size=self.image_size)
