"""AtariDQNExperienceReplay over a tiny DQN-replay directory written here like Dopamine does."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from torchrl.data.datasets.atari_dqn import (
    AtariDQNExperienceReplay,
    FrameStackStorage,
    read_dqn_replay_array,
)
from torchrl.data.datasets.common import DatasetFormatError, DatasetNotFoundError
from torchrl.data.datasets.registry import load_dataset

H = W = 84
STACK = 4  # the recorder's stack: 3 zero rows before every episode


def frame_of(step: int) -> np.ndarray:
    """A frame that encodes its step number (never all-zero)."""
    f = np.full((H, W), (step * 7) % 251 + 1, dtype=np.uint8)
    f[0, 0], f[0, 1] = step // 256, step % 256
    return f


def step_of(frame: torch.Tensor) -> int:
    """The step a frame encodes, or -1 for a zero frame."""
    if not frame.any():
        return -1
    return int(frame[0, 0]) * 256 + int(frame[0, 1])


class FakeDopamineBuffer:
    """Writes rows the way Dopamine's circular replay buffer does (zero padding, wrap-around)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.obs = np.zeros((capacity, H, W), np.uint8)
        self.action = np.zeros(capacity, np.int32)
        self.reward = np.zeros(capacity, np.float32)
        self.terminal = np.zeros(capacity, np.uint8)
        self.row_step = np.full(capacity, -1)
        self.add_count = 0

    def _add(self, obs, action, reward, terminal, step):
        c = self.add_count % self.capacity
        self.obs[c], self.action[c], self.reward[c], self.terminal[c] = (
            obs,
            action,
            reward,
            terminal,
        )
        self.row_step[c] = step
        self.add_count += 1

    def add(self, step, action, reward, terminal):
        last = (self.add_count - 1) % self.capacity
        if self.add_count == 0 or self.terminal[last] == 1:
            for _ in range(STACK - 1):
                self._add(np.zeros((H, W), np.uint8), 0, 0.0, 0, -1)
        self._add(frame_of(step), action, reward, terminal, step)

    def invalid_range(self):
        c = self.add_count % self.capacity
        return np.array([(c - 1 + i) % self.capacity for i in range(STACK + 1)])

    def save(self, directory: Path, ckpt: int) -> dict:
        directory.mkdir(parents=True, exist_ok=True)
        arrays = {
            "$store$_observation": self.obs,
            "$store$_action": self.action,
            "$store$_reward": self.reward,
            "$store$_terminal": self.terminal,
            "add_count": np.array(self.add_count),
            "invalid_range": self.invalid_range(),
        }
        for name, value in arrays.items():
            with gzip.open(directory / f"{name}_ckpt.{ckpt}.gz", "wb") as f:
                np.save(f, value, allow_pickle=False)
        # ground truth of what the checkpoint can give: retained steps and invalid ones
        retained = {int(s) for s in self.row_step if s >= 0}
        invalid = {int(self.row_step[r]) for r in self.invalid_range() if self.row_step[r] >= 0}
        return {"retained": retained, "invalid": invalid}


def record(directory: Path, seed: int = 0):
    """Two checkpoints: a partly filled buffer, then one that wrapped around twice."""
    rng = np.random.default_rng(seed)
    buf = FakeDopamineBuffer(capacity=150)
    truth = {}  # step -> (episode, action, reward, terminal)
    snapshots = []
    step, episode = 1, 0
    save_at = [100, 420]  # add_count after which a checkpoint is saved
    while save_at:
        length = int(rng.integers(3, 30))
        for t in range(length):
            terminal = int(t == length - 1)
            action, reward = int(rng.integers(0, 6)), float(rng.integers(-1, 2))
            buf.add(step, action, reward, terminal)
            truth[step] = (episode, action, reward, terminal)
            step += 1
            if save_at and buf.add_count >= save_at[0]:
                snapshots.append(buf.save(directory, len(snapshots)))
                save_at.pop(0)
        episode += 1
    return truth, snapshots


