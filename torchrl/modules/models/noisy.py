"""Linear layers with learned factorised Gaussian noise (NoisyNets, Fortunato et al. 2017)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

from torchrl._types import DeviceLike


def _signed_sqrt(value: torch.Tensor) -> torch.Tensor:
    # f(x) = sign(x) sqrt(|x|): the noise transform of factorised NoisyNets.
    return value.sign() * value.abs().sqrt()


class NoisyLinear(nn.Module):
    """A linear layer whose weights carry learned, factorised Gaussian noise.

    In training mode the weight is ``mu + sigma * eps`` with ``eps = f(e_out) f(e_in)^T`` (rank
    one, ``f(x) = sign(x) sqrt(|x|)``); in eval mode it is ``mu``. The noise changes only when
    :meth:`reset_noise` is called, typically once per optimisation step or per collected batch.

    Args:
        in_features: input size.
        out_features: output size.
        bias: whether the layer has a (noisy) bias.
        device: device of the parameters.
        dtype: dtype of the parameters.
        std_init: initial noise scale; sigma starts at ``std_init / sqrt(in_features)``.

    Examples:
        >>> layer = NoisyLinear(3, 2)
        >>> x = torch.ones(3)
        >>> torch.equal(layer(x), layer(x))  # same noise until reset_noise()
        True
        >>> layer.reset_noise()
        >>> _ = layer.eval(); torch.equal(layer(x), nn.functional.linear(x, layer.weight_mu, layer.bias_mu))
        True
    """

    weight_mu: nn.Parameter
    weight_sigma: nn.Parameter
    weight_epsilon: torch.Tensor
    bias_mu: nn.Parameter | None
    bias_sigma: nn.Parameter | None
    bias_epsilon: torch.Tensor | None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: DeviceLike = None,
        dtype: torch.dtype | None = None,
        std_init: float = 0.1,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.std_init = std_init
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features, **factory))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features, **factory))
        self.register_buffer("weight_epsilon", torch.empty(out_features, in_features, **factory))
        if bias:
            self.bias_mu = nn.Parameter(torch.empty(out_features, **factory))
            self.bias_sigma = nn.Parameter(torch.empty(out_features, **factory))
            self.register_buffer("bias_epsilon", torch.empty(out_features, **factory))
        else:
            self.bias_mu = None
            self.bias_sigma = None
            self.bias_epsilon = None
        self.reset_parameters()
        self.reset_noise()

    def reset_parameters(self) -> None:
        """Initialises mu uniformly in ``±1/sqrt(in)`` and sigma to ``std_init/sqrt(in)``."""
        bound = 1.0 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight_mu.uniform_(-bound, bound)
            self.weight_sigma.fill_(self.std_init * bound)
            if self.bias_mu is not None and self.bias_sigma is not None:
                self.bias_mu.uniform_(-bound, bound)
                self.bias_sigma.fill_(self.std_init * bound)

    @torch.no_grad()
    def reset_noise(self) -> None:
        """Draws a new factorised noise sample."""
        eps_in = _signed_sqrt(torch.randn(self.in_features, device=self.weight_mu.device))
        eps_out = _signed_sqrt(torch.randn(self.out_features, device=self.weight_mu.device))
        self.weight_epsilon.copy_(torch.outer(eps_out, eps_in))
        if self.bias_epsilon is not None:
            self.bias_epsilon.copy_(eps_out)

    @property
    def weight(self) -> torch.Tensor:
        """The weight used by the forward pass: noisy in training mode, ``weight_mu`` in eval."""
        if self.training:
            return self.weight_mu + self.weight_sigma * self.weight_epsilon
        return self.weight_mu

    @property
    def bias(self) -> torch.Tensor | None:
        """The bias used by the forward pass (noisy in training mode), or ``None``."""
        if self.bias_mu is None or self.bias_sigma is None or self.bias_epsilon is None:
            return None
        if self.training:
            return self.bias_mu + self.bias_sigma * self.bias_epsilon
        return self.bias_mu

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(value, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias_mu is not None}, std_init={self.std_init}"
        )


class NoisyLazyLinear(LazyModuleMixin, NoisyLinear):
    """A :class:`NoisyLinear` whose input size is read from the first input.

    Args:
        out_features: output size.
        bias: whether the layer has a (noisy) bias.
        device: device of the parameters.
        dtype: dtype of the parameters.
        std_init: initial noise scale (see :class:`NoisyLinear`).

    Examples:
        >>> layer = NoisyLazyLinear(2)
        >>> layer(torch.zeros(5, 7)).shape
        torch.Size([5, 2])
        >>> layer.weight_mu.shape
        torch.Size([2, 7])
    """

    cls_to_become = NoisyLinear

    def __init__(
        self,
        out_features: int,
        bias: bool = True,
        device: DeviceLike = None,
        dtype: torch.dtype | None = None,
        std_init: float = 0.1,
    ) -> None:
        # LazyModuleMixin.__init__ registers the hooks that materialise the parameters on the
        # first call; NoisyLinear.__init__ with in_features=0 allocates nothing (the overrides
        # below skip initialisation while in_features is 0).
        super().__init__(0, out_features, bias, device, dtype, std_init)
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        # Placeholders that LazyModuleMixin materialises in initialize_parameters.
        self.weight_mu = UninitializedParameter(**factory)  # type: ignore[assignment]
        self.weight_sigma = UninitializedParameter(**factory)  # type: ignore[assignment]
        self.weight_epsilon = UninitializedBuffer(**factory)
        if bias:
            self.bias_mu = UninitializedParameter(**factory)  # type: ignore[assignment]
            self.bias_sigma = UninitializedParameter(**factory)  # type: ignore[assignment]
            self.bias_epsilon = UninitializedBuffer(**factory)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def reset_noise(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_noise()

    def initialize_parameters(self, value: torch.Tensor) -> None:  # type: ignore[override]
        if not self.has_uninitialized_params():
            return
        with torch.no_grad():
            self.in_features = value.shape[-1]
            shape = (self.out_features, self.in_features)
            lazy: list[Any] = [self.weight_mu, self.weight_sigma, self.weight_epsilon]
            for placeholder in lazy:
                placeholder.materialize(shape)
            if self.bias_mu is not None:
                lazy = [self.bias_mu, self.bias_sigma, self.bias_epsilon]
                for placeholder in lazy:
                    placeholder.materialize((self.out_features,))
            self.reset_parameters()
            self.reset_noise()


def reset_noise(module: nn.Module) -> None:
    """Calls ``reset_noise()`` on every submodule of ``module`` that has it (NoisyLinear layers).

    Args:
        module: any module, e.g. an MLP built with ``layer_class=NoisyLinear``.

    Examples:
        >>> net = nn.Sequential(NoisyLinear(3, 3), nn.ReLU(), NoisyLinear(3, 1))
        >>> before = net[0].weight_epsilon.clone()
        >>> reset_noise(net)
        >>> bool((before != net[0].weight_epsilon).any())
        True
    """
    for sub in module.modules():
        if isinstance(sub, NoisyLinear):
            sub.reset_noise()
