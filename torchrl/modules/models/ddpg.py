"""The actor and Q-value networks of DDPG (Lillicrap et al. 2016), from pixels and from vectors.

Each network is an :class:`MLP` (and a :class:`ConvNet` for pixels) with the paper's sizes as
defaults; every default can be overridden through the ``*_kwargs`` dicts, which update the
defaults key by key. As in the paper, the output layer starts with small uniform weights
(``+-3e-3`` for vector inputs, ``+-3e-4`` for pixels) so that the initial actions and values are
near zero.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torchrl._types import DeviceLike
from torchrl.modules.models.conv import ConvNet
from torchrl.modules.models.mlp import MLP
from torchrl.modules.models.utils import SquashDims

__all__ = ["DdpgCnnActor", "DdpgCnnQNet", "DdpgMlpActor", "DdpgMlpQNet"]

# Range of the uniform initialisation of the output layer (section 7 of the paper).
_LAST_LAYER_SCALE_VECTOR = 3e-3
_LAST_LAYER_SCALE_PIXELS = 3e-4


def _init_last_layer(mlp: MLP, scale: float) -> None:
    """Uniform ``[-scale, scale]`` weights and biases for the output layer of ``mlp``.

    A lazy output layer (an MLP of depth 0 with no input size) keeps PyTorch's initialisation:
    its weights do not exist before the first call.
    """
    last = next((m for m in reversed(list(mlp)) if isinstance(m, nn.Linear)), None)
    if last is None or isinstance(last.weight, nn.parameter.UninitializedParameter):
        return
    with torch.no_grad():
        last.weight.uniform_(-scale, scale)
        if last.bias is not None:
            last.bias.uniform_(-scale, scale)


def _with_defaults(defaults: dict[str, Any], overrides: dict | None) -> dict[str, Any]:
    out = dict(defaults)
    out.update(overrides or {})
    return out


def _conv_kwargs(num_cells: list[int], use_avg_pooling: bool) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "in_features": None,
        "num_cells": num_cells,
        "kernel_sizes": [8, 4, 3],
        "strides": [4, 2, 1],
        "paddings": [0, 0, 1],
        "activation_class": nn.ELU,
        "norm_class": None,
        "squeeze_output": True,
    }
    if use_avg_pooling:
        # One value per channel: the features no longer depend on the image size.
        kwargs.update(aggregator_class=nn.AdaptiveAvgPool2d, aggregator_kwargs={"output_size": 1})
    else:
        kwargs.update(aggregator_class=SquashDims, aggregator_kwargs={"ndims_in": 3})
    return kwargs


class DdpgCnnActor(nn.Module):
    """DDPG actor from pixels: a :class:`ConvNet` embedding, then an :class:`MLP` to the action.

    Inputs are ``[*B, C, H, W]`` images; the call returns the action ``[*B, action_dim]`` and the
    embedding ``[*B, features]`` (which a critic can reuse).

    Args:
        action_dim: size of the action.
        conv_net_kwargs: :class:`ConvNet` keywords over the defaults ``num_cells=[32, 64, 64]``,
            ``kernel_sizes=[8, 4, 3]``, ``strides=[4, 2, 1]``, ``paddings=[0, 0, 1]``, ELU,
            lazy input channels, flattened output.
        mlp_net_kwargs: :class:`MLP` keywords over the defaults ``out_features=action_dim``,
            ``depth=2``, ``num_cells=200``, ELU, lazy input size.
        use_avg_pooling: average each feature map to one value instead of flattening.
        device: device of the parameters.

    Examples:
        >>> actor = DdpgCnnActor(action_dim=4)
        >>> action, hidden = actor(torch.zeros(2, 3, 64, 64))
        >>> action.shape, hidden.shape
        (torch.Size([2, 4]), torch.Size([2, 2304]))
    """

    def __init__(
        self,
        action_dim: int,
        conv_net_kwargs: dict | None = None,
        mlp_net_kwargs: dict | None = None,
        use_avg_pooling: bool = False,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        conv_kwargs = _with_defaults(_conv_kwargs([32, 64, 64], use_avg_pooling), conv_net_kwargs)
        mlp_kwargs = _with_defaults(
            {
                "in_features": None,
                "out_features": action_dim,
                "depth": 2,
                "num_cells": 200,
                "activation_class": nn.ELU,
                "bias_last_layer": True,
            },
            mlp_net_kwargs,
        )
        self.convnet = ConvNet(device=device, **conv_kwargs)
        self.mlp = MLP(device=device, **mlp_kwargs)
        _init_last_layer(self.mlp, _LAST_LAYER_SCALE_PIXELS)

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(action, hidden)`` for ``[*B, C, H, W]`` observations."""
        hidden = self.convnet(observation)
        return self.mlp(hidden), hidden