@pytest.fixture
def dqn_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHRL_DATASETS_ROOT", str(tmp_path / "cache"))
    source = tmp_path / "cache" / "atari_dqn" / "dqn" / "Pong" / "1" / "replay_logs"
    truth, snapshots = record(source)
    return source, truth, snapshots


def expected_steps(truth, snapshot):
    """Recorded steps whose transition is complete in the checkpoint (next frame stored)."""
    out = set()
    for s in snapshot["retained"] - snapshot["invalid"]:
        ep, _, _, terminal = truth[s]
        if terminal or (s + 1 in snapshot["retained"] and truth[s + 1][0] == ep):
            out.add(s)
    return out


def direct(truth, snap, s, last):
    """Steps of the frames last-3..last that step s's stack should show (-1: a zero frame).

    A frame shows when it belongs to s's episode and is stored in the checkpoint; the frame
    after a terminal step is never recorded.
    """
    ep, _, _, terminal = truth[s]
    out = []
    for k in range(last - 3, last + 1):
        inside = k in snap["retained"] and k in truth and truth[k][0] == ep
        out.append(k if inside and not (k > s and terminal) else -1)
    return out


def test_values_stacks_and_boundaries(dqn_dir):
    source, truth, snapshots = dqn_dir
    data = AtariDQNExperienceReplay("Pong/1", batch_size=16)
    n = len(data)
    everything = data[torch.arange(n)]
    assert everything["observation"].shape == (n, 4, H, W)
    assert everything["observation"].dtype == torch.uint8
    assert everything["next", "observation"].shape == (n, 4, H, W)

    # transitions of checkpoint 0 come first; their count tells where checkpoint 1 starts
    exp0, exp1 = (expected_steps(truth, s) for s in snapshots)
    assert n == len(exp0) + len(exp1)
    steps = [step_of(everything["observation"][i, -1]) for i in range(n)]
    assert set(steps[: len(exp0)]) == exp0 and set(steps[len(exp0) :]) == exp1
    assert steps[: len(exp0)] == sorted(exp0) and steps[len(exp0) :] == sorted(exp1)

    for i, s in enumerate(steps):
        snap = snapshots[0] if i < len(exp0) else snapshots[1]
        ep, action, reward, terminal = truth[s]
        assert int(everything["action"][i]) == action
        assert float(everything["next", "reward"][i]) == reward
        assert bool(everything["next", "terminated"][i]) == bool(terminal)

        got = [step_of(f) for f in everything["observation"][i]]
        assert got == direct(truth, snap, s, s), (i, s)
        got_next = [step_of(f) for f in everything["next", "observation"][i]]
        assert got_next == direct(truth, snap, s, s + 1), (i, s)

    # trajectory ids: contiguous runs of one recorded episode, ending with done
    episode = everything["episode"]
    done = everything["next", "done"].squeeze(-1)
    for e in episode.unique():
        idx = torch.nonzero(episode == e).squeeze(-1)
        assert idx.tolist() == list(range(int(idx[0]), int(idx[-1]) + 1))
        run = [steps[i] for i in idx.tolist()]
        assert run == list(range(run[0], run[0] + len(run)))
        assert len({truth[s][0] for s in run}) == 1
        assert bool(done[idx[-1]]) and not done[idx[:-1]].any()
        # a run ends truncated exactly when its recorded episode had no terminal there
        truncated = bool(everything["next", "truncated"][idx[-1]])
        assert truncated == (not truth[run[-1]][3])

    batch = data.sample()
    assert batch.shape == (16,) and batch["observation"].shape == (16, 4, H, W)


def test_frames_stored_once_and_reopen(dqn_dir):
    source, truth, snapshots = dqn_dir
    data = AtariDQNExperienceReplay("Pong/1", frame_stack=2)
    frames = sum(len(s["retained"]) for s in snapshots)
    assert data.metadata["frames"] == frames
    big = [p for p in data.data_path.rglob("*") if p.is_file() and p.stat().st_size > 50_000]
    assert [p.name for p in big] == ["pixels.memmap"]
    assert big[0].stat().st_size == frames * H * W
    assert data[0]["observation"].shape == (2, H, W)
    # reopening reads the converted copy only: the raw files may be gone
    shutil.rmtree(source)
    again = AtariDQNExperienceReplay("Pong/1", frame_stack=4)
    assert len(again) == len(data)
    assert again[torch.tensor([3])]["observation"].shape == (1, 4, H, W)


