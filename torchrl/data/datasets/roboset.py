"""RoboSet (RoboHive's robot-manipulation trajectories, HDF5) as replay buffers.

A RoboSet dataset (``"FK1-v4(expert)/FK1_MicroOpenRandom_v2d-v4"``, ...) is a folder of ``.h5``
files, one per data-collection seed; each holds one group per trajectory, ``Trial<k>``, with one
row per step::

    observations  [T, obs_dim]
    actions       [T, action_dim]
    rewards       [T]
    done          [T]              optional
    env_infos/... [T, ...]         optional, nested groups
    anything else [T, ...]         e.g. time
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._keys import NEXT, OBSERVATION
from torchrl.data.datasets._episodes import (
    EpisodeFilesReplay,
    following_rows,
    source_signature,
    write_chunks,
)
from torchrl.data.datasets.common import (
    DatasetFormatError,
    slice_sampler,
    ted_from_arrays,
)
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.writers import Writer

__all__ = ["ROBOSET_REPO_ID", "RobosetExperienceReplay"]

_has_h5py = importlib.util.find_spec("h5py") is not None

ROBOSET_REPO_ID = "jdvakil/RoboSet_Sim"
"""The Hugging Face dataset repository holding the simulated RoboSet files."""

_INSTALL = 'pip install "torchrl[offline]"'
_TRIAL = re.compile(r"Trial(\d+)$")
_REQUIRED = ("observations", "actions", "rewards")
INFO = "info"


def _import_h5py() -> Any:
    if not _has_h5py:
        raise ImportError(f"reading RoboSet files needs h5py: {_INSTALL}")
    import h5py

    return h5py


def _files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.suffix in (".h5", ".hdf5") and p.is_file())


def _read_group(group: Any, rows: int, where: str, h5py: Any) -> TensorDict:
    out = TensorDict(batch_size=[rows])
    for name, item in group.items():
        path = f"{where}/{name}"
        if isinstance(item, h5py.Group):
            out.set(name, _read_group(item, rows, path, h5py))
            continue
        if item.dtype.kind not in "biuf" or item.ndim == 0 or item.shape[0] != rows:
            raise DatasetFormatError(
                f"key {path!r} has shape {list(item.shape)} and dtype {item.dtype}, expected "
                f"{rows} numeric rows (one per step, as 'actions')"
            )
        out.set(name, torch.from_numpy(np.ascontiguousarray(item[()])))
    return out


def _trials(path: Path) -> list[tuple[int, str]]:
    h5py = _import_h5py()
    try:
        with h5py.File(path, "r") as file:
            names = list(file.keys())
    except OSError as err:
        raise DatasetFormatError(f"{path}: not a readable HDF5 file ({err})") from err
    found = [(int(m.group(1)), name) for name in names if (m := _TRIAL.match(name))]
    if not found:
        raise DatasetFormatError(
            f"{path}: no 'Trial<k>' group; a RoboSet file holds one group per trajectory "
            f"(found {names[:10]})"
        )
    return sorted(found)


def _read_trial(path: Path, name: str) -> TensorDict:
    h5py = _import_h5py()
    with h5py.File(path, "r") as file:
        group = file[name]
        missing = [k for k in _REQUIRED if k not in group]
        if missing:
            raise DatasetFormatError(
                f"{path}: {name}/{missing[0]} is missing; a RoboSet trajectory holds "
                f"{', '.join(_REQUIRED)} (found {sorted(group.keys())})"
            )
        rows = int(group["actions"].shape[0])
        try:
            return _read_group(group, rows, name, h5py)
        except DatasetFormatError as err:
            raise DatasetFormatError(f"{path}: {err}") from None


class RobosetExperienceReplay(EpisodeFilesReplay):
    """A RoboSet dataset (RoboHive ``Trial<k>`` HDF5 groups) as a replay buffer of TED transitions.

    The ``.h5`` files are read from ``data_dir`` (default ``<root>/raw/<dataset_id>``, where
    ``download=True`` puts them) and converted once into a memory-mapped copy under
    ``<root>/<dataset_id>/``. ``observations`` become ``"observation"``, ``actions``
    ``"action"``, ``rewards`` ``("next", "reward")`` and ``env_infos`` ``"info"``; other arrays
    keep their name. ``("next", "observation")`` and ``("next", "info")`` are the following row
    of the trajectory, zeros after its last row (unknown). ``done`` marks terminated steps; a
    trajectory's last step without it is truncated. ``"seed"`` is the file's rank (one file per
    collection seed), ``"trial"`` the ``k`` of ``Trial<k>`` and ``"episode"`` a running id.

    Args:
        dataset_id: e.g. ``"DAPG(expert)/door_v2d-v1"`` (see :attr:`available_datasets`).
        batch_size: default number of transitions per :meth:`sample`.

    Keyword Args:
        root: cache directory (default ``$TORCHRL_DATASETS_ROOT/roboset``).
        download: fetch the dataset's files from the ``jdvakil/RoboSet_Sim`` Hugging Face repo.
        data_dir: the folder of ``.h5`` files.
        slice_len, num_slices, strict_length: sample sub-trajectories (a ``SliceSampler``).
        split_trajs: store one zero-padded row per trajectory (with a ``"mask"``).
        sampler, writer, collate_fn, pin_memory, prefetch, transform: as in ``ReplayBuffer``.

    Examples:
        >>> import tempfile, h5py, numpy as np
        >>> root = tempfile.mkdtemp()
        >>> with h5py.File(f"{root}/seed0.h5", "w") as f:
        ...     for k in range(2):
        ...         g = f.create_group(f"Trial{k}")
        ...         g["observations"] = np.arange(3.0)[:, None] + 10 * k
        ...         g["actions"], g["rewards"] = np.zeros((3, 2)), np.ones(3)
        >>> data = RobosetExperienceReplay("DAPG(expert)/door_v2d-v1", 2, data_dir=root, root=root)
        >>> data[:]["next", "observation"].squeeze(-1).tolist(), data[:]["trial"].tolist()
        ([1.0, 2.0, 0.0, 11.0, 12.0, 0.0], [0, 0, 0, 1, 1, 1])
    """

    cache_name: ClassVar[str] = "roboset"
    available_datasets: ClassVar[list[str]] = [
        *(
            f"DAPG({who})/{task}_v2d-v1"
            for who in ("expert", "human")
            for task in ("door", "relocate", "hammer", "pen")
        ),
        *(
            f"FK1-v4(expert)/FK1_{task}_v2d-v4"
            for task in (
                "MicroOpenRandom",
                "Knob2OffRandom",
                "LdoorOpenRandom",
                "SdoorOpenRandom",
                "Knob1OnRandom",
            )
        ),
        "FK1-v4(human)/human_demos_by_playdata",
        "FK1-v4(human)/human_demos_by_task/human_demo_singleTask_Fixed-v4",
        *(
            f"FK1-v4(human)/human_demos_by_task/FK1_{task}_v2d-v4"
            for task in (
                "SdoorOpenRandom",
                "LdoorOpenRandom",
                "Knob2OffRandom",
                "Knob1OnRandom",
                "MicroOpenRandom",
            )
        ),
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

    def _source_files(self) -> list[Path]:
        return _files(self.data_dir)

    def _missing_message(self) -> str:
        known = self._unlisted_note()
        return (
            f"RoboSet dataset {self.dataset_id!r} not found{known}: expected RoboHive .h5 files "
            f"(Trial<k> groups with observations, actions, rewards) under {self.data_dir}. To "
            f"get it: pass download=True (fetches {self.dataset_id}/ from the Hugging Face "
            f"dataset {ROBOSET_REPO_ID}), or run `huggingface-cli download {ROBOSET_REPO_ID} "
            f"--repo-type dataset --include '{self.dataset_id}/*' --local-dir "
            f"{self.root / 'raw'}`, or pass data_dir=."
        )

    def _download(self) -> None:
        self._download_from_hub(ROBOSET_REPO_ID, f"{self.dataset_id}/*")

    def _write(self, dest: Path) -> dict[str, Any]:
        h5py = _import_h5py()
        files = self._source_files()
        plan = [(path, _trials(path)) for path in files]
        total = 0
        for path, trials in plan:
            with h5py.File(path, "r") as file:
                for _, name in trials:
                    actions = file[name].get("actions")
                    total += int(actions.shape[0]) if actions is not None else 0
        write_chunks(dest, total, self._chunks(plan))
        return {
            "format": "roboset h5",
            "dataset_id": self.dataset_id,
            "source": source_signature(files),
            "num_transitions": total,
            "num_trajectories": sum(len(t) for _, t in plan),
        }

    def _chunks(
        self, plan: list[tuple[Path, list[tuple[int, str]]]]
    ) -> Iterator[tuple[str, TensorDictBase]]:
        episode = 0
        for seed, (path, trials) in enumerate(plan):
            for trial, name in trials:
                raw = _read_trial(path, name)
                t = raw.shape[0]
                if t == 0:
                    continue
                last = torch.zeros(t, dtype=torch.bool)
                last[-1] = True
                obs = raw.get("observations")
                done = raw.get("done", None)
                terminated = (
                    done.reshape(t).bool() if done is not None else torch.zeros(t, dtype=torch.bool)
                )
                ted = ted_from_arrays(
                    obs,
                    raw.get("actions"),
                    raw.get("rewards").reshape(t),
                    terminated,
                    last & ~terminated,
                    following_rows(obs, last),
                    episode=torch.full((t,), episode, dtype=torch.int64),
                    observation_key=OBSERVATION,
                )
                infos = raw.get("env_infos", None)
                if infos is not None:
                    ted.set(INFO, infos)
                    ted.set((NEXT, INFO), following_rows(infos, last))
                for key in raw.keys():
                    if key not in (*_REQUIRED, "done", "env_infos"):
                        ted.set(key, raw.get(key))
                ted.set("seed", torch.full((t,), seed, dtype=torch.int64))
                ted.set("trial", torch.full((t,), trial, dtype=torch.int64))
                episode += 1
                yield f"{path}:{name}", ted
