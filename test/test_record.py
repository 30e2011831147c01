"""Tests of the recording transforms ``PixelRenderTransform`` and ``TensorDictRecorder``
(``torchrl.record.recorder``; ``VideoRecorder``: test/trainers/test_video_recorder.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl.data import Composite, Unbounded
from torchrl.envs import EnvBase, PendulumEnv, TransformedEnv
from torchrl.envs.utils import check_env_specs
from torchrl.record import PixelRenderTransform, TensorDictRecorder
from torchrl.record import recorder as recorder_module


class Dot(EnvBase):
    """Observation = step count; ``render(td=None)`` draws it in a 2x2 frame (or as text)."""

    def __init__(self, text: bool = False) -> None:
        super().__init__()
        self.t = 0
        self.text = text
        self.observation_spec = Composite(observation=Unbounded(shape=(1,)))
        self.action_spec = Unbounded(shape=(1,))
        self.rendered_from: list[Any] = []

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        self.t = 0
        return TensorDict(observation=torch.zeros(1))

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.t += 1
        return TensorDict(
            observation=torch.full((1,), float(self.t)),
            reward=torch.zeros(1),
            done=torch.zeros(1, dtype=torch.bool),
        )

    def render(self, tensordict: TensorDictBase | None = None, scale: int = 1) -> Any:
        self.rendered_from.append(None if tensordict is None else tensordict.get("observation"))
        if self.text:
            return f"t={self.t}"
        return np.full((2, 2, 3), self.t * scale, dtype=np.uint8)

    def snapshot(self) -> np.ndarray:
        return np.full((4,), self.t, dtype=np.float32)


# ---------------------------------------------------------------------- PixelRenderTransform


def test_pixel_render_gymnasium_cartpole():
    pytest.importorskip("gymnasium")
    pytest.importorskip("pygame")
    from torchrl.envs import GymEnv

    base = GymEnv("CartPole-v1", render_mode="rgb_array")
    env = TransformedEnv(base, PixelRenderTransform(preproc=lambda f: f[::20, ::20]))
    check_env_specs(env)
    rollout = env.rollout(3)
    assert rollout["pixels"].shape == (3, 20, 30, 3)
    assert rollout["next", "pixels"].dtype == torch.uint8
    assert env.observation_spec["pixels"].shape == (20, 30, 3)
    assert rollout["next", "pixels"].float().std() > 0  # a real drawing, not a blank frame


@pytest.mark.filterwarnings("ignore:.*without specifying any render mode")
def test_pixel_render_without_rgb_array_mode_says_so():
    pytest.importorskip("gymnasium")
    from torchrl.envs import GymEnv

    with pytest.raises(RuntimeError, match="render_mode='rgb_array'"):
        TransformedEnv(GymEnv("CartPole-v1"), PixelRenderTransform()).rollout(2)


def test_pixel_render_values_keys_and_kwargs():
    env = TransformedEnv(Dot(), PixelRenderTransform(out_keys=["frame"], scale=3))
    rollout = env.rollout(3)
    assert rollout["frame"][:, 0, 0, 0].tolist() == [0, 3, 6]
    assert rollout["next", "frame"][:, 0, 0, 0].tolist() == [3, 6, 9]
    assert env.transform.out_keys == ["frame"]
    check_env_specs(env)


def test_pixel_render_other_method_and_pass_tensordict():
    base = Dot()
    env = TransformedEnv(base, PixelRenderTransform(render_method="snapshot"))
    assert env.rollout(2)["next", "pixels"].tolist() == [[1.0] * 4, [2.0] * 4]
    assert env.observation_spec["pixels"].dtype == torch.float32

    base = Dot()
    env = TransformedEnv(base, PixelRenderTransform(pass_tensordict=True))
    env.rollout(2)
    # the render method saw the env's outputs (reset, then each step)
    seen = [x.item() for x in base.rendered_from[-3:]]
    assert seen == [0.0, 1.0, 2.0]


def test_pixel_render_non_tensor_frames():
    env = TransformedEnv(Dot(text=True), PixelRenderTransform())  # inferred from a str frame
    rollout = env.rollout(2)
    assert rollout[1]["next", "pixels"] == "t=2"
    env = TransformedEnv(Dot(), PixelRenderTransform(as_non_tensor=True))
    td = env.rollout(1)[0]
    frame = td["next", "pixels"]
    assert isinstance(frame, np.ndarray) and frame[0, 0, 0] == 1
    with pytest.raises(ValueError, match="as_non_tensor=True"):
        TransformedEnv(Dot(text=True), PixelRenderTransform(as_non_tensor=False)).rollout(1)


def test_pixel_render_errors():
    transform = PixelRenderTransform()
    with pytest.raises(RuntimeError, match="append it to an env"):
        transform(TensorDict())
    with pytest.raises(AttributeError, match="no missing"):
        TransformedEnv(Dot(), PixelRenderTransform(render_method="missing")).rollout(1)
    with pytest.raises(ValueError, match="one out_key"):
        PixelRenderTransform(out_keys=["a", "b"])


# ------------------------------------------------------------------------ TensorDictRecorder


def test_tensordict_recorder_saves_every_skip_th_step(tmp_path):
    base = str(tmp_path / "run" / "td")
    recorder = TensorDictRecorder(base, skip=2, in_keys=["observation", "reward"])
    env = TransformedEnv(Dot(), recorder)
    env.rollout(6)  # outputs: reset (t=0), then steps t=1..6; kept: t=0, 2, 4, 6
    recorder.dump()
    saved = torch.load(base + "_0.pt", weights_only=False)
    # the reset output is dropped (skip_reset); the recorder sees step outputs (no "next")
    assert saved["observation"].squeeze(-1).tolist() == [2.0, 4.0, 6.0]
    assert set(saved.keys()) == {"observation", "reward"}
    assert recorder.count == 1
    recorder.dump()  # nothing new: no file
    assert not (tmp_path / "run" / "td_1.pt").exists()
    env.rollout(1)  # kept: the reset only, which is dropped
    recorder.dump()
    assert not (tmp_path / "run" / "td_1.pt").exists()
    env.rollout(2)  # kept: the reset and the second step
    recorder.dump()
    saved = torch.load(base + "_1.pt", weights_only=False)
    assert saved["observation"].squeeze(-1).tolist() == [2.0]


def test_tensordict_recorder_keeps_reset_with_lazy_stack(tmp_path):
    base = str(tmp_path / "td")
    recorder = TensorDictRecorder(base, skip_reset=False, skip=1)
    env = TransformedEnv(PendulumEnv(), recorder)
    env.rollout(3)
    recorder.dump()
    saved = torch.load(base + "_0.pt", weights_only=False)
    assert saved.batch_size == torch.Size([4])
    # the reset output has no reward: the stack is lazy (keys differ)
    assert "reward" not in saved[0].keys() and "reward" in saved[1].keys()
    assert not list(tmp_path.glob("*.tmp"))  # written under a temporary name, then renamed


def test_tensordict_recorder_as_module_and_errors(tmp_path):
    recorder = TensorDictRecorder(str(tmp_path / "m"), skip=1)
    for i in range(3):
        out = recorder(TensorDict(x=torch.tensor([float(i)])))
        assert out["x"].item() == i
    recorder.dump()
    saved = torch.load(tmp_path / "m_0.pt", weights_only=False)
    assert saved["x"].squeeze(-1).tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="skip must be >= 1"):
        TensorDictRecorder(str(tmp_path / "m"), skip=0)


def test_exported_names():
    # compared by name: a doctest run may import torchrl/record/recorder.py a second time
    assert {"PixelRenderTransform", "TensorDictRecorder"} <= set(recorder_module.__all__)
    assert PixelRenderTransform.__name__ in dir(recorder_module)
