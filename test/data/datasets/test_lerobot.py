"""LeRobotExperienceReplay over a small LeRobot-format folder written here with pyarrow."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import torchrl.data.datasets.lerobot as lerobot_module
from torchrl.data.datasets.common import DatasetFormatError, DatasetNotFoundError
from torchrl.data.datasets.lerobot import LeRobotExperienceReplay, lerobot_columns_to_tensordict
from torchrl.data.datasets.registry import load_dataset

# episode lengths; episode 1 ends without next.done (the recording stopped): truncated
LENGTHS = [5, 4, 6]
DONE_AT_END = [True, False, True]


def episode_table(ep: int, start_index: int) -> pa.Table:
    n = LENGTHS[ep]
    t = np.arange(n)
    state = np.stack([100 * ep + t, t * 0.5, -t], -1).astype(np.float32)
    done = np.zeros(n, bool)
    done[-1] = DONE_AT_END[ep]
    return pa.table(
        {
            "observation.state": pa.array(list(state), type=pa.list_(pa.float32(), 3)),
            "observation.environment_state": pa.array(
                list(state[:, :2] + 1), type=pa.list_(pa.float32(), 2)
            ),
            "action": pa.array(
                list(np.stack([t, -t], -1).astype(np.float32)), pa.list_(pa.float32(), 2)
            ),
            "episode_index": pa.array(np.full(n, ep, np.int64)),
            "frame_index": pa.array(t.astype(np.int64)),
            "timestamp": pa.array((t / 10).astype(np.float32)),
            "next.reward": pa.array((10 * ep + t).astype(np.float32)),
            "next.done": pa.array(done),
            "index": pa.array(start_index + t.astype(np.int64)),
            "task_index": pa.array(np.zeros(n, np.int64)),
            "language": pa.array(["push the block"] * n),
        }
    )


def write_lerobot(folder: Path, *, reverse_files: bool = False) -> Path:
    (folder / "meta").mkdir(parents=True)
    info = {
        "codebase_version": "v2.1",
        "fps": 10,
        "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        "features": {
            "observation.state": {"dtype": "float32", "shape": [3]},
            "observation.images.top": {"dtype": "video", "shape": [3, 8, 8]},
            "action": {"dtype": "float32", "shape": [2]},
        },
    }
    (folder / "meta" / "info.json").write_text(json.dumps(info))
    chunk = folder / "data" / "chunk-000"
    chunk.mkdir(parents=True)
    start = 0
    for ep in range(len(LENGTHS)):
        table = episode_table(ep, start)
        start += LENGTHS[ep]
        # file names in reverse order check that frames are sorted by (episode, frame)
        name = len(LENGTHS) - 1 - ep if reverse_files else ep
        pq.write_table(table, chunk / f"episode_{name:06d}.parquet")
    return folder


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHRL_DATASETS_ROOT", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_LEROBOT_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def test_values_and_episodes(env):
    folder = write_lerobot(env / "toy", reverse_files=True)
    with pytest.warns(UserWarning, match="language"):
        data = LeRobotExperienceReplay("lerobot/toy", batch_size=4, data_dir=folder)
    n = sum(LENGTHS)
    assert len(data) == n
    td = data[torch.arange(n)]
    expected_state = np.concatenate(
        [
            np.stack([100 * e + np.arange(k), np.arange(k) * 0.5, -np.arange(k)], -1)
            for e, k in enumerate(LENGTHS)
        ]
    )
    assert torch.equal(
        td["observation", "state"], torch.tensor(expected_state, dtype=torch.float32)
    )
    assert td["observation", "environment_state"].shape == (n, 2)
    assert td["action"].shape == (n, 2)
    assert td["episode"].tolist() == sum(([e] * k for e, k in enumerate(LENGTHS)), [])
    assert td["frame_index"].tolist() == sum((list(range(k)) for k in LENGTHS), [])
    assert td["index"].tolist() == list(range(n))
    assert "language" not in td.keys() and data.metadata["skipped_columns"] == ["language"]
    # next observation: the following frame of the episode; the last frame repeats itself
    start = 0
    for e, k in enumerate(LENGTHS):
        rows = slice(start, start + k)
        nxt = td["next", "observation", "state"][rows]
        own = td["observation", "state"][rows]
        assert torch.equal(nxt[:-1], own[1:]) and torch.equal(nxt[-1], own[-1])
        done = td["next", "done"][rows].squeeze(-1)
        assert done.tolist() == [False] * (k - 1) + [True]
        assert bool(td["next", "terminated"][start + k - 1]) == DONE_AT_END[e]
        assert bool(td["next", "truncated"][start + k - 1]) == (not DONE_AT_END[e])
        assert td["next", "reward"][rows].squeeze(-1).tolist() == [10.0 * e + t for t in range(k)]
        start += k
    assert data.sample()["observation", "state"].shape == (4, 3)
    # reopening uses the converted copy, even without the source
    import shutil

    shutil.rmtree(folder)
    assert len(LeRobotExperienceReplay("lerobot/toy")) == n


def test_found_in_hub_cache_and_lerobot_home(env, monkeypatch):
    snapshot = env / "hf" / "hub" / "datasets--lerobot--toy" / "snapshots" / "0123abc"
    write_lerobot(snapshot)
    with pytest.warns(UserWarning):
        data = load_dataset("lerobot/lerobot/toy", batch_size=2)
    assert data.metadata["source"] == str(snapshot)
    monkeypatch.setenv("HF_LEROBOT_HOME", str(env / "lr"))
    write_lerobot(env / "lr" / "me" / "demo")
    with pytest.warns(UserWarning):
        mine = LeRobotExperienceReplay("me/demo", root=env / "other")
    assert len(mine) == sum(LENGTHS)


def test_slices_and_split(env):
    folder = write_lerobot(env / "toy")
    with pytest.warns(UserWarning):
        data = LeRobotExperienceReplay("toy", data_dir=folder, batch_size=6, slice_len=3)
    batch = data.sample().reshape(2, 3)
    for row in batch:
        assert len(set(row["episode"].tolist())) == 1
        assert (row["frame_index"][1:] - row["frame_index"][:-1] == 1).all()
    split = LeRobotExperienceReplay("toy", data_dir=folder, split_trajs=True)
    assert len(split) == len(LENGTHS)


def test_columns_and_video_requests(env):
    folder = write_lerobot(env / "toy")
    data = LeRobotExperienceReplay(
        "toy", data_dir=folder, columns=["observation.state", "action", "episode_index"]
    )
    assert set(data[0].keys()) >= {"observation", "action", "episode"}
    assert "frame_index" not in data[0].keys()
    assert float(data[torch.arange(len(data))]["next", "reward"].abs().sum()) == 0.0
    with pytest.raises(NotImplementedError, match=r"observation\.images\.top.*video"):
        LeRobotExperienceReplay("toy2", data_dir=folder, columns=["observation.images.top"])
    with pytest.raises(DatasetFormatError, match="not in the parquet files"):
        LeRobotExperienceReplay("toy3", data_dir=folder, columns=["observation.velocity"])


def test_missing_and_malformed(env):
    with pytest.raises(DatasetNotFoundError) as err:
        LeRobotExperienceReplay("lerobot/nothing")
    msg = str(err.value)
    assert "lerobot/nothing" in msg and "huggingface-cli download" in msg
    assert str(env / "hf" / "lerobot" / "lerobot" / "nothing") in msg

    folder = write_lerobot(env / "bad")
    (folder / "data" / "chunk-000" / "episode_000001.parquet").write_bytes(b"PAR1 broken")
    with pytest.raises(DatasetFormatError, match="cannot read the parquet files"):
        LeRobotExperienceReplay("bad", data_dir=folder)

    no_action = env / "noaction" / "data"
    no_action.mkdir(parents=True)
    pq.write_table(episode_table(0, 0).drop(["action"]), no_action / "x.parquet")
    with pytest.raises(DatasetFormatError, match="column 'action' is missing"):
        LeRobotExperienceReplay("noaction", data_dir=env / "noaction")


def test_datasets_package_missing(env, monkeypatch):
    folder = write_lerobot(env / "toy")
    monkeypatch.setattr(lerobot_module, "_has_datasets", False)
    with pytest.raises(ImportError, match=r'pip install "torchrl\[offline\]"'):
        LeRobotExperienceReplay("toy", data_dir=folder)


def test_columns_to_tensordict():
    td = lerobot_columns_to_tensordict(
        {
            "observation.images.top.mean": np.zeros((3, 2), np.float32),
            "episode_index": [0, 0, 1],
            "next.done": np.array([False, True, True]),
            "action": torch.ones(3, 4),
        },
        key_map={"action": ("agent", "action")},
    )
    assert td["observation", "images", "top", "mean"].shape == (3, 2)
    assert td["episode"].tolist() == [0, 0, 1]
    assert td["next", "done"].dtype == torch.bool
    assert td["agent", "action"].shape == (3, 4)
    with pytest.raises(ValueError, match="same number of rows"):
        lerobot_columns_to_tensordict({"a": np.zeros(3), "b": np.zeros(4)})
    with pytest.raises(TypeError, match="column 'task'"):
        lerobot_columns_to_tensordict({"task": np.array(["a", "b"])})
    with pytest.raises(ValueError, match="different shapes"):
        lerobot_columns_to_tensordict({"s": np.array([np.zeros(2), np.zeros(3)], dtype=object)})
    with pytest.raises(ValueError, match="both map to key"):
        lerobot_columns_to_tensordict({"a.b": np.zeros(2), "c": np.zeros(2)}, key_map={"c": "a.b"})