def test_slices_stay_in_one_episode(dqn_dir):
    data = AtariDQNExperienceReplay("Pong/1", batch_size=12, slice_len=3)
    batch = data.sample().reshape(4, 3)
    for row in batch:
        assert len(set(row["episode"].tolist())) == 1
        frames = row["frame_index"]
        assert (frames[1:] - frames[:-1] == 1).all()


def test_checkpoint_subset_and_registry(dqn_dir):
    source, truth, snapshots = dqn_dir
    data = load_dataset("atari_dqn/Pong/1", checkpoints=[0])
    assert len(data) == len(expected_steps(truth, snapshots[0]))
    with pytest.raises(ValueError, match="download='force'"):
        AtariDQNExperienceReplay("Pong/1", checkpoints=[0, 1])
    both = AtariDQNExperienceReplay("Pong/1", checkpoints=[0, 1], download="force")
    assert both.metadata["checkpoints"] == [0, 1]


def test_missing_directory(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        AtariDQNExperienceReplay("Breakout/2", root=tmp_path)
    msg = str(err.value)
    assert "Breakout/2" in msg and "gs://atari-replay-datasets/dqn/Breakout/2" in msg
    assert str(tmp_path / "dqn" / "Breakout" / "2" / "replay_logs") in msg
    assert "$store$_observation_ckpt.N.gz" in msg


def test_truncated_and_corrupt_files(dqn_dir, tmp_path):
    source, _, _ = dqn_dir
    obs = source / "$store$_observation_ckpt.1.gz"
    raw = obs.read_bytes()
    obs.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DatasetFormatError, match=r"observation_ckpt\.1\.gz.*'observation'"):
        AtariDQNExperienceReplay("Pong/1", data_dir=source, root=tmp_path / "a")
    obs.write_bytes(b"not a gzip stream at all")
    with pytest.raises(DatasetFormatError, match="observation"):
        AtariDQNExperienceReplay("Pong/1", data_dir=source, root=tmp_path / "b")
    # nothing half-written was left behind
    assert not any((tmp_path / "a").rglob("*.complete"))


def test_wrong_shape_and_missing_key(dqn_dir, tmp_path):
    source, _, _ = dqn_dir
    with gzip.open(source / "$store$_reward_ckpt.0.gz", "wb") as f:
        np.save(f, np.zeros(7, np.float32))
    with pytest.raises(DatasetFormatError, match=r"reward_ckpt\.0\.gz: key 'reward' must have"):
        AtariDQNExperienceReplay("Pong/1", data_dir=source, root=tmp_path / "a")
    (source / "add_count_ckpt.1.gz").unlink()
    with pytest.raises(DatasetFormatError, match=r"add_count_ckpt\.1\.gz: missing file"):
        AtariDQNExperienceReplay("Pong/1", data_dir=source, root=tmp_path / "b", checkpoints=[1])


def test_read_array_and_storage_errors(tmp_path):
    path = tmp_path / "x_ckpt.0.gz"
    with gzip.open(path, "wb") as f:
        np.save(f, np.arange(5, dtype=np.int32))
    assert read_dqn_replay_array(path).tolist() == [0, 1, 2, 3, 4]
    from tensordict import TensorDict

    steps = TensorDict({"frame_index": torch.tensor([0])}, [1])
    with pytest.raises(ValueError, match="frame_stack"):
        FrameStackStorage(
            steps, torch.zeros(2, 1, 1), torch.zeros(2, dtype=torch.long), frame_stack=0
        )
    with pytest.raises(ValueError, match="segment must have shape"):
        FrameStackStorage(steps, torch.zeros(2, 1, 1), torch.zeros(3, dtype=torch.long))
    storage = FrameStackStorage(steps, torch.zeros(2, 1, 1), torch.zeros(2, dtype=torch.long))
    with pytest.raises(RuntimeError, match="read-only"):
        storage.set(0, steps[0])
