"""The DQN-replay Atari datasets (Agarwal et al., 2020) read from their gzipped checkpoint arrays.

A run of the public dataset (``gs://atari-replay-datasets/dqn/<Game>/<run>/replay_logs``) holds,
for each checkpoint ``N``, the arrays of a Dopamine replay buffer saved with ``np.save`` inside a
gzip stream: ``$store$_observation_ckpt.N.gz`` (``uint8 [capacity, 84, 84]``, one frame per row),
``$store$_action_ckpt.N.gz`` (``int32``), ``$store$_reward_ckpt.N.gz`` (``float32``),
``$store$_terminal_ckpt.N.gz`` (``uint8``), ``add_count_ckpt.N.gz`` (rows ever added: with the
capacity it gives the circular buffer's cursor) and ``invalid_range_ckpt.N.gz`` (rows next to the
cursor that Dopamine never samples). Row ``i`` holds the frame seen before action ``i``, the reward
received and whether the step ended the episode; the frame after row ``i`` is row ``i + 1``. The
recorder pads the start of every episode with ``3`` all-zero rows (its stack of 4 frames), and
never stores the frame after a terminal step.

The converted copy keeps each frame once (``uint8 [84, 84]``, padding rows dropped) beside a
table of transitions that point at their frame; :class:`FrameStackStorage` builds the stacked
observations when a batch is read.
"""

from __future__ import annotations

import contextlib
import gzip
import re
import shutil
import subprocess
import zlib
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, ClassVar, cast

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import NEXT, OBSERVATION
from torchrl.data.datasets.common import (
    BaseDatasetExperienceReplay,
    DatasetFormatError,
    DatasetNotFoundError,
    slice_sampler,
    ted_from_arrays,
)
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.storages import IndexLike, Storage, TensorStorage
from torchrl.data.replay_buffers.writers import Writer

__all__ = [
    "DQN_REPLAY_BUCKET",
    "FRAME_INDEX",
    "AtariDQNExperienceReplay",
    "FrameStackStorage",
    "read_dqn_replay_array",
]

DQN_REPLAY_BUCKET = "gs://atari-replay-datasets/dqn"
"""The public bucket of the DQN-replay dataset (``gsutil -m cp -R <bucket>/<Game> <dir>``)."""

FRAME_INDEX = "frame_index"
"""Key of each stored transition's row in the frame table (the frame of its observation)."""

_STORE = "$store$_"
_STORED_ARRAYS = ("observation", "action", "reward", "terminal")
_CKPT = re.compile(r"^\$store\$_observation_ckpt\.(\d+)\.gz$")
_RECORDED_STACK = 4  # the recorder's frame stack: episodes start with 3 zero rows
_CHUNK_ROWS = 16384  # frames decompressed and written per step (~115 MB at 84x84)


def _ckpt_file(directory: Path, name: str, checkpoint: int) -> Path:
    return directory / f"{name}_ckpt.{checkpoint}.gz"


class _NpyStream:
    """Reads an ``np.save`` array from an open binary stream, header first, rows on demand."""

    def __init__(self, stream: BinaryIO, path: Path, key: str) -> None:
        self.stream, self.path, self.key = stream, path, key
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            header = np.lib.format.read_array_header_1_0(stream)
        else:
            header = np.lib.format.read_array_header_2_0(stream)
        self.shape, fortran, self.dtype = header
        if fortran and len(self.shape) > 1:
            raise DatasetFormatError(
                f"{path}: key {key!r} is stored in Fortran order; expected a C-ordered array"
            )
        if self.dtype.hasobject:
            raise DatasetFormatError(f"{path}: key {key!r} holds Python objects, not numbers")
        self.row_shape = tuple(self.shape[1:])
        self.row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize

    def read(self, rows: int | None = None) -> np.ndarray:
        """Reads the next ``rows`` rows (all of them for a 0-d array or when ``None``)."""
        shape: tuple[int, ...]
        if not self.shape:
            count, shape = 1, ()
        else:
            count = self.shape[0] if rows is None else rows
            shape = (count, *self.row_shape)
            count *= int(np.prod(self.row_shape, dtype=np.int64))
        nbytes = count * self.dtype.itemsize
        buf = self.stream.read(nbytes)
        if len(buf) != nbytes:
            raise DatasetFormatError(
                f"{self.path}: key {self.key!r} is truncated: expected {nbytes} bytes of "
                f"{self.dtype} data for shape {shape}, the file holds {len(buf)}"
            )
        return np.frombuffer(buf, dtype=self.dtype).reshape(shape)


