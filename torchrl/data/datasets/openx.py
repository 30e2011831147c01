"""Open X-Embodiment robot datasets, read from the WebDataset mirror without TensorFlow.

The Open X-Embodiment datasets are published as RLDS episodes in TFDS TFRecord files, which only
TensorFlow reads. The Hugging Face mirror ``jxu124/OpenX-Embodiment`` holds the same episodes as
WebDataset tar shards (``<dataset_id>/<dataset_id>_00000.tar``, ...); each member
``<key>.data.pickle`` is one pickled episode: a dict whose ``"steps"`` list holds one dict per
step with ``observation`` (a dict; camera images as ``{"bytes": <jpeg/png>, "path": ...}``),
``action``, ``reward``, ``discount``, ``is_first``, ``is_last``, ``is_terminal``,
``language_instruction`` (text) and, in many datasets, ``language_embedding``.
"""

from __future__ import annotations

import importlib.util
import io
import tarfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import NonTensorStack, TensorDict, TensorDictBase

from torchrl._keys import ACTION, OBSERVATION
from torchrl.data.datasets._episodes import (
    EpisodeFilesReplay,
    following_rows,
    safe_unpickle,
    source_signature,
    write_chunks,
)
from torchrl.data.datasets.common import (
    EPISODE,
    DatasetFormatError,
    ted_from_arrays,
)
from torchrl.data.replay_buffers.samplers import (
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)
from torchrl.data.replay_buffers.storages import IndexLike, Storage, TensorStorage
from torchrl.data.replay_buffers.writers import Writer

__all__ = ["OPENX_REPO_ID", "OpenXExperienceReplay"]

_has_pil = importlib.util.find_spec("PIL") is not None

OPENX_REPO_ID = "jxu124/OpenX-Embodiment"
"""The Hugging Face dataset repository holding the WebDataset mirror of Open X-Embodiment."""

_FLAGS = ("is_first", "is_last", "is_terminal")
_TFDS_MARKERS = ("dataset_info.json", "features.json")


