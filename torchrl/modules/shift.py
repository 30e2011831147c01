"""``Shift``: random-shift augmentation of image observations (DrQ, TD-MPC2 pixel encoders)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Shift"]


class Shift(nn.Module):
    """Shifts each image of a batch by a random whole number of pixels (random-shift augmentation).

    Each image is padded by ``pad`` pixels on every side, repeating its border pixels, and a
    window of the original size is cut at a random offset in ``[0, 2 * pad]`` along each axis,
    drawn independently per image. This is the augmentation of DrQ and of TD-MPC2's pixel
    encoders: it makes a convolutional encoder robust to small translations. The output has
    the input's shape, dtype and device; gradients flow to the input. With
    ``training_only=True`` (default) the module is the identity in ``eval()`` mode, so acting
    and evaluation see the original images.

    Args:
        pad: the largest shift in pixels along each axis (``>= 0``; ``0`` is the identity).
        training_only: apply the shift only while the module is in training mode.

    Shapes:
        input: ``[*batch, C, H, W]`` (at least 3 dimensions); output: the same.

    Examples:
        >>> import torch
        >>> shift = Shift(pad=2)
        >>> images = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
        >>> out = shift(images)
        >>> out.shape
        torch.Size([2, 3, 8, 8])
        >>> torch.equal(shift.eval()(images), images)  # identity outside training
        True
    """

    def __init__(self, pad: int = 4, *, training_only: bool = True) -> None:
        super().__init__()
        if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
            raise ValueError(f"Shift: pad must be an int >= 0, got {pad!r}")
        self.pad = pad
        self.training_only = bool(training_only)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Returns the shifted images (the input itself when nothing is shifted)."""
        if images.dim() < 3:
            raise ValueError(
                f"Shift: expected images of shape [*batch, C, H, W] (or [C, H, W]), got shape "
                f"{tuple(images.shape)}"
            )
        if self.pad == 0 or (self.training_only and not self.training):
            return images
        *batch, c, h, w = images.shape
        flat = images.reshape(-1, c, h, w)
        # replicate padding is implemented for floating inputs only
        work = flat if flat.is_floating_point() else flat.float()
        padded = F.pad(work, (self.pad,) * 4, mode="replicate")
        n = flat.shape[0]
        offsets = torch.randint(0, 2 * self.pad + 1, (n, 2), device=images.device)
        rows = offsets[:, :1] + torch.arange(h, device=images.device)  # [n, h]
        cols = offsets[:, 1:] + torch.arange(w, device=images.device)  # [n, w]
        index = torch.arange(n, device=images.device)[:, None, None]
        # advanced indexing on dims 0, 2, 3 moves the channel dim last: [n, h, w, c]
        cropped = padded[index, :, rows[:, :, None], cols[:, None, :]]
        out = cropped.permute(0, 3, 1, 2).to(images.dtype)
        return out.reshape(*batch, c, h, w)

    def extra_repr(self) -> str:
        return f"pad={self.pad}, training_only={self.training_only}"