def read_dqn_replay_array(path: str | Path, key: str | None = None) -> np.ndarray:
    """Reads one gzipped ``np.save`` array of a DQN-replay checkpoint.

    Args:
        path: the ``*_ckpt.N.gz`` file.
        key: the name used in error messages (defaults to the file's array name).

    Returns:
        The array (read entirely into memory).

    Raises:
        DatasetFormatError: the file is not a gzip stream, is truncated, or holds no numpy array.

    Examples:
        >>> import gzip, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "$store$_reward_ckpt.0.gz")
        >>> with gzip.open(path, "wb") as f:
        ...     np.save(f, np.arange(3, dtype=np.float32))
        >>> read_dqn_replay_array(path).tolist()
        [0.0, 1.0, 2.0]
    """
    path = Path(path)
    key = key if key is not None else path.name.split("_ckpt.")[0]
    with _open_checked(path, key) as stream:
        reader: _NpyStream = _guarded(path, key, partial(_NpyStream, stream, path, key))
        return _guarded(path, key, reader.read)


@contextlib.contextmanager
def _open_checked(path: Path, key: str) -> Iterator[BinaryIO]:
    """``gzip.open(path)``, with a missing file reported as a dataset error."""
    if not path.is_file():
        raise DatasetFormatError(
            f"{path}: missing file for key {key!r} (every checkpoint needs "
            f"{', '.join(_STORE + a for a in _STORED_ARRAYS)}, add_count and invalid_range)"
        )
    with gzip.open(path, "rb") as stream:
        yield cast(BinaryIO, stream)


def _guarded(path: Path, key: str, read: Callable[[], Any]) -> Any:
    try:
        return read()
    except DatasetFormatError:
        raise
    except (OSError, EOFError, zlib.error, ValueError) as err:
        raise DatasetFormatError(
            f"{path}: cannot read key {key!r} as a gzipped numpy array: {err}"
        ) from err


def _checkpoint_plan(directory: Path, checkpoint: int) -> dict[str, Any]:
    """Reads a checkpoint's small arrays and decides which rows are frames and transitions."""
    arrays = {
        name: read_dqn_replay_array(_ckpt_file(directory, _STORE + name, checkpoint), name)
        for name in _STORED_ARRAYS[1:]
    }
    for name in ("add_count", "invalid_range"):
        arrays[name] = read_dqn_replay_array(_ckpt_file(directory, name, checkpoint), name)
    obs_path = _ckpt_file(directory, _STORE + "observation", checkpoint)
    with _open_checked(obs_path, "observation") as stream:
        header: _NpyStream = _guarded(
            obs_path, "observation", partial(_NpyStream, stream, obs_path, "observation")
        )
    if len(header.shape) != 3 or header.dtype != np.uint8:
        raise DatasetFormatError(
            f"{obs_path}: key 'observation' must be uint8 [capacity, height, width], got "
            f"{header.dtype} {list(header.shape)}"
        )
    capacity = header.shape[0]
    for name in _STORED_ARRAYS[1:]:
        value = arrays[name]
        if value.shape != (capacity,):
            raise DatasetFormatError(
                f"{_ckpt_file(directory, _STORE + name, checkpoint)}: key {name!r} must have "
                f"shape [{capacity}] (the observations' capacity), got {list(value.shape)}"
            )
    add_count = arrays["add_count"]
    if add_count.size != 1 or not np.issubdtype(add_count.dtype, np.integer) or add_count < 0:
        raise DatasetFormatError(
            f"{_ckpt_file(directory, 'add_count', checkpoint)}: key 'add_count' must be one "
            f"non-negative integer, got {add_count!r}"
        )
    added = int(add_count.reshape(()))
    # Chronological order of the rows: a full circular buffer starts at its cursor.
    if added < capacity:
        rows = np.arange(added)
    else:
        rows = (added % capacity + np.arange(capacity)) % capacity
    length = rows.size
    terminal = arrays["terminal"][rows] != 0
    padding = np.zeros(length, dtype=bool)
    if added <= capacity:  # the first episode's padding is still stored
        padding[: _RECORDED_STACK - 1] = True
    ends = np.flatnonzero(terminal)
    for k in range(1, _RECORDED_STACK):
        after = ends + k
        padding[after[after < length]] = True
    pad_rows = rows[padding]
    if (
        terminal[padding].any()
        or arrays["action"][pad_rows].any()
        or arrays["reward"][pad_rows].any()
    ):
        raise DatasetFormatError(
            f"{directory}: checkpoint {checkpoint}: the {_RECORDED_STACK - 1} rows after a "
            f"terminal step must be the recorder's zero padding (action, reward and terminal 0)"
        )
    invalid = np.zeros(capacity, dtype=bool)
    bad = arrays["invalid_range"].astype(np.int64).reshape(-1)
    invalid[bad[(bad >= 0) & (bad < capacity)]] = True
    frame = ~padding
    # Episode segments: a new one starts after each terminal step.
    segment = np.zeros(length, dtype=np.int64)
    segment[1:] = np.cumsum(terminal[:-1])
    has_next = np.zeros(length, dtype=bool)
    has_next[:-1] = True
    transition = frame & ~invalid[rows] & (terminal | has_next)
    return {
        "rows": rows,
        "frame": frame,
        "segment": segment,
        "transition": transition,
        "terminal": terminal,
        "action": arrays["action"][rows],
        "reward": arrays["reward"][rows],
        "capacity": capacity,
        "frame_shape": tuple(header.shape[1:]),
        "added": added,
    }


