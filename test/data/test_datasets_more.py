"""Gen-DGRL, V-D4RL, RoboSet and Open X-Embodiment readers over small files written here.

Each test writes a few episodes in the dataset's real on-disk format (npz archives, HDF5 groups,
WebDataset tar shards of pickled episodes) and reads them back; nothing is downloaded.
"""

from __future__ import annotations

import io
import pickle
import tarfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from torchrl.data.datasets.common import DatasetFormatError, DatasetNotFoundError
from torchrl.data.datasets.gen_dgrl import GenDGRLExperienceReplay
from torchrl.data.datasets.openx import OpenXExperienceReplay
from torchrl.data.datasets.registry import list_datasets, load_dataset
from torchrl.data.datasets.roboset import RobosetExperienceReplay
from torchrl.data.datasets.vd4rl import PixelStorage, VD4RLExperienceReplay


def squeeze(x: torch.Tensor) -> list:
    return x.reshape(x.shape[0], -1)[:, 0].tolist()


# -- Gen-DGRL ---------------------------------------------------------------------------------------
def write_procgen_episode(folder: Path, name: str, t: int, base: int, done_at_end: bool) -> None:
    """An episode as the public archives hold it (np.save of a dict: a pickled .npy file) or,
    for a ``.npz`` name, as the authors' collector writes it."""
    frames = (base + np.arange(t + 1)).astype(np.uint8)
    obs = np.broadcast_to(frames[:, None, None, None], (t + 1, 3, 64, 64)).copy()
    dones = np.zeros(t, bool)
    dones[-1] = done_at_end
    episode = {
        "observations": obs,
        "actions": np.arange(t).reshape(t, 1) % 15,
        "rewards": np.linspace(0, 1, t).reshape(t, 1),
        "dones": dones,
    }
    if name.endswith(".npz"):
        np.savez_compressed(folder / name, **episode)
    else:
        np.save(folder / name, episode)


@pytest.fixture
def procgen_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "raw" / "coinrun-1M_S" / "coinrun"
    folder.mkdir(parents=True)
    write_procgen_episode(folder, "20240101T000000_0_3_11_1.00.npy", 3, 0, True)
    write_procgen_episode(folder, "20240101T000001_1_4_12_0.00.npz", 4, 100, False)
    return tmp_path


def test_gen_dgrl_reads_episodes(procgen_dir: Path) -> None:
    data = GenDGRLExperienceReplay("coinrun-1M_S", 4, root=procgen_dir)
    assert len(data) == 7
    td = data[:]
    assert td["observation"].shape == (7, 3, 64, 64)
    assert td["observation"].dtype == torch.uint8
    assert td["episode"].tolist() == [0, 0, 0, 1, 1, 1, 1]
    assert td["level_seed"].tolist() == [11] * 3 + [12] * 4
    assert td["action"].tolist() == [0, 1, 2, 0, 1, 2, 3]
    # next frame; zeroed after the done (Procgen's auto-reset frame); kept at a truncation
    assert squeeze(td["next", "observation"]) == [1, 2, 0, 101, 102, 103, 104]
    assert squeeze(td["next", "terminated"]) == [False, False, True] + [False] * 4
    assert squeeze(td["next", "truncated"]) == [False] * 6 + [True]
    assert data.sample().shape == (4,)
    assert data.metadata["num_episodes"] == 2
    same = load_dataset("gen_dgrl/coinrun-1M_S", root=procgen_dir, batch_size=2)
    assert len(same) == 7


def test_gen_dgrl_slices_and_split(procgen_dir: Path) -> None:
    data = GenDGRLExperienceReplay("coinrun-1M_S", 4, root=procgen_dir, slice_len=2)
    batch = data.sample()
    ep = batch["episode"].reshape(2, 2)
    assert (ep[:, 0] == ep[:, 1]).all()
    split = GenDGRLExperienceReplay("coinrun-1M_S", root=procgen_dir, split_trajs=True)
    assert split[:]["mask"].sum().item() == 7


