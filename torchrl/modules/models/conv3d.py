"""A configurable stack of 3d convolutions (videos, voxel grids, stacked frames as depth)."""

from __future__ import annotations

from torch import nn

from torchrl.modules.models.conv import ConvNet

__all__ = ["Conv3dNet"]


class Conv3dNet(ConvNet):
    """A stack of 3d convolutions, each followed by an activation, then an aggregator.

    The 3d counterpart of :class:`~torchrl.modules.ConvNet` (a subclass with 3d layers), with
    the same keywords. Inputs are ``[*B, C, D, H, W]`` with any number of batch dimensions; the
    default aggregator flattens the last feature maps, so the output is ``[*B, features]``.

    Args:
        in_features: input channels, or ``None`` for a lazy first convolution.
        depth: number of convolutions; inferred from the per-layer sequences, else 3.
        num_cells: output channels, an int for all layers or one per layer
            (default ``[32, 32, 32]``).
        kernel_sizes: kernel size(s), one for all layers or one per layer.
        strides: stride(s), one for all layers or one per layer.
        paddings: padding(s), one for all layers or one per layer.
        activation_class: activation after each convolution.
        activation_kwargs: its kwargs (one dict or one per layer).
        norm_class: optional normalisation after each convolution (before the activation).
        norm_kwargs: its kwargs (one dict or one per layer).
        bias_last_layer: whether the last convolution has a bias.
        aggregator_class: module applied to the last feature maps (default :class:`SquashDims`
            over the 4 trailing dims ``[C, D, H, W]``).
        aggregator_kwargs: its kwargs.
        squeeze_output: squeeze trailing singleton dimensions of the output.
        device: device of the parameters.

    Examples:
        >>> import torch
        >>> net = Conv3dNet(num_cells=[8, 16], kernel_sizes=3, strides=2)
        >>> net(torch.zeros(4, 5, 3, 9, 17, 17)).shape  # two batch dims
        torch.Size([4, 5, 144])
    """

    _conv = nn.Conv3d
    _lazy_conv = nn.LazyConv3d
    _input_dims = "C, D, H, W"