def _stream_frames(
    path: Path, plan: dict[str, Any], dest: torch.Tensor, offset: int, chunk_rows: int
) -> None:
    """Copies the kept frames of one checkpoint into ``dest[offset:]``, in chronological order."""
    capacity = plan["capacity"]
    # target[r]: where stored row r goes in the frame table (-1: not kept).
    target = np.full(capacity, -1, dtype=np.int64)
    kept_rows = plan["rows"][plan["frame"]]
    target[kept_rows] = offset + np.arange(kept_rows.size)
    with _open_checked(path, "observation") as stream:
        reader: _NpyStream = _guarded(
            path, "observation", partial(_NpyStream, stream, path, "observation")
        )
        for start in range(0, capacity, chunk_rows):
            stop = min(start + chunk_rows, capacity)
            chunk: np.ndarray = _guarded(path, "observation", partial(reader.read, stop - start))
            where = target[start:stop]
            keep = where >= 0
            if keep.any():
                dest[torch.from_numpy(where[keep])] = torch.from_numpy(chunk[keep])


class FrameStackStorage(TensorStorage):
    """A read-only storage of transitions that stacks their frames when a batch is read.

    Each stored transition names the row of its frame (``"frame_index"``) in a frame table kept
    once. Reading a batch adds ``observation`` (frames ``t - K + 1 .. t``) and
    ``("next", "observation")`` (frames ``t - K + 2 .. t + 1``) as ``[*batch, K, H, W]``. Frames of
    another episode segment, or outside the table, are zeros: stacks never cross an episode
    boundary, and the first steps of an episode see zero frames before its first one, as the
    recording agent did.

    Args:
        transitions: TensorDict of batch ``[N]`` with an int64 ``"frame_index"`` entry.
        frames: ``[F, H, W]`` frame table (a memory-mapped tensor works).
        segment: ``[F]`` int64 episode segment of each frame.
        frame_stack: frames per observation (``K``).
        observation_key: where the stacked frames go.

    Examples:
        >>> frames = torch.arange(1, 6, dtype=torch.uint8).reshape(5, 1, 1).expand(5, 2, 2)
        >>> segment = torch.tensor([0, 0, 0, 1, 1])
        >>> steps = TensorDict({"frame_index": torch.tensor([0, 1, 3])}, [3])
        >>> storage = FrameStackStorage(steps, frames, segment, frame_stack=2)
        >>> storage.get(torch.tensor([1, 2]))["observation"][:, :, 0, 0].tolist()
        [[1, 2], [0, 4]]
    """

    def __init__(
        self,
        transitions: TensorDictBase,
        frames: torch.Tensor,
        segment: torch.Tensor,
        *,
        frame_stack: int = 4,
        observation_key: str = OBSERVATION,
    ) -> None:
        if isinstance(frame_stack, bool) or not isinstance(frame_stack, int) or frame_stack < 1:
            raise ValueError(f"frame_stack must be an int >= 1, got {frame_stack!r}")
        if segment.shape != frames.shape[:1]:
            raise ValueError(
                f"segment must have shape [{frames.shape[0]}] (one per frame), got "
                f"{list(segment.shape)}"
            )
        if FRAME_INDEX not in transitions.keys():
            raise KeyError(f"the transitions need a {FRAME_INDEX!r} entry")
        super().__init__(transitions)
        # Plain tensor views of the (memory-mapped) tables: the subclass's per-op dispatch
        # costs more than the gathers themselves.
        self.frames = frames.as_subclass(torch.Tensor)
        self.segment = segment.as_subclass(torch.Tensor)
        self.frame_stack = frame_stack
        self.observation_key = observation_key
        self._offsets = torch.arange(1 - frame_stack, 1)

    def stack(self, last: torch.Tensor, segment: torch.Tensor) -> torch.Tensor:
        """Frames ``last - K + 1 .. last`` of each entry, zero where not in ``segment``.

        Args:
            last: int64 frame rows, any shape ``S``.
            segment: the episode segment each entry's frames must belong to (shape ``S``).

        Returns:
            ``[*S, K, H, W]`` frames.
        """
        n = self.frames.shape[0]
        idx = last.unsqueeze(-1) + self._offsets
        safe = idx.clamp(0, n - 1)
        valid = (idx >= 0) & (idx < n) & (self.segment[safe] == segment.unsqueeze(-1))
        flat = torch.index_select(self.frames, 0, safe.reshape(-1))
        # Few frames fall outside the episode: zero them in place rather than masking all.
        flat[torch.nonzero(~valid.reshape(-1)).squeeze(-1)] = 0
        return flat.reshape(*idx.shape, *self.frames.shape[1:])

    def get(self, index: IndexLike) -> TensorDictBase:
        out = super().get(index)
        assert isinstance(out, TensorDictBase)
        frame = out.get(FRAME_INDEX)
        own = self.segment[frame]
        out.set(self.observation_key, self.stack(frame, own))
        out.set((NEXT, self.observation_key), self.stack(frame + 1, own))
        return out

    def set(self, index: int | slice | torch.Tensor, data: Any) -> None:
        raise RuntimeError(f"{type(self).__name__} is read-only (a converted dataset)")


