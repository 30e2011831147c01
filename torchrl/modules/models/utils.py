"""Small building blocks shared by the networks: depth bookkeeping, shape adapters, layer factories."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from torchrl._types import DeviceLike


def find_depth(depth: int | None, *seqs: Any) -> int:
    """Returns the depth implied by ``depth`` and by the per-layer sequences in ``seqs``.

    Integers in ``seqs`` mean "the same for every layer" and imply nothing; sequences must agree
    with each other and with ``depth`` when it is given.
    """
    lengths = {len(s) for s in seqs if isinstance(s, Sequence) and not isinstance(s, str)}
    if len(lengths) > 1:
        raise ValueError(f"per-layer arguments have different lengths: {sorted(lengths)}")
    if lengths:
        (length,) = lengths
        if depth is not None and depth != length:
            raise ValueError(f"depth={depth} does not match per-layer arguments of length {length}")
        return length
    if depth is None:
        raise ValueError("cannot infer the depth: pass depth or a sequence of layer sizes")
    return depth


def per_layer(value: Any, depth: int, name: str) -> list[Any]:
    """Expands a scalar (or a dict of kwargs) to one value per layer; checks a sequence's length."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != depth:
            raise ValueError(f"{name} has {len(value)} entries, expected {depth}")
        return list(value)
    return [value] * depth


def create_on_device(
    module_class: Callable[..., nn.Module], device: DeviceLike, *args: Any, **kwargs: Any
) -> nn.Module:
    """Builds ``module_class(*args, **kwargs)`` on ``device``.

    Passes ``device=`` when the class accepts it (no allocation on the default device first) and
    falls back to ``.to(device)`` otherwise.

    Args:
        module_class: a module class or factory.
        device: the device of the parameters, or ``None`` for the default device.
        *args: positional arguments of the class.
        **kwargs: keyword arguments of the class.

    Returns:
        The module.

    Examples:
        >>> create_on_device(nn.Linear, "cpu", 3, 4).weight.device
        device(type='cpu')
    """
    if device is None:
        return module_class(*args, **kwargs)
    try:
        accepts_device = "device" in inspect.signature(module_class).parameters
    except (TypeError, ValueError):
        accepts_device = False
    if accepts_device:
        return module_class(*args, device=device, **kwargs)
    return module_class(*args, **kwargs).to(device)


class SquashDims(nn.Module):
    """Flattens the last ``ndims_in`` dimensions into one.

    Args:
        ndims_in: how many trailing dimensions to merge (3 for ``[C, H, W]`` feature maps).

    Examples:
        >>> SquashDims()(torch.zeros(2, 4, 3, 5, 5)).shape
        torch.Size([2, 4, 75])
    """

    def __init__(self, ndims_in: int = 3) -> None:
        super().__init__()
        self.ndims_in = ndims_in

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return value.flatten(-self.ndims_in, -1)


class Squeeze2dLayer(nn.Module):
    """Removes two trailing singleton dimensions (``[*B, C, 1, 1] -> [*B, C]``).

    Examples:
        >>> Squeeze2dLayer()(torch.zeros(4, 8, 1, 1)).shape
        torch.Size([4, 8])
    """

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        if value.shape[-2:] != (1, 1):
            raise ValueError(
                f"expected two trailing singleton dims, got shape {tuple(value.shape)}"
            )
        return value.squeeze(-1).squeeze(-1)


class ScalarBias(nn.Module):
    """Adds one learnable scalar to every element (the ``single_bias_last_layer`` option of MLP).

    Examples:
        >>> ScalarBias()(torch.zeros(2, 3)).shape
        torch.Size([2, 3])
    """

    def __init__(self, device: DeviceLike = None) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1, device=device))

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return value + self.bias


class AddStateIndependentNormalScale(nn.Module):
    """Pairs a network's output (the mean) with a learned scale that does not depend on the input.

    The usual head of Gaussian policies for continuous control with PPO: the scale is a
    parameter vector, mapped to positive values and broadcast to the mean's shape.

    Args:
        scale_shape: shape of the scale parameter, the trailing shape of the mean (e.g. the
            action dim); ``None`` for a scalar shared by every dim.
        scale_mapping: how the parameter becomes a scale: ``"exp"`` (default), ``"softplus"``,
            ``"biased_softplus_<value>"`` (``value`` at parameter 0), or any name
            ``tensordict.nn.utils.mappings`` knows.
        scale_lb: lower bound of the scale.
        init_value: initial value of the parameter (so the initial scale is
            ``mapping(init_value)``).

    Examples:
        >>> import torch
        >>> head = AddStateIndependentNormalScale(3)
        >>> loc, scale = head(torch.randn(5, 3))
        >>> scale.shape, bool((scale == 1.0).all())
        (torch.Size([5, 3]), True)
    """

    def __init__(
        self,
        scale_shape: int | Sequence[int] | torch.Size | None = None,
        scale_mapping: str = "exp",
        scale_lb: float = 1e-4,
        init_value: float = 0.0,
    ) -> None:
        from tensordict.nn.utils import mappings

        super().__init__()
        if scale_shape is None:
            shape = torch.Size()
        elif isinstance(scale_shape, int):
            shape = torch.Size([scale_shape])
        else:
            shape = torch.Size(scale_shape)
        if scale_lb < 0:
            raise ValueError(
                f"AddStateIndependentNormalScale: scale_lb must be >= 0, got {scale_lb}"
            )
        self.scale_lb = float(scale_lb)
        self.scale_mapping = scale_mapping
        self._mapping = mappings(scale_mapping)
        self.scale = nn.Parameter(torch.full(shape, float(init_value)))

    def forward(self, loc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(loc, scale)``, the scale broadcast to ``loc``'s shape.

        Args:
            loc: the mean, shape ``[*batch, *scale_shape]``.

        Returns:
            ``loc`` itself and the scale, same shape.
        """
        shape = self.scale.shape
        if shape and loc.shape[loc.dim() - len(shape) :] != shape:
            raise ValueError(
                f"AddStateIndependentNormalScale: the input's trailing shape "
                f"{tuple(loc.shape[loc.dim() - len(shape) :])} does not match scale_shape "
                f"{tuple(shape)}"
            )
        scale = self._mapping(self.scale).clamp_min(self.scale_lb)
        return loc, scale.expand_as(loc)
