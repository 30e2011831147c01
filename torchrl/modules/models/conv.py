"""Convolutional networks: a configurable ConvNet and the dueling DQN architecture."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from torchrl._types import DeviceLike
from torchrl.modules.models.mlp import MLP
from torchrl.modules.models.utils import (
    SquashDims,
    create_on_device,
    find_depth,
    per_layer,
)

_DEFAULT_CONV_CELLS = (32, 32, 32)


class ConvNet(nn.Module):
    """A stack of 2d convolutions, each followed by an activation, then an aggregator.

    Inputs are ``[*B, C, H, W]`` with any number of batch dimensions. The default aggregator
    (:class:`SquashDims`) flattens the feature maps, so the output is ``[*B, features]``.

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
        norm_class: optional normalisation after each convolution (before activation).
        norm_kwargs: its kwargs (one dict or one per layer).
        bias_last_layer: whether the last convolution has a bias.
        aggregator_class: module applied to the last feature map (``SquashDims`` by default).
        aggregator_kwargs: its kwargs.
        squeeze_output: squeeze trailing singleton dimensions of the output.
        device: device of the parameters.

    Examples:
        >>> net = ConvNet(num_cells=[8, 16], kernel_sizes=3, strides=2)
        >>> net(torch.zeros(4, 5, 3, 32, 32)).shape  # two batch dims
        torch.Size([4, 5, 784])
    """

    # The convolution of each layer and the spatial dims it reads (Conv3dNet changes them).
    _conv: type[nn.Module] = nn.Conv2d
    _lazy_conv: type[nn.Module] = nn.LazyConv2d
    _input_dims = "C, H, W"

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
            num_cells = list(_DEFAULT_CONV_CELLS)
        if depth is None and isinstance(num_cells, int):
            depth = len(_DEFAULT_CONV_CELLS)
        depth = find_depth(depth, num_cells, kernel_sizes, strides, paddings)
        cells = per_layer(num_cells, depth, "num_cells")
        kernels = per_layer(kernel_sizes, depth, "kernel_sizes")
        strides_ = per_layer(strides, depth, "strides")
        pads = per_layer(paddings, depth, "paddings")
        act_kwargs = per_layer(activation_kwargs or {}, depth, "activation_kwargs")
        nrm_kwargs = per_layer(norm_kwargs or {}, depth, "norm_kwargs")

        layers: list[nn.Module] = []
        for i in range(depth):
            bias = i < depth - 1 or bias_last_layer
            conv_kwargs: dict[str, Any] = {
                "kernel_size": kernels[i],
                "stride": strides_[i],
                "padding": pads[i],
                "bias": bias,
            }
            n_in = in_features if i == 0 else cells[i - 1]
            if n_in is None:
                layers.append(create_on_device(self._lazy_conv, device, cells[i], **conv_kwargs))
            else:
                layers.append(create_on_device(self._conv, device, n_in, cells[i], **conv_kwargs))
            if norm_class is not None:
                layers.append(create_on_device(norm_class, device, **nrm_kwargs[i]))
            layers.append(create_on_device(activation_class, device, **act_kwargs[i]))
        if aggregator_class is not None:
            if aggregator_class is SquashDims and aggregator_kwargs is None:
                aggregator_kwargs = {"ndims_in": self._n_input_dims}
            layers.append(aggregator_class(**(aggregator_kwargs or {})))
        self.layers = nn.Sequential(*layers)
        self.in_features = in_features
        self.depth = depth
        self.num_cells = cells
        self.squeeze_output = squeeze_output

    @property
    def _n_input_dims(self) -> int:
        return len(self._input_dims.split(","))

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        n = self._n_input_dims
        if value.ndim < n:
            raise ValueError(
                f"{type(self).__name__} expects [*B, {self._input_dims}] inputs, got shape "
                f"{tuple(value.shape)}"
            )
        batch = value.shape[:-n]
        # A convolution takes exactly one batch dim: fold the leading dims, unfold them after.
        out = self.layers(value.reshape(-1, *value.shape[-n:]))
        out = out.reshape(*batch, *out.shape[1:])
        if self.squeeze_output:
            while out.ndim > len(batch) and out.shape[-1] == 1:
                out = out.squeeze(-1)
        return out


class DuelingCnnDQNet(nn.Module):
    """Dueling DQN network (Wang et al. 2016): a ConvNet trunk with value and advantage heads.

    ``Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)``.

    Args:
        out_features: number of actions.
        out_features_value: size of the value head (1).
        cnn_kwargs: kwargs of the :class:`ConvNet` trunk; defaults to the Nature-DQN trunk
            (``num_cells=[32, 64, 64]``, ``kernel_sizes=[8, 4, 3]``, ``strides=[4, 2, 1]``).
        mlp_kwargs: kwargs of the two :class:`MLP` heads (default: one hidden layer of 512, ELU).
        device: device of the parameters.

    Examples:
        >>> net = DuelingCnnDQNet(out_features=6)
        >>> net(torch.zeros(2, 4, 84, 84)).shape
        torch.Size([2, 6])
    """

    def __init__(
        self,
        out_features: int,
        out_features_value: int = 1,
        cnn_kwargs: dict | None = None,
        mlp_kwargs: dict | None = None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        cnn_defaults: dict[str, Any] = {
            "num_cells": [32, 64, 64],
            "kernel_sizes": [8, 4, 3],
            "strides": [4, 2, 1],
        }
        cnn_defaults.update(cnn_kwargs or {})
        mlp_defaults: dict[str, Any] = {
            "depth": 1,
            "num_cells": 512,
            "activation_class": nn.ELU,
        }
        mlp_defaults.update(mlp_kwargs or {})
        self.features = ConvNet(device=device, **cnn_defaults)
        self.advantage = MLP(out_features=out_features, device=device, **mlp_defaults)
        self.value = MLP(out_features=out_features_value, device=device, **mlp_defaults)

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        features = self.features(value)
        advantage = self.advantage(features)
        return self.value(features) + advantage - advantage.mean(-1, keepdim=True)