def test_gen_dgrl_missing_and_malformed(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        GenDGRLExperienceReplay("bigfish-1M_E", root=tmp_path)
    message = str(info.value)
    assert "bigfish-1M_E" in message and str(tmp_path / "raw" / "bigfish-1M_E") in message
    assert "1M/level_200/expert/bigfish.tar.xz" in message and "download=True" in message
    folder = tmp_path / "bad"
    folder.mkdir()
    np.savez(folder / "ep.npz", observations=np.zeros((3, 3, 64, 64), np.uint8))
    with pytest.raises(DatasetFormatError, match="missing key 'actions'"):
        GenDGRLExperienceReplay("bigfish-1M_E", root=tmp_path, data_dir=folder)
    np.savez(
        folder / "ep.npz",
        observations=np.zeros((9, 3, 64, 64), np.uint8),
        actions=np.zeros(3),
        rewards=np.zeros(3),
        dones=np.zeros(3, bool),
    )
    with pytest.raises(DatasetFormatError, match="'observations' has 9 rows"):
        GenDGRLExperienceReplay("bigfish-1M_E", root=tmp_path, data_dir=folder)
    (folder / "ep.npz").write_bytes(b"not an archive")
    with pytest.raises(DatasetFormatError, match="neither a NumPy .npz archive nor a .npy"):
        GenDGRLExperienceReplay("bigfish-1M_E", root=tmp_path, data_dir=folder)
    (folder / "ep.npz").unlink()
    np.save(folder / "ep.npy", np.zeros(3))
    with pytest.raises(DatasetFormatError, match="a .npy file of one float64 array"):
        GenDGRLExperienceReplay("bigfish-1M_E", root=tmp_path, data_dir=folder)


class _RunsCode:
    def __reduce__(self):  # a plain np.load(allow_pickle=True) would call print
        return (print, ("pwned",))


def test_gen_dgrl_refuses_code_in_pickled_npy(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "raw" / "maze-level_1_E"
    folder.mkdir(parents=True)
    np.save(folder / "ep.npy", np.array({"observations": _RunsCode()}, dtype=object))
    with pytest.raises(DatasetFormatError, match="refusing builtins.print"):
        GenDGRLExperienceReplay("maze-level_1_E", root=tmp_path)
    assert "pwned" not in capsys.readouterr().out


def test_gen_dgrl_converts_once_and_again_when_files_change(procgen_dir: Path) -> None:
    GenDGRLExperienceReplay("coinrun-1M_S", root=procgen_dir)
    flat = procgen_dir / "coinrun-1M_S" / "flat"
    stamp = (flat / ".complete").stat().st_mtime_ns
    GenDGRLExperienceReplay("coinrun-1M_S", root=procgen_dir)
    assert (flat / ".complete").stat().st_mtime_ns == stamp
    folder = procgen_dir / "raw" / "coinrun-1M_S" / "coinrun"
    write_procgen_episode(folder, "20240101T000002_2_2_13_0.00.npz", 2, 50, True)
    assert len(GenDGRLExperienceReplay("coinrun-1M_S", root=procgen_dir)) == 9


# -- V-D4RL ---------------------------------------------------------------------------------------
VD4RL_ID = "main/walker_walk/medium/64px"


@pytest.fixture
def vd4rl_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "raw" / "vd4rl" / VD4RL_ID
    folder.mkdir(parents=True)
    # DrQ-style npz: two episodes of 3 rows (2 transitions) in one file, cut at step_type 0
    rows = 6
    frames = np.arange(rows, dtype=np.uint8)
    np.savez(
        folder / "20220101T000000_0_6.npz",
        observation=np.broadcast_to(frames[:, None, None, None], (rows, 3, 8, 8)).copy(),
        action=np.arange(rows, dtype=np.float32).reshape(rows, 1).repeat(2, 1),
        reward=np.arange(rows, dtype=np.float32),
        discount=np.ones(rows, np.float32),
        step_type=np.array([0, 1, 2, 0, 1, 2]),
    )
    # Dreamer-style hdf5: HWC images, explicit flags, a terminal last step, a state entry
    with h5py.File(folder / "episode_1.hdf5", "w") as f:
        f["image"] = np.full((4, 8, 8, 3), 200, np.uint8)
        f["action"] = np.ones((4, 2), np.float32)
        f["reward"] = np.array([0, 1, 2, 3], np.float32)
        f["discount"] = np.array([1, 1, 1, 0], np.float32)
        f["is_first"] = np.array([1, 0, 0, 0], bool)
        f["is_last"] = np.array([0, 0, 0, 1], bool)
        f["is_terminal"] = np.array([0, 0, 0, 1], bool)
    return tmp_path


def test_vd4rl_reads_npz_and_hdf5(vd4rl_dir: Path) -> None:
    data = VD4RLExperienceReplay(VD4RL_ID, 3, root=vd4rl_dir, totensor=False)
    td = data[:]
    assert len(data) == 7  # 2 + 2 from the npz file, 3 from the hdf5 file
    assert td["episode"].tolist() == [0, 0, 1, 1, 2, 2, 2]
    assert td["pixels"].shape == (7, 3, 8, 8) and td["pixels"].dtype == torch.uint8
    # the action and reward of row t + 1 belong to the transition from row t
    assert squeeze(td["pixels"])[:4] == [0, 1, 3, 4]
    assert squeeze(td["next", "pixels"])[:4] == [1, 2, 4, 5]
    assert squeeze(td["action"])[:4] == [1.0, 2.0, 4.0, 5.0]
    assert squeeze(td["next", "reward"]) == [1.0, 2.0, 4.0, 5.0, 1.0, 2.0, 3.0]
    assert squeeze(td["next", "terminated"]) == [False] * 6 + [True]
    assert squeeze(td["next", "truncated"]) == [False, True, False, True, False, False, False]
    assert squeeze(td["pixels"])[4:] == [200, 200, 200]  # HWC frames were transposed


def test_vd4rl_threads_give_the_same_copy(vd4rl_dir: Path, tmp_path: Path) -> None:
    folder = vd4rl_dir / "raw" / "vd4rl" / VD4RL_ID
    serial = VD4RLExperienceReplay(VD4RL_ID, root=vd4rl_dir, totensor=False)[:]
    threaded = VD4RLExperienceReplay(
        VD4RL_ID, root=tmp_path / "other", data_dir=folder, totensor=False, num_workers=2
    )[:]
    assert (serial == threaded).all()
    with pytest.raises(ValueError, match="num_workers"):
        VD4RLExperienceReplay(VD4RL_ID, root=vd4rl_dir, num_workers=-1)


def test_vd4rl_float_pixels_and_resize(vd4rl_dir: Path) -> None:
    data = VD4RLExperienceReplay(VD4RL_ID, 2, root=vd4rl_dir, image_size=4)
    batch = data.sample()
    assert batch["pixels"].dtype == torch.float32 and batch["pixels"].shape == (2, 3, 4, 4)
    assert batch["next", "pixels"].max() <= 1.0
    via_registry = load_dataset(f"vd4rl/{VD4RL_ID}", root=vd4rl_dir, batch_size=2)
    assert isinstance(via_registry, VD4RLExperienceReplay)
    with pytest.raises(ValueError, match="needs totensor=True"):
        VD4RLExperienceReplay(VD4RL_ID, root=vd4rl_dir, totensor=False, image_size=4)
    with pytest.raises(ValueError, match="image_size"):
        PixelStorage(data[:2], image_size=(4,))


def test_vd4rl_missing_and_malformed(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        VD4RLExperienceReplay(VD4RL_ID, root=tmp_path)
    assert "conglu/vd4rl" in str(info.value) and VD4RL_ID in str(info.value)
    folder = tmp_path / "bad"
    folder.mkdir()
    np.savez(folder / "e.npz", observation=np.zeros((3, 3, 8, 8), np.uint8), reward=np.zeros(3))
    with pytest.raises(DatasetFormatError, match="missing key 'action'"):
        VD4RLExperienceReplay(VD4RL_ID, root=tmp_path, data_dir=folder)
    np.savez(
        folder / "e.npz",
        observation=np.zeros((3, 3, 8, 8), np.uint8),
        action=np.zeros((2, 1)),
        reward=np.zeros(3),
    )
    with pytest.raises(DatasetFormatError, match="key 'observation' has shape"):
        VD4RLExperienceReplay(VD4RL_ID, root=tmp_path, data_dir=folder)
    np.savez(
        folder / "e.npz",
        observation=np.zeros((3, 3, 8, 8), np.uint8),
        action=np.zeros((3, 1)),
        reward=np.zeros(3),
        is_first=np.zeros(2, bool),
    )
    with pytest.raises(DatasetFormatError, match="key 'is_first' has shape"):
        VD4RLExperienceReplay(VD4RL_ID, root=tmp_path, data_dir=folder)


# -- RoboSet ---------------------------------------------------------------------------------------
ROBOSET_ID = "FK1-v4(expert)/FK1_Knob1OnRandom_v2d-v4"


@pytest.fixture
def roboset_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "raw" / ROBOSET_ID
    folder.mkdir(parents=True)
    for seed in range(2):
        with h5py.File(folder / f"seed{seed}.h5", "w") as f:
            for trial in (0, 1):
                g = f.create_group(f"Trial{trial}")
                t = 3
                g["observations"] = (
                    100 * seed + 10 * trial + np.arange(t, dtype=np.float32)[:, None].repeat(4, 1)
                )
                g["actions"] = np.zeros((t, 2), np.float32)
                g["rewards"] = np.arange(t, dtype=np.float32)
                g["done"] = np.array([0, 0, trial], bool)
                g["time"] = np.arange(t, dtype=np.float64) * 0.1
                g.create_group("env_infos").create_group("obs_dict")["qp"] = np.ones((t, 3))
    return tmp_path


def test_roboset_reads_trials(roboset_dir: Path) -> None:
    data = RobosetExperienceReplay(ROBOSET_ID, 5, root=roboset_dir)
    td = data[:]
    assert len(data) == 12
    assert td["seed"].tolist() == [0] * 6 + [1] * 6
    assert td["trial"].tolist() == [0, 0, 0, 1, 1, 1] * 2
    assert td["episode"].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert squeeze(td["next", "observation"])[:6] == [1, 2, 0, 11, 12, 0]
    assert squeeze(td["next", "terminated"])[:6] == [False] * 5 + [True]
    assert squeeze(td["next", "truncated"])[:6] == [False, False, True] + [False] * 3
    assert td["info", "obs_dict", "qp"].shape == (12, 3)
    assert td["next", "info", "obs_dict", "qp"][2].sum() == 0
    assert td["time"].dtype == torch.float64
    assert len(load_dataset(f"roboset/{ROBOSET_ID}", root=roboset_dir)) == 12


def test_roboset_missing_and_malformed(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="jdvakil/RoboSet_Sim"):
        RobosetExperienceReplay(ROBOSET_ID, root=tmp_path)
    folder = tmp_path / "bad"
    folder.mkdir()
    with h5py.File(folder / "x.h5", "w") as f:
        f["observations"] = np.zeros((3, 2))
    with pytest.raises(DatasetFormatError, match="no 'Trial<k>' group"):
        RobosetExperienceReplay(ROBOSET_ID, root=tmp_path, data_dir=folder)
    with h5py.File(folder / "x.h5", "w") as f:
        g = f.create_group("Trial0")
        g["observations"], g["actions"] = np.zeros((3, 2)), np.zeros((3, 1))
    with pytest.raises(DatasetFormatError, match="Trial0/rewards is missing"):
        RobosetExperienceReplay(ROBOSET_ID, root=tmp_path, data_dir=folder)


# -- Open X-Embodiment ---------------------------------------------------------------------------
def png(value: int) -> dict:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((4, 6, 3), value, np.uint8)).save(buffer, format="PNG")
    return {"bytes": buffer.getvalue(), "path": None}


def openx_episode(e: int, t: int, terminal: bool, text: str) -> bytes:
    steps = [
        {
            "observation": {"image": png(10 * e + k), "state": np.full(2, 10.0 * e + k)},
            "action": np.full(3, float(k), np.float32),
            "reward": np.float32(k == t - 1),
            "discount": np.float32(1.0),
            "is_first": k == 0,
            "is_last": k == t - 1,
            "is_terminal": terminal and k == t - 1,
            "language_instruction": text.encode(),
            "language_embedding": np.zeros(4, np.float32),
        }
        for k in range(t)
    ]
    return pickle.dumps({"steps": steps, "episode_metadata": {"file_path": f"ep{e}"}})


def write_shard(path: Path, blobs: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for i, blob in enumerate(blobs):
            info = tarfile.TarInfo(f"{i:06d}.data.pickle")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))


@pytest.fixture
def openx_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "raw" / "cmu_stretch"
    write_shard(folder / "cmu_stretch_00000.tar", [openx_episode(0, 3, True, "lift the lid")])
    write_shard(folder / "cmu_stretch_00001.tar", [openx_episode(1, 4, False, "open the door")])
    return tmp_path


def test_openx_reads_shards(openx_dir: Path) -> None:
    data = OpenXExperienceReplay("cmu_stretch", 3, root=openx_dir)
    td = data[torch.arange(7)]
    assert td["episode"].tolist() == [0, 0, 0, 1, 1, 1, 1]
    assert td["observation", "image"].shape == (7, 3, 4, 6)
    assert squeeze(td["observation", "image"]) == [0, 1, 2, 10, 11, 12, 13]
    assert squeeze(td["next", "observation", "state"]) == [1, 2, 0, 11, 12, 13, 0]
    assert squeeze(td["next", "terminated"]) == [False, False, True] + [False] * 4
    assert squeeze(td["next", "truncated"]) == [False] * 6 + [True]
    assert squeeze(td["next", "reward"]) == [0, 0, 1, 0, 0, 0, 1]
    assert td.get("language_instruction").tolist() == ["lift the lid"] * 3 + ["open the door"] * 4
    assert td["language_embedding"].shape == (7, 4)
    assert data.sample().get("language_instruction") is not None
    assert len(load_dataset("openx/cmu_stretch", root=openx_dir)) == 7


def test_openx_samplers(openx_dir: Path) -> None:
    data = OpenXExperienceReplay("cmu_stretch", 4, root=openx_dir, num_slices=2)
    ep = data.sample()["episode"].reshape(2, 2)
    assert (ep[:, 0] == ep[:, 1]).all()
    ordered = OpenXExperienceReplay("cmu_stretch", 7, root=openx_dir, shuffle=False)
    assert ordered.sample()["episode"].tolist() == [0, 0, 0, 1, 1, 1, 1]
    padded = OpenXExperienceReplay("cmu_stretch", 8, root=openx_dir, slice_len=4, pad=True)
    assert padded.sample().shape == (8,)


def test_openx_refusals(openx_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError, match="streaming"):
        OpenXExperienceReplay("cmu_stretch", root=openx_dir, streaming=True)
    with pytest.raises(ValueError, match="needs num_slices"):
        OpenXExperienceReplay("cmu_stretch", root=openx_dir, pad=0.0)
    with pytest.raises(DatasetNotFoundError, match="jxu124/OpenX-Embodiment"):
        OpenXExperienceReplay("bridge", root=tmp_path / "empty")
    tfds = tmp_path / "tfds" / "raw" / "bridge" / "0.1.0"
    tfds.mkdir(parents=True)
    (tfds / "bridge-train.tfrecord-00000-of-00001").write_bytes(b"")
    with pytest.raises(DatasetNotFoundError, match="needs TensorFlow"):
        OpenXExperienceReplay("bridge", root=tmp_path / "tfds")


def test_openx_refuses_code_in_pickles(tmp_path: Path) -> None:
    folder = tmp_path / "raw" / "toto"
    write_shard(folder / "toto_00000.tar", [pickle.dumps({"steps": [_RunsCode()]})])
    with pytest.raises(DatasetFormatError, match="refusing builtins.print"):
        OpenXExperienceReplay("toto", root=tmp_path)
    write_shard(folder / "toto_00000.tar", [pickle.dumps([1, 2])])
    with pytest.raises(DatasetFormatError, match="'steps' list"):
        OpenXExperienceReplay("toto", root=tmp_path)


def test_registry_lists_new_families() -> None:
    assert {"gen_dgrl", "openx", "roboset", "vd4rl"} <= set(list_datasets())
    assert "bigfish-1M_E" in GenDGRLExperienceReplay.available_datasets
    assert len(GenDGRLExperienceReplay.available_datasets) == 128
    assert "maze-level_40_S" in GenDGRLExperienceReplay.available_datasets
    assert VD4RL_ID in VD4RLExperienceReplay.available_datasets
    assert ROBOSET_ID in RobosetExperienceReplay.available_datasets
    assert "cmu_stretch" in OpenXExperienceReplay.available_datasets
