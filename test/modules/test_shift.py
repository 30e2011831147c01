"""``torchrl.modules.shift.Shift``: random-shift augmentation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchrl.modules.shift import Shift


def _reference(images: torch.Tensor, pad: int, offsets: torch.Tensor) -> torch.Tensor:
    padded = F.pad(images, (pad,) * 4, mode="replicate")
    h, w = images.shape[-2:]
    return torch.stack(
        [padded[i, :, dy : dy + h, dx : dx + w] for i, (dy, dx) in enumerate(offsets.tolist())]
    )


def test_matches_a_per_image_crop_of_the_padded_image() -> None:
    images = torch.randn(5, 3, 6, 7)
    torch.manual_seed(0)
    out = Shift(pad=2)(images)
    torch.manual_seed(0)
    offsets = torch.randint(0, 5, (5, 2))
    torch.testing.assert_close(out, _reference(images, 2, offsets))


def test_offsets_cover_the_whole_range_and_differ_per_image() -> None:
    # one bright pixel at the centre: its position after the shift reveals the offset
    images = torch.zeros(400, 1, 9, 9)
    images[:, :, 4, 4] = 1.0
    torch.manual_seed(1)
    out = Shift(pad=2)(images)
    pos = out.flatten(1).argmax(1)
    rows, cols = pos // 9, pos % 9
    assert set(rows.tolist()) == set(range(2, 7)) and set(cols.tolist()) == set(range(2, 7))


def test_batch_dims_dtype_gradient_and_identity_cases() -> None:
    images = torch.rand(2, 3, 4, 8, 8, requires_grad=True)
    shift = Shift(pad=1)
    out = shift(images)
    assert out.shape == images.shape and out.dtype == images.dtype
    out.sum().backward()
    assert images.grad is not None and images.grad.sum().item() == pytest.approx(out.numel())
    assert shift.eval()(images) is images
    assert Shift(pad=1, training_only=False).eval()(images).shape == images.shape
    assert Shift(pad=0)(images) is images
    single = torch.rand(3, 8, 8)
    assert Shift(pad=3)(single).shape == single.shape
    uint8 = torch.randint(0, 255, (2, 3, 8, 8), dtype=torch.uint8)
    assert Shift(pad=2)(uint8).dtype == torch.uint8


def test_errors() -> None:
    with pytest.raises(ValueError, match="pad must be an int >= 0"):
        Shift(pad=-1)
    with pytest.raises(ValueError, match="pad must be an int >= 0"):
        Shift(pad=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\[\*batch, C, H, W\]"):
        Shift()(torch.zeros(4, 4))