def _shards(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*.tar") if p.is_file())


def _episodes(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(member name, episode dict)`` for each ``*.data.pickle`` member of a tar shard."""
    try:
        with tarfile.open(path, mode="r|*") as tar:
            for member in tar:
                if not member.isfile() or not member.name.endswith(".data.pickle"):
                    continue
                stream = tar.extractfile(member)
                where = f"{path}:{member.name}"
                if stream is None:
                    raise DatasetFormatError(f"{where}: cannot read the member")
                payload = safe_unpickle(stream.read(), where)
                if not isinstance(payload, Mapping) or not isinstance(payload.get("steps"), list):
                    raise DatasetFormatError(
                        f"{where}: expected a dict with a 'steps' list (one dict per step), got "
                        f"{type(payload).__name__}"
                        + (f" with keys {sorted(payload)}" if isinstance(payload, Mapping) else "")
                    )
                yield where, dict(payload)
    except (tarfile.TarError, OSError) as err:
        raise DatasetFormatError(f"{path}: not a readable tar shard ({err})") from err


def _is_image(value: Any) -> bool:
    return isinstance(value, Mapping) and "bytes" in value and set(value) <= {"bytes", "path"}


def _decode_image(value: Mapping[str, Any], where: str) -> np.ndarray:
    if not _has_pil:
        raise ImportError("decoding Open X-Embodiment images needs Pillow: pip install pillow")
    from PIL import Image

    data = value.get("bytes")
    if data is None:
        raise DatasetFormatError(f"{where}: an image entry without bytes")
    try:
        array = np.asarray(Image.open(io.BytesIO(bytes(data))))
    except OSError as err:
        raise DatasetFormatError(f"{where}: cannot decode the image ({err})") from err
    return array.transpose(2, 0, 1) if array.ndim == 3 else array  # HWC -> CHW


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray) and value.dtype.kind in "SUO" and value.size == 1:
        return _text(value.reshape(()).item())
    return None


def _flatten(
    step: Mapping[str, Any], prefix: tuple[str, ...], out: dict[tuple[str, ...], Any]
) -> None:
    for key, value in step.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and not _is_image(value):
            _flatten(value, path, out)
        elif value is not None:
            out[path] = value


def _stack_steps(steps: list[Any], where: str, strings: dict[str, dict[str, int]]) -> TensorDict:
    """The ``[T]`` TensorDict of an episode's steps; text becomes ids into ``strings``."""
    flat: list[dict[tuple[str, ...], Any]] = []
    for i, step in enumerate(steps):
        if not isinstance(step, Mapping):
            raise DatasetFormatError(f"{where}: step {i} is a {type(step).__name__}, not a dict")
        row: dict[tuple[str, ...], Any] = {}
        _flatten(step, (), row)
        flat.append(row)
    keys = list(flat[0])
    out = TensorDict(batch_size=[len(steps)])
    for i, row in enumerate(flat):
        if set(row) != set(keys):
            raise DatasetFormatError(
                f"{where}: step {i} has keys {sorted(map('/'.join, row))}, step 0 has "
                f"{sorted(map('/'.join, keys))}; every step must hold the same keys"
            )
    for key in keys:
        name = "/".join(key)
        values = [row[key] for row in flat]
        if _is_image(values[0]):
            column = np.stack([_decode_image(v, f"{where} {name}") for v in values])
        elif _text(values[0]) is not None:
            table = strings.setdefault(name, {})
            ids = [table.setdefault(_text(v) or "", len(table)) for v in values]
            column = np.asarray(ids, dtype=np.int64)
        else:
            try:
                column = np.stack([np.asarray(v) for v in values])
            except ValueError as err:
                raise DatasetFormatError(
                    f"{where}: key {name!r} changes shape between steps ({err})"
                ) from err
            if column.dtype.kind not in "biuf":
                raise DatasetFormatError(
                    f"{where}: key {name!r} has dtype {column.dtype}, expected numbers, booleans, "
                    f"text or encoded images"
                )
        out.set(key, torch.from_numpy(np.ascontiguousarray(column)))
    return out


def _episode_ted(raw: TensorDict, where: str) -> TensorDict:
    t = raw.shape[0]
    for required in (OBSERVATION, ACTION):
        if required not in raw.keys():
            raise DatasetFormatError(
                f"{where}: steps have no {required!r}; an Open X-Embodiment step holds "
                f"observation and action (found {sorted(raw.keys())})"
            )
    last = torch.zeros(t, dtype=torch.bool)
    last[-1] = True
    flags = {k: raw.get(k).reshape(t).bool() if k in raw.keys() else None for k in _FLAGS}
    terminal = flags["is_terminal"]
    terminated = terminal if terminal is not None else torch.zeros(t, dtype=torch.bool)
    ends = flags["is_last"] | last if flags["is_last"] is not None else last
    reward = raw.get("reward") if "reward" in raw.keys() else torch.zeros(t)
    obs = raw.get(OBSERVATION)
    ted = ted_from_arrays(
        obs,
        raw.get(ACTION),
        reward.reshape(t),
        terminated,
        ends & ~terminated,
        following_rows(obs, last),
        observation_key=OBSERVATION,
    )
    for key in raw.keys():
        if key not in (OBSERVATION, ACTION, "reward", *_FLAGS):
            ted.set(key, raw.get(key))
    return ted


class TextTableStorage(TensorStorage):
    """A read-only storage that turns stored text ids back into text when a batch is read.

    Args:
        data: the stored TensorDict; each text entry holds int64 ids.
        tables: entry name (``"/"``-joined key) -> the texts, indexed by id.

    Examples:
        >>> data = TensorDict({"lang": torch.tensor([1, 0])}, [2])
        >>> TextTableStorage(data, {"lang": ["pick", "place"]}).get(0).get("lang").data
        'place'
    """

    def __init__(self, data: TensorDictBase, tables: Mapping[str, list[str]]) -> None:
        super().__init__(data)
        self.tables = {tuple(name.split("/")): list(texts) for name, texts in tables.items()}

    def get(self, index: IndexLike) -> TensorDictBase:
        out = super().get(index)
        assert isinstance(out, TensorDictBase)
        for key, texts in self.tables.items():
            ids = out.get(key, None)
            if ids is None or not isinstance(ids, torch.Tensor):
                continue
            if ids.ndim == 0:
                out.set_non_tensor(key, texts[int(ids)])
                continue
            flat = [texts[i] for i in ids.reshape(-1).tolist()]
            stack = NonTensorStack(*flat, batch_size=[len(flat)])
            out.set(key, stack.reshape(ids.shape) if ids.ndim > 1 else stack)
        return out

    def set(self, index: int | slice | torch.Tensor, data: Any) -> None:
        raise RuntimeError(f"{type(self).__name__} is read-only (a converted dataset)")


class OpenXExperienceReplay(EpisodeFilesReplay):
    """An Open X-Embodiment dataset (WebDataset tar shards of pickled episodes) as TED steps.

    The shards are read from ``data_dir`` (default ``<root>/raw/<dataset_id>``, where
    ``download=True`` puts them) and converted once, episode by episode, into a memory-mapped
    copy under ``<root>/<dataset_id>/``. Each step becomes a transition: ``observation`` (a
    TensorDict; images decoded with Pillow to uint8 ``[C, H, W]``), ``action``, ``("next",
    "reward")``, ``("next", "observation")`` (the next step's, zeros after the last step),
    ``terminated`` from ``is_terminal`` and ``truncated`` at ``is_last`` (or the episode's end)
    when not terminal; other entries (``discount``, ``language_embedding``, ...) keep their name.
    Text such as ``language_instruction`` is stored once in a table and comes back as text in
    samples (``batch.get("language_instruction").tolist()``). Pickles are unpickled with a
    loader that accepts numpy arrays and plain data only. The RLDS TFRecord files of the
    original release need TensorFlow and are refused; ``streaming=True`` (reading from the hub)
    is not supported.

    Args:
        dataset_id: e.g. ``"cmu_stretch"`` (see :attr:`available_datasets`).
        batch_size: default number of steps per :meth:`sample`.

    Keyword Args:
        shuffle: with ``replacement=False``, draw in random order (``False``: storage order).
        num_slices, slice_len, strict_length: sample sub-trajectories (a ``SliceSampler``).
        pad: with slices, pad short trajectories with this value (``True`` means 0).
        replacement: ``False`` samples every step (or slice) once per epoch.
        streaming: not supported (raises).
        root: cache directory (default ``$TORCHRL_DATASETS_ROOT/openx``).
        download: fetch the dataset's shards from the ``jxu124/OpenX-Embodiment`` HF mirror.
        data_dir: the folder of ``.tar`` shards.
        split_trajs: store one zero-padded row per episode (with a ``"mask"``).
        sampler, writer, collate_fn, pin_memory, prefetch, transform: as in ``ReplayBuffer``.

    Examples:
        >>> import io, pickle, tarfile, tempfile, numpy as np
        >>> root = tempfile.mkdtemp()
        >>> steps = [{"observation": {"state": np.full(2, float(t))}, "action": np.ones(3),
        ...     "reward": 0.0, "is_first": t == 0, "is_last": t == 2, "is_terminal": t == 2,
        ...     "language_instruction": "open the drawer"} for t in range(3)]
        >>> blob = pickle.dumps({"steps": steps})
        >>> with tarfile.open(f"{root}/shard_00000.tar", "w") as tar:
        ...     info = tarfile.TarInfo("ep0.data.pickle"); info.size = len(blob)
        ...     tar.addfile(info, io.BytesIO(blob))
        >>> data = OpenXExperienceReplay("cmu_stretch", 2, data_dir=root, root=root)
        >>> batch = data[torch.arange(3)]
        >>> batch["next", "terminated"].squeeze(-1).tolist(), batch.get("language_instruction")[0].data
        ([False, False, True], 'open the drawer')
    """

    cache_name: ClassVar[str] = "openx"
    available_datasets: ClassVar[list[str]] = [
        "fractal20220817_data",
        "kuka",
        "bridge",
        "taco_play",
        "jaco_play",
        "berkeley_cable_routing",
        "roboturk",
        "nyu_door_opening_surprising_effectiveness",
        "viola",
        "berkeley_autolab_ur5",
        "toto",
        "language_table",
        "columbia_cairlab_pusht_real",
        "stanford_kuka_multimodal_dataset_converted_externally_to_rlds",
        "nyu_rot_dataset_converted_externally_to_rlds",
        "stanford_hydra_dataset_converted_externally_to_rlds",
        "austin_buds_dataset_converted_externally_to_rlds",
        "nyu_franka_play_dataset_converted_externally_to_rlds",
        "maniskill_dataset_converted_externally_to_rlds",
        "furniture_bench_dataset_converted_externally_to_rlds",
        "cmu_franka_exploration_dataset_converted_externally_to_rlds",
        "ucsd_kitchen_dataset_converted_externally_to_rlds",
        "ucsd_pick_and_place_dataset_converted_externally_to_rlds",
        "austin_sailor_dataset_converted_externally_to_rlds",
        "austin_sirius_dataset_converted_externally_to_rlds",
        "bc_z",
        "usc_cloth_sim_converted_externally_to_rlds",
        "utokyo_pr2_opening_fridge_converted_externally_to_rlds",
        "utokyo_pr2_tabletop_manipulation_converted_externally_to_rlds",
        "utokyo_saytap_converted_externally_to_rlds",
        "utokyo_xarm_pick_and_place_converted_externally_to_rlds",
        "utokyo_xarm_bimanual_converted_externally_to_rlds",
        "robo_net",
        "berkeley_mvp_converted_externally_to_rlds",
        "berkeley_rpt_converted_externally_to_rlds",
        "kaist_nonprehensile_converted_externally_to_rlds",
        "stanford_mask_vit_converted_externally_to_rlds",
        "tokyo_u_lsmo_converted_externally_to_rlds",
        "dlr_sara_pour_converted_externally_to_rlds",
        "dlr_sara_grid_clamp_converted_externally_to_rlds",
        "dlr_edan_shared_control_converted_externally_to_rlds",
        "asu_table_top_converted_externally_to_rlds",
        "stanford_robocook_converted_externally_to_rlds",
        "eth_agent_affordances",
        "imperialcollege_sawyer_wrist_cam",
        "iamlab_cmu_pickup_insert_converted_externally_to_rlds",
        "uiuc_d3field",
        "utaustin_mutex",
        "berkeley_fanuc_manipulation",
        "cmu_playing_with_food",
        "cmu_play_fusion",
        "cmu_stretch",
        "berkeley_gnm_recon",
        "berkeley_gnm_cory_hall",
        "berkeley_gnm_sac_son",
    ]

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None = None,
        *,
        shuffle: bool = True,
        num_slices: int | None = None,
        slice_len: int | None = None,
        pad: float | bool | None = None,
        replacement: bool | None = None,
        streaming: bool | None = None,
        root: str | Path | None = None,
        download: bool | str = False,
        data_dir: str | Path | None = None,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        split_trajs: bool = False,
        strict_length: bool = True,
    ) -> None:
        if streaming:
            raise NotImplementedError(
                "OpenXExperienceReplay(streaming=True) would read episodes from the Hugging Face "
                "hub as they are sampled; this reader works on local shards only: download them "
                "(download=True) and read them with streaming=False"
            )
        sampler = self._sampler(sampler, shuffle, num_slices, slice_len, pad, replacement,
                                strict_length)  # fmt: skip
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

    @staticmethod
    def _sampler(
        sampler: Sampler | None,
        shuffle: bool,
        num_slices: int | None,
        slice_len: int | None,
        pad: float | bool | None,
        replacement: bool | None,
        strict_length: bool,
    ) -> Sampler | None:
        slices = num_slices is not None or slice_len is not None
        # 0.0 is a padding value, not "no padding" (0.0 == False in Python)
        padding = pad is not None and pad is not False
        pad_value = 0.0 if pad is True else float(pad) if isinstance(pad, int | float) else None
        if sampler is not None:
            if slices or replacement is not None:
                raise ValueError("pass either sampler= or num_slices=/slice_len=/replacement=")
            return sampler
        if padding and not slices:
            raise ValueError("pad= pads short slices: it needs num_slices= or slice_len=")
        if not slices:
            if replacement is False or not shuffle:
                return SamplerWithoutReplacement(shuffle=shuffle)
            return None
        if replacement is False or not shuffle:
            if padding:
                raise ValueError("pad= works with replacement=True only")
            return SliceSamplerWithoutReplacement(
                num_slices=num_slices,
                slice_len=slice_len,
                traj_key=EPISODE,
                strict_length=strict_length,
                shuffle=shuffle,
            )
        return SliceSampler(
            num_slices=num_slices,
            slice_len=slice_len,
            traj_key=EPISODE,
            strict_length=strict_length,
            pad=pad_value if padding else None,
        )

    def _source_files(self) -> list[Path]:
        return _shards(self.data_dir)

    def _missing_message(self) -> str:
        folder = self.data_dir
        tfds = folder.is_dir() and (
            any(folder.rglob("*.tfrecord*")) or any((folder / m).exists() for m in _TFDS_MARKERS)
        )
        if tfds:
            return (
                f"{folder} holds the RLDS/TFDS release of {self.dataset_id!r} (TFRecord files); "
                f"reading it needs TensorFlow and tensorflow_datasets, which this reader does "
                f"not use. Get the WebDataset shards of the same episodes instead: "
                f"download=True, or `huggingface-cli download {OPENX_REPO_ID} --repo-type "
                f"dataset --include '{self.dataset_id}/*' --local-dir {self.root / 'raw'}`."
            )
        known = self._unlisted_note()
        return (
            f"Open X-Embodiment dataset {self.dataset_id!r} not found{known}: expected the "
            f"WebDataset .tar shards of {OPENX_REPO_ID} (members <key>.data.pickle, one episode "
            f"each) under {folder}. To get them: pass download=True, or run `huggingface-cli "
            f"download {OPENX_REPO_ID} --repo-type dataset --include '{self.dataset_id}/*' "
            f"--local-dir {self.root / 'raw'}`, or pass data_dir=."
        )

    def _download(self) -> None:
        self._download_from_hub(OPENX_REPO_ID, f"{self.dataset_id}/*.tar")

    def _write(self, dest: Path) -> dict[str, Any]:
        files = self._source_files()
        total = episodes = 0
        for path in files:
            for _, payload in _episodes(path):
                total += len(payload["steps"])
                episodes += bool(payload["steps"])
        strings: dict[str, dict[str, int]] = {}
        write_chunks(dest, total, self._chunks(files, strings))
        return {
            "format": "openx webdataset",
            "dataset_id": self.dataset_id,
            "source": source_signature(files),
            "num_transitions": total,
            "num_episodes": episodes,
            "texts": {name: list(table) for name, table in strings.items()},
        }

    def _chunks(
        self, files: list[Path], strings: dict[str, dict[str, int]]
    ) -> Iterator[tuple[str, TensorDictBase]]:
        episode = 0
        for path in files:
            for where, payload in _episodes(path):
                steps = payload["steps"]
                if not steps:
                    continue
                ted = _episode_ted(_stack_steps(steps, where, strings), where)
                ted.set(EPISODE, torch.full((len(steps),), episode, dtype=torch.int64))
                episode += 1
                yield where, ted

    def _make_storage(self, data: TensorDictBase) -> Storage:
        texts = self.metadata.get("texts") or {}
        if not texts:
            return TensorStorage(data)
        return TextTableStorage(data, texts)
