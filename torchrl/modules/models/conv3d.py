"""A configurable stack of 3d convolutions (videos, voxel grids, stacked frames as depth)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from torchrl._types import DeviceLike
from torchrl.modules.models.utils import SquashDims, create_on_device, find_depth, per_layer

__all__ = ["Conv3dNet"]

_DEFAULT_CONV3D_CELLS = (32, 32, 32)


class Conv3dNet(nn.Module):
    """A stack of 3d convolutions, each followed by an activation, then an aggregator.

    The 3d counterpart of :class:`~torchrl.modules.ConvNet`, with the same keywords. Inputs are
    ``[*B, C, D, H, W]`` with any number of batch dimensions; the default aggregator flattens the
    last feature maps, so the output is ``[*B, features]``.

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
        >>> net = Conv3dNet(num_cells=[8, 16], kernel_sizes=3, strides=2)
        >>> net(torch.zeros(4, 5, 3, 9, 17, 17)).shape  # two batch dims
        torch.Size([4, 5, 144])
    """

    def __init__(
        self,
        in_features: int | None = None,
        depth: int | None = None,
        num_cells: Sequence[int] | int | None = None,
        kernel_sizes: Sequence[int] | int = 3,
        strides: Sequence[int] | int = 1,
        paddings: Sequence[int] | int = 0,
        activation_class: Callable[..., nn.Module] = nn.ELU,
        activation_kwargs: dict | Sequence[dict] | None = None,
        norm_class: Callable[..., nn.Module] | None = None,
        norm_kwargs: dict | Sequence[dict] | None = None,
        bias_last_layer: bool = True,
        aggregator_class: Callable[..., nn.Module] | None = SquashDims,
        aggregator_kwargs: dict | None = None,
        squeeze_output: bool = False,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        if num_cells is None:
            num_cells = list(_DEFAULT_CONV3D_CELLS)
        if depth is None and isinstance(num_cells, int):
            depth = len(_DEFAULT_CONV3D_CELLS)
        depth = find_depth(depth, num_cells, kernel_sizes, strides, paddings)
        cells = per_layer(num_cells, depth, "num_cells")
        kernels = per_layer(kernel_sizes, depth, "kernel_sizes")
        strides_ = per_layer(strides, depth, "strides")
        pads = per_layer(paddings, depth, "paddings")
        act_kwargs = per_layer(activation_kwargs or {}, depth, "activation_kwargs")
        nrm_kwargs = per_layer(norm_kwargs or {}, depth, "norm_kwargs")

        layers: list[nn.Module] = []
        for i in range(depth):
            conv_kwargs: dict[str, Any] = {
                "kernel_size": kernels[i],
                "stride": strides_[i],
                "padding": pads[i],
                "bias": i < depth - 1 or bias_last_layer,
            }
            n_in = in_features if i == 0 else cells[i - 1]
            if n_in is None:
                layers.append(create_on_device(nn.LazyConv3d, device, cells[i], **conv_kwargs))
            else:
                layers.append(create_on_device(nn.Conv3d, device, n_in, cells[i], **conv_kwargs))
            if norm_class is not None:
                layers.append(create_on_device(norm_class, device, **nrm_kwargs[i]))
            layers.append(create_on_device(activation_class, device, **act_kwargs[i]))
        if aggregator_class is not None:
            if aggregator_class is SquashDims and aggregator_kwargs is None:
                aggregator_kwargs = {"ndims_in": 4}
            layers.append(aggregator_class(**(aggregator_kwargs or {})))
        self.layers = nn.Sequential(*layers)
        self.in_features = in_features
        self.depth = depth
        self.num_cells = cells
        self.squeeze_output = squeeze_output

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        if value.ndim < 4:
            raise ValueError(
                f"Conv3dNet expects [*B, C, D, H, W] inputs, got shape {tuple(value.shape)}"
            )
        # Conv3d takes [N, C, D, H, W] or an unbatched [C, D, H, W]: fold the leading dims.
        batch = value.shape[:-4]
        out = self.layers(value.reshape(-1, *value.shape[-4:]))
        out = out.reshape(*batch, *out.shape[1:])
        if self.squeeze_output:
            while out.ndim > len(batch) and out.shape[-1] == 1:
                out = out.squeeze(-1)
        return out