class AtariDQNExperienceReplay(BaseDatasetExperienceReplay):
    """Replay buffer over one run of the DQN-replay Atari dataset, read from local files.

    ``dataset_id`` is ``"<Game>/<run>"`` (e.g. ``"Pong/1"``). The raw checkpoints are read from
    ``data_dir`` (default ``<root>/dqn/<Game>/<run>/replay_logs``, the layout that
    ``gsutil -m cp -R gs://atari-replay-datasets/dqn/<Game> <root>/dqn/`` creates) and converted
    once to ``<root>/<dataset_id>/flat``: every frame stored once (``uint8 [84, 84]``) plus a table
    of transitions. Stacked observations ``[K, 84, 84]`` are built at sampling time (see
    :class:`FrameStackStorage`): frames before the first one of an episode are zeros (the
    recorder's padding), never frames of another episode, and the frame after a terminal step
    (never recorded) is zero too. Each checkpoint is read on its own: an episode cut by the
    checkpoint's end is truncated there, and the one that opens a full buffer (its start was
    overwritten) sees zero frames before its first stored one. Rows listed in ``invalid_range``
    give no transition. Samples are TED transitions with ``"episode"`` ids and ``"frame_index"``.

    Args:
        dataset_id: ``"<Game>/<run>"``; names the converted copy.
        batch_size: default number of transitions per :meth:`sample`.
        root: cache directory (default ``$TORCHRL_DATASETS_ROOT/atari_dqn``).
        download: fetch the run with ``gsutil`` when it is missing (needs network access).
        data_dir: the folder holding the ``*_ckpt.N.gz`` files.
        checkpoints: which checkpoints ``N`` to convert (default: all found).
        frame_stack: frames per observation (``K``), applied at sampling time.
        slice_len: sample sub-trajectories of this length (a :class:`SliceSampler`).
        num_slices: sample this many sub-trajectories per batch (a :class:`SliceSampler`).
        strict_length: with slices, drop trajectories shorter than a slice.
        observation_key: where the stacked frames go.
        sampler: default ``RandomSampler()`` (exclusive with ``slice_len``/``num_slices``).
        writer: default ``ImmutableDatasetWriter()``.
        collate_fn: as in :class:`ReplayBuffer`.
        pin_memory: as in :class:`ReplayBuffer`.
        prefetch: as in :class:`ReplayBuffer`.
        transform: as in :class:`ReplayBuffer`.

    Examples:
        A tiny checkpoint in the dataset's layout (2x2 frames; the first 3 rows are the
        recorder's padding), then 5 transitions read with 2 stacked frames:

        >>> import gzip, pathlib, tempfile
        >>> import numpy as np, torch
        >>> tmp = tempfile.TemporaryDirectory()
        >>> logs = pathlib.Path(tmp.name, "dqn", "Pong", "1", "replay_logs")
        >>> logs.mkdir(parents=True)
        >>> arrays = {
        ...     "$store$_observation": np.arange(32, dtype=np.uint8).reshape(8, 2, 2),
        ...     "$store$_action": np.array([0, 0, 0, 1, 2, 1, 0, 2], dtype=np.int32),
        ...     "$store$_reward": np.array([0, 0, 0, 0, 1, 0, 0, 1], dtype=np.float32),
        ...     "$store$_terminal": np.array([0, 0, 0, 0, 0, 0, 0, 1], dtype=np.uint8),
        ...     "add_count": np.array(8),
        ...     "invalid_range": np.array([], dtype=np.int64),
        ... }
        >>> for name, value in arrays.items():
        ...     with gzip.open(logs / f"{name}_ckpt.0.gz", "wb") as f:
        ...         np.save(f, value)
        >>> data = AtariDQNExperienceReplay("Pong/1", batch_size=4, root=tmp.name, frame_stack=2)
        >>> len(data), data.sample()["observation"].shape
        (5, torch.Size([4, 2, 2, 2]))
        >>> data[:]["next", "done"].flatten().tolist()
        [False, False, False, False, True]
        >>> tmp.cleanup()
    """

    cache_name: ClassVar[str] = "atari_dqn"

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None = None,
        *,
        root: str | Path | None = None,
        download: bool | str = False,
        data_dir: str | Path | None = None,
        checkpoints: Sequence[int] | None = None,
        frame_stack: int = 4,
        slice_len: int | None = None,
        num_slices: int | None = None,
        strict_length: bool = True,
        observation_key: str = OBSERVATION,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        if isinstance(frame_stack, bool) or not isinstance(frame_stack, int) or frame_stack < 1:
            raise ValueError(f"frame_stack must be an int >= 1, got {frame_stack!r}")
        if checkpoints is not None:
            checkpoints = sorted({int(c) for c in checkpoints})
            if not checkpoints or checkpoints[0] < 0:
                raise ValueError(
                    f"checkpoints must be non-negative checkpoint numbers, got {checkpoints!r}"
                )
        sampler = slice_sampler(sampler, slice_len, num_slices, strict_length)
        self._data_dir = Path(data_dir).expanduser() if data_dir is not None else None
        self._checkpoints = checkpoints
        self.frame_stack = frame_stack
        self.observation_key = observation_key
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
        )

    @property
    def data_dir(self) -> Path:
        """The folder the raw ``*_ckpt.N.gz`` files are read from."""
        if self._data_dir is not None:
            return self._data_dir
        return self.root / "dqn" / self.dataset_id / "replay_logs"

    def available_checkpoints(self) -> list[int]:
        """The checkpoint numbers found in :attr:`data_dir` (sorted)."""
        if not self.data_dir.is_dir():
            return []
        found = (_CKPT.match(p.name) for p in self.data_dir.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    # -- hooks -----------------------------------------------------------------------------------
    def _source_exists(self) -> bool:
        return bool(self.available_checkpoints())

    def _missing_message(self) -> str:
        game, _, run = self.dataset_id.partition("/")
        return (
            f"DQN-replay dataset {self.dataset_id!r} not found: expected the gzipped numpy "
            f"checkpoints of a Dopamine replay buffer ($store$_observation_ckpt.N.gz, "
            f"$store$_action_ckpt.N.gz, $store$_reward_ckpt.N.gz, $store$_terminal_ckpt.N.gz, "
            f"add_count_ckpt.N.gz, invalid_range_ckpt.N.gz) in {self.data_dir}. Obtain it "
            f"online with `gsutil -m cp -R {DQN_REPLAY_BUCKET}/{game or '<Game>'}/"
            f"{run or '<run>'} {self.root / 'dqn' / (game or '<Game>')}/` (or pass "
            f"download=True, which runs that command), then copy it here or pass data_dir=."
        )

    def _download(self) -> None:
        gsutil = shutil.which("gsutil")
        if gsutil is None:
            raise DatasetNotFoundError(
                "download=True needs the `gsutil` command (Google Cloud SDK), which is not "
                "installed. " + self._missing_message()
            )
        game, _, run = self.dataset_id.partition("/")
        if not game or not run:
            raise ValueError(
                f"dataset_id must be '<Game>/<run>' to download, got {self.dataset_id!r}"
            )
        dest = self.root / "dqn" / game
        dest.mkdir(parents=True, exist_ok=True)
        # subprocess.run waits for gsutil and kills it if this process is interrupted.
        subprocess.run(
            [gsutil, "-m", "cp", "-R", f"{DQN_REPLAY_BUCKET}/{game}/{run}", str(dest)], check=True
        )

    def _convert(self) -> TensorDictBase:
        raise NotImplementedError("the DQN-replay copy is written in chunks by _write")

    def _write(self, dest: Path) -> dict[str, Any]:
        found = self.available_checkpoints()
        wanted = self._checkpoints if self._checkpoints is not None else found
        missing = sorted(set(wanted) - set(found))
        if missing:
            raise DatasetNotFoundError(
                f"checkpoints {missing} of {self.dataset_id!r} are not in {self.data_dir} "
                f"(found {found})"
            )
        plans = [_checkpoint_plan(self.data_dir, c) for c in wanted]
        shapes = {p["frame_shape"] for p in plans}
        if len(shapes) != 1:
            raise DatasetFormatError(
                f"{self.data_dir}: the checkpoints' frames differ in shape: {sorted(shapes)}"
            )
        (frame_shape,) = shapes
        total = sum(int(p["frame"].sum()) for p in plans)
        template = TensorDict(
            {
                "pixels": torch.zeros((), dtype=torch.uint8).expand(total, *frame_shape),
                "segment": torch.zeros((), dtype=torch.int64).expand(total),
            },
            batch_size=[total],
        )
        frames = template.memmap_like(prefix=dest / "frames")
        pieces: dict[str, list[np.ndarray]] = {
            k: [] for k in ("frame", "action", "reward", "terminated", "truncated")
        }
        offset = seg_offset = 0
        for checkpoint, plan in zip(wanted, plans):
            path = _ckpt_file(self.data_dir, _STORE + "observation", checkpoint)
            _stream_frames(path, plan, frames["pixels"], offset, _CHUNK_ROWS)
            kept = plan["frame"]
            n_kept = int(kept.sum())
            segment = plan["segment"] + seg_offset
            frames["segment"][offset : offset + n_kept] = torch.from_numpy(segment[kept])
            # frame row of every chronological position (valid where kept)
            frame_row = offset + np.cumsum(kept) - 1
            step = plan["transition"]
            pos = np.flatnonzero(step)
            terminal = plan["terminal"][pos]
            # The data of an episode stops without a terminal step: truncated.
            following = np.zeros(pos.size, dtype=bool)
            following[:-1] = (pos[1:] == pos[:-1] + 1) & (segment[pos[1:]] == segment[pos[:-1]])
            pieces["frame"].append(frame_row[pos])
            pieces["action"].append(plan["action"][pos].astype(np.int64))
            pieces["reward"].append(plan["reward"][pos].astype(np.float32))
            pieces["terminated"].append(terminal)
            pieces["truncated"].append(~terminal & ~following)
            offset += n_kept
            seg_offset = int(segment.max()) + 1 if segment.size else seg_offset
        cat = {k: torch.from_numpy(np.concatenate(v)) for k, v in pieces.items()}
        steps = ted_from_arrays(
            cat["frame"],
            cat["action"],
            cat["reward"],
            cat["terminated"],
            cat["truncated"],
            cat["frame"] + 1,
            observation_key=FRAME_INDEX,
        ).exclude((NEXT, FRAME_INDEX))
        steps.memmap_(prefix=dest)
        return {
            "format": "dqn-replay",
            "source": str(self.data_dir),
            "checkpoints": list(wanted),
            "frames": total,
            "transitions": int(steps.shape[0]),
            "frame_shape": list(frame_shape),
            "num_actions": int(cat["action"].max()) + 1 if steps.shape[0] else 0,
        }

    def _make_storage(self, data: TensorDictBase) -> Storage:
        recorded = self.metadata.get("checkpoints")
        if self._checkpoints is not None and recorded != self._checkpoints:
            raise ValueError(
                f"the converted copy at {self.data_path} holds checkpoints {recorded}, not "
                f"{self._checkpoints}: pass download='force' to convert again (or another root)"
            )
        frames = TensorDict.load_memmap(self.data_path / "frames")
        return FrameStackStorage(
            data,
            frames["pixels"],
            frames["segment"],
            frame_stack=self.frame_stack,
            observation_key=self.observation_key,
        )
