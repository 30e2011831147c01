"""Tests of the VideoRecorder transform (through a logger, in an env and in the Recorder hook)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl.data import Composite, Unbounded
from torchrl.envs import EnvBase
from torchrl.envs.transforms import TransformedEnv
from torchrl.record import CSVLogger, VideoRecorder
from torchrl.trainers import Recorder


class PixelEnv(EnvBase):
    """Pixels ``[*B, H, W, 3]`` (uint8) whose value is the step count."""

    def __init__(self, batch_size: Any = ()) -> None:
        super().__init__(batch_size=batch_size)
        self.t = 0
        b = self.batch_size
        self.observation_spec = Composite(
            pixels=Unbounded(shape=(*b, 6, 6, 3), dtype=torch.uint8), shape=b
        )
        self.action_spec = Unbounded(shape=(*b, 1))

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _pixels(self) -> torch.Tensor:
        return torch.full((*self.batch_size, 6, 6, 3), self.t, dtype=torch.uint8)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        self.t = 0
        return TensorDict(pixels=self._pixels(), batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.t += 1
        done = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return TensorDict(
            pixels=self._pixels(),
            reward=torch.ones(*self.batch_size, 1),
            done=done,
            terminated=done.clone(),
            truncated=done.clone(),
            batch_size=self.batch_size,
        )


def test_records_env_frames(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path)
    recorder = VideoRecorder(logger, "video", skip=2)
    env = TransformedEnv(PixelEnv(), recorder)
    env.rollout(6)
    recorder.dump()
    video = torch.load(tmp_path / "exp" / "videos" / "video_0.pt")
    # reset frame + 6 steps = 7 frames, one out of 2 kept: t = 0, 2, 4, 6; channels first
    assert video.shape == (4, 3, 6, 6) and video.dtype == torch.uint8
    assert video[:, 0, 0, 0].tolist() == [0, 2, 4, 6]
    recorder.dump()  # nothing new: no second file
    assert sorted(p.name for p in (tmp_path / "exp" / "videos").iterdir()) == ["video_0.pt"]


def test_batched_grid_crop_and_float(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path)
    recorder = VideoRecorder(logger, "v", skip=1, center_crop=4, make_grid=True)
    for t in range(3):
        recorder(TensorDict(pixels=torch.full((2, 3, 8, 8), t / 10), batch_size=[2]))
    recorder.dump(suffix="x")
    video = torch.load(tmp_path / "exp" / "videos" / "v_x_0.pt")
    assert video.shape == (3, 3, 4, 8)  # two 4x4 crops side by side
    assert video[:, 0, 0, 0].tolist() == [0, 26, 51]
    plain = VideoRecorder(logger, "n", skip=1)
    plain(TensorDict(pixels=torch.zeros(2, 3, 5, 5, dtype=torch.uint8), batch_size=[2]))
    plain.dump()
    assert torch.load(tmp_path / "exp" / "videos" / "n_0.pt").shape == (2, 1, 3, 5, 5)


def test_errors(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path)
    with pytest.raises(TypeError, match="Logger"):
        VideoRecorder("csv", "v")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="skip"):
        VideoRecorder(logger, "v", skip=0)
    with pytest.raises(ValueError, match="one pixel key"):
        VideoRecorder(logger, "v", in_keys=["a", "b"])
    with pytest.raises(ValueError, match="pixels"):
        VideoRecorder(logger, "v", skip=1)(TensorDict(pixels=torch.zeros(4)))


def test_recorder_hook_dumps_videos(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path)
    env = TransformedEnv(PixelEnv(), VideoRecorder(logger, "eval", skip=1))
    rec = Recorder(record_interval=1, record_frames=4, policy_exploration=None, environment=env)
    rec(None)
    rec(None)
    names = sorted(p.name for p in (tmp_path / "exp" / "videos").iterdir())
    assert names == ["eval_0.pt", "eval_1.pt"]
    assert torch.load(tmp_path / "exp" / "videos" / "eval_1.pt").shape == (5, 3, 6, 6)
