"""ToTensorImage, Resize, GrayScale, CenterCrop: in an env, as modules, in a replay buffer."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from envs.transforms.transform_envs import ImageEnv
from tensordict import TensorDict

from torchrl.data import Bounded
from torchrl.data.replay_buffers import LazyTensorStorage, ReplayBuffer
from torchrl.envs import check_env_specs
from torchrl.envs.transforms import (
    CenterCrop,
    Compose,
    GrayScale,
    Resize,
    StepCounter,
    ToTensorImage,
    TransformedEnv,
)

PIX = ["pixels", ("next", "pixels")]


def image_env(*transforms, batch_size=(2,)):
    env = TransformedEnv(ImageEnv(batch_size=batch_size), StepCounter(4))
    for t in transforms:
        env.append_transform(t)
    return env


class TestToTensorImage:
    def test_env(self):
        env = image_env(ToTensorImage())
        check_env_specs(env)
        spec = env.observation_spec["pixels"]
        assert isinstance(spec, Bounded) and spec.shape == (2, 3, 12, 10)
        assert spec.dtype == torch.float32
        base = ImageEnv(batch_size=[2])
        expected = base.reset()["pixels"].permute(0, 3, 1, 2).float() / 255
        assert torch.allclose(env.reset()["pixels"], expected)

    def test_module_options(self):
        img = torch.full((4, 5, 3), 51, dtype=torch.uint8)
        out = ToTensorImage(unsqueeze=True, dtype=torch.float64)(TensorDict(pixels=img))["pixels"]
        assert out.shape == (1, 3, 4, 5) and out.dtype == torch.float64
        assert torch.allclose(out, torch.full_like(out, 0.2))
        chw = torch.rand(3, 4, 6)
        out = ToTensorImage(shape_tolerant=True)(TensorDict(pixels=chw))["pixels"]
        assert torch.equal(out, chw)
        floats = torch.rand(4, 5, 3)
        out = ToTensorImage()(TensorDict(pixels=floats))["pixels"]  # floats: no division
        assert torch.equal(out, floats.permute(2, 0, 1))

    def test_errors(self):
        with pytest.raises(ValueError, match="float dtype"):
            ToTensorImage(dtype=torch.int64)
        with pytest.raises(KeyError, match="ToTensorImage.*'pixels'"):
            ToTensorImage()(TensorDict(obs=torch.zeros(1)))


class TestResize:
    def test_env(self):
        env = image_env(ToTensorImage(), Resize(6, 5))
        check_env_specs(env)
        assert env.observation_spec["pixels"].shape == (2, 3, 6, 5)
        td = env.reset()
        assert td["pixels"].shape == (2, 3, 6, 5)

    @pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic", "area"])
    def test_modes(self, mode):
        img = torch.rand(2, 3, 16, 12)
        out = Resize(8, 6, interpolation=mode)(TensorDict(pixels=img, batch_size=[2]))["pixels"]
        assert out.shape == (2, 3, 8, 6)
        if mode == "nearest":
            assert torch.equal(out, F.interpolate(img, size=(8, 6), mode="nearest"))

    def test_uint8(self):
        img = torch.randint(0, 256, (1, 3, 8, 8), dtype=torch.uint8)
        out = Resize(4)(TensorDict(pixels=img))["pixels"]
        assert out.dtype == torch.uint8 and out.shape == (1, 3, 4, 4)

    def test_uint8_env_spec(self):
        env = image_env(PermuteTransform_hwc_to_chw(), Resize(6, 6))
        check_env_specs(env)
        assert env.observation_spec["pixels"].dtype == torch.uint8

    def test_errors(self):
        with pytest.raises(ValueError, match="interpolation"):
            Resize(4, interpolation="lanczos")
        with pytest.raises(ValueError, match="positive"):
            Resize(0)


def PermuteTransform_hwc_to_chw():  # noqa: N802
    from torchrl.envs.transforms import PermuteTransform

    return PermuteTransform((-1, -3, -2), in_keys=["pixels"])


class TestGrayScaleCrop:
    def test_grayscale_env(self):
        env = image_env(ToTensorImage(), GrayScale())
        check_env_specs(env)
        assert env.observation_spec["pixels"].shape == (2, 1, 12, 10)
        img = torch.rand(3, 4, 4)
        out = GrayScale()(TensorDict(pixels=img))["pixels"]
        expected = 0.2989 * img[0] + 0.587 * img[1] + 0.114 * img[2]
        torch.testing.assert_close(out[0], expected)

    def test_grayscale_error(self):
        with pytest.raises(ValueError, match="RGB"):
            GrayScale()(TensorDict(pixels=torch.rand(2, 4, 4)))

    def test_center_crop_env(self):
        env = image_env(ToTensorImage(), CenterCrop(8, 6))
        check_env_specs(env)
        assert env.observation_spec["pixels"].shape == (2, 3, 8, 6)
        full = image_env(ToTensorImage()).reset()["pixels"]
        assert torch.equal(env.reset()["pixels"], full[..., 2:10, 2:8])

    def test_center_crop_error(self):
        with pytest.raises(ValueError, match="larger"):
            CenterCrop(20)(TensorDict(pixels=torch.rand(3, 8, 8)))


class TestReplayBuffer:
    def test_to_tensor_and_resize_on_samples(self):
        """Raw uint8 frames are stored; samples come out as the env transforms would make them."""
        env = TransformedEnv(ImageEnv(), StepCounter(4))
        data = env.rollout(4)
        rb = ReplayBuffer(
            storage=LazyTensorStorage(16),
            transform=Compose(ToTensorImage(in_keys=PIX), Resize(6, 5, in_keys=PIX)),
            batch_size=3,
        )
        rb.extend(data)
        assert rb.storage[0]["pixels"].dtype == torch.uint8  # stored raw
        sample = rb.sample()
        assert sample["pixels"].shape == (3, 3, 6, 5)
        assert sample["next", "pixels"].dtype == torch.float32
        reference = Resize(6, 5, in_keys=PIX)(ToTensorImage(in_keys=PIX)(data.clone()))
        # Every sampled frame is one of the reference frames.
        diff = sample["pixels"].unsqueeze(1) - reference["pixels"].unsqueeze(0)
        assert (diff.abs().flatten(2).amax(-1).min(1).values < 1e-6).all()
        assert sample["pixels"].min() >= 0 and sample["pixels"].max() <= 1

    def test_append_transform(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(8), batch_size=2)
        rb.append_transform(ToTensorImage(in_keys=["pixels"]))
        rb.append_transform(GrayScale(in_keys=["pixels"]))
        rb.extend(
            TensorDict(
                pixels=torch.randint(0, 256, (4, 6, 6, 3), dtype=torch.uint8), batch_size=[4]
            )
        )
        assert rb.sample()["pixels"].shape == (2, 1, 6, 6)