class DdpgMlpActor(nn.Module):
    """DDPG actor from vectors: an :class:`MLP` ``[*B, obs] -> [*B, action_dim]``.

    Args:
        action_dim: size of the action.
        mlp_net_kwargs: :class:`MLP` keywords over the defaults ``out_features=action_dim``,
            ``depth=2``, ``num_cells=[400, 300]``, ELU, lazy input size.
        device: device of the parameters.

    Examples:
        >>> actor = DdpgMlpActor(action_dim=4)
        >>> actor(torch.zeros(10, 6)).shape
        torch.Size([10, 4])
    """

    def __init__(
        self,
        action_dim: int,
        mlp_net_kwargs: dict | None = None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        mlp_kwargs = _with_defaults(
            {
                "in_features": None,
                "out_features": action_dim,
                "depth": 2,
                "num_cells": [400, 300],
                "activation_class": nn.ELU,
                "bias_last_layer": True,
            },
            mlp_net_kwargs,
        )
        self.mlp = MLP(device=device, **mlp_kwargs)
        _init_last_layer(self.mlp, _LAST_LAYER_SCALE_VECTOR)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """Returns the action for ``[*B, obs]`` observations."""
        return self.mlp(observation)


class DdpgCnnQNet(nn.Module):
    """DDPG Q-network from pixels: ``Q(image, action)``, the action joining after the convolutions.

    Args:
        conv_net_kwargs: :class:`ConvNet` keywords over the defaults ``num_cells=[32, 64, 128]``,
            ``kernel_sizes=[8, 4, 3]``, ``strides=[4, 2, 1]``, ``paddings=[0, 0, 1]``, ELU,
            lazy input channels, average pooling (see ``use_avg_pooling``).
        mlp_net_kwargs: :class:`MLP` keywords over the defaults ``out_features=1``, ``depth=2``,
            ``num_cells=200``, ELU, lazy input size.
        use_avg_pooling: average each feature map to one value (default) instead of flattening.
        device: device of the parameters.

    Examples:
        >>> qnet = DdpgCnnQNet()
        >>> qnet(torch.zeros(2, 3, 64, 64), torch.zeros(2, 4)).shape
        torch.Size([2, 1])
    """

    def __init__(
        self,
        conv_net_kwargs: dict | None = None,
        mlp_net_kwargs: dict | None = None,
        use_avg_pooling: bool = True,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        conv_kwargs = _with_defaults(_conv_kwargs([32, 64, 128], use_avg_pooling), conv_net_kwargs)
        mlp_kwargs = _with_defaults(
            {
                "in_features": None,
                "out_features": 1,
                "depth": 2,
                "num_cells": 200,
                "activation_class": nn.ELU,
                "bias_last_layer": True,
            },
            mlp_net_kwargs,
        )
        self.convnet = ConvNet(device=device, **conv_kwargs)
        self.mlp = MLP(device=device, **mlp_kwargs)
        _init_last_layer(self.mlp, _LAST_LAYER_SCALE_PIXELS)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Returns ``Q`` ``[*B, 1]`` for ``[*B, C, H, W]`` images and ``[*B, action]`` actions."""
        return self.mlp(self.convnet(observation), action)


class DdpgMlpQNet(nn.Module):
    """DDPG Q-network from vectors: the observation goes through a first layer, the action joins after.

    ``Q(s, a) = mlp2(cat(mlp1(s), a))``.

    Args:
        mlp_net_kwargs_net1: keywords of the observation :class:`MLP` over the defaults
            ``out_features=400``, ``depth=0``, ELU on its output, lazy input size.
        mlp_net_kwargs_net2: keywords of the joint :class:`MLP` over the defaults
            ``out_features=1``, ``depth=1``, ``num_cells=[300]``, ELU, lazy input size.
        device: device of the parameters.

    Examples:
        >>> qnet = DdpgMlpQNet()
        >>> qnet(torch.zeros(10, 6), torch.zeros(10, 2)).shape
        torch.Size([10, 1])
    """

    def __init__(
        self,
        mlp_net_kwargs_net1: dict | None = None,
        mlp_net_kwargs_net2: dict | None = None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        kwargs1 = _with_defaults(
            {
                "in_features": None,
                "out_features": 400,
                "depth": 0,
                "num_cells": [],
                "activation_class": nn.ELU,
                "bias_last_layer": True,
                "activate_last_layer": True,
            },
            mlp_net_kwargs_net1,
        )
        kwargs2 = _with_defaults(
            {
                "in_features": None,
                "out_features": 1,
                "depth": 1,
                "num_cells": [300],
                "activation_class": nn.ELU,
                "bias_last_layer": True,
            },
            mlp_net_kwargs_net2,
        )
        self.mlp1 = MLP(device=device, **kwargs1)
        self.mlp2 = MLP(device=device, **kwargs2)
        _init_last_layer(self.mlp2, _LAST_LAYER_SCALE_VECTOR)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Returns ``Q`` ``[*B, 1]`` for ``[*B, obs]`` observations and ``[*B, action]`` actions."""
        return self.mlp2(self.mlp1(observation), action)
