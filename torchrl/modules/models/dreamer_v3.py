"""DreamerV3 networks: normalised SiLU MLPs, block GRU, image encoder/decoder, discrete RSSM.

Reference: Hafner et al., "Mastering Diverse Domains through World Models" (2023),
https://arxiv.org/abs/2301.04104.

The stochastic state is ``num_categoricals`` one-hot vectors of ``num_classes`` classes, sampled
with straight-through gradients from categoricals mixed with 1% uniform ("unimix") and stored
flattened under ``"state"`` (``[*B, num_categoricals * num_classes]``); the belief (GRU state) is
stored under ``"belief"``. Standard wiring, used by :class:`RSSMRolloutV3`: the prior reads
``"state"``, ``"belief"``, ``"action"`` and writes ``("next", "prior_logits")``, ``"_"`` and
``("next", "belief")``; the posterior reads ``("next", "belief")``, ``("next",
"encoded_latents")`` and writes ``("next", "posterior_logits")`` and ``("next", "state")``.
Logits are ``[*B, num_categoricals, num_classes]`` and raw (unmixed): the mixing is applied when
sampling and again in :func:`~torchrl.modules.models.dreamer_v3_functional.categorical_kl_terms`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import distributions as D
from torch import nn

from torchrl._keys import IS_INIT
from torchrl._types import DeviceLike, NestedKey
from torchrl.modules._spec_utils import module_keys
from torchrl.modules.models.dreamer_v3_functional import (
    straight_through_sample,
    symexp,
    symlog,
    two_hot_cross_entropy,
    two_hot_decode,
    two_hot_encode,
)
from torchrl.modules.models.model_based import RSSMRollout

__all__ = [
    "DreamerV3BlockGRU",
    "DreamerV3BlockGRUCell",
    "DreamerV3ImageDecoder",
    "DreamerV3ImageEncoder",
    "DreamerV3MLP",
    "RSSMPosteriorV3",
    "RSSMPriorV3",
    "RSSMRolloutV3",
    "RSSMStateEstimatorV3",
    "SymExpTwoHot",
    "SymExpTwoHotDistribution",
]

NormKind = Literal["layer", "rms"]


def _make_norm(kind: NormKind, size: int, eps: float, device: DeviceLike) -> nn.Module:
    if kind == "layer":
        return nn.LayerNorm(size, eps=eps, device=device)
    if kind == "rms":
        return nn.RMSNorm(size, eps=eps, device=device)
    raise ValueError(f"norm must be 'layer' or 'rms', got {kind!r}")


class DreamerV3MLP(nn.Module):
    """DreamerV3's MLP: ``depth`` blocks of Linear (no bias), normalisation and SiLU, then a head.

    Several inputs are concatenated along the last dimension. The output layer's initial weights
    are scaled by ``outscale`` (0 starts a reward or value head at exactly zero, as DreamerV3
    does). With ``out_features=None`` the last hidden activation is returned.

    Args:
        in_features: input size (after concatenation); ``None`` makes the first layer lazy.
        out_features: output size, or ``None`` for no output layer.
        depth: number of hidden blocks. Defaults to 3.
        num_cells: hidden width. Defaults to 1024.
        outscale: initial scale of the output weights. Defaults to 1.0.
        norm_eps: normalisation epsilon. Defaults to 1e-4.
        device: device of the parameters.
        norm: ``"layer"`` (LayerNorm, as in the paper) or ``"rms"`` (RMSNorm).

    Examples:
        >>> module = DreamerV3MLP(6, 4, depth=2, num_cells=8)
        >>> module(torch.randn(3, 2), torch.randn(3, 4)).shape
        torch.Size([3, 4])
        >>> DreamerV3MLP(6, 1, depth=1, num_cells=8, outscale=0.0)(torch.randn(3, 6)).abs().max().item()
        0.0
    """

    def __init__(
        self,
        in_features: int | None,
        out_features: int | None,
        depth: int = 3,
        num_cells: int = 1024,
        outscale: float = 1.0,
        norm_eps: float = 1e-4,
        device: DeviceLike = None,
        *,
        norm: NormKind = "layer",
    ) -> None:
        super().__init__()
        if depth < 0:
            raise ValueError(f"depth must be >= 0, got {depth}")
        layers: list[nn.Module] = []
        n_in = in_features
        for _ in range(depth):
            if n_in is None:
                layers.append(nn.LazyLinear(num_cells, bias=False, device=device))
            else:
                layers.append(nn.Linear(n_in, num_cells, bias=False, device=device))
            layers += [_make_norm(norm, num_cells, norm_eps, device), nn.SiLU()]
            n_in = num_cells
        self.hidden = nn.Sequential(*layers)
        self.out: nn.Module | None = None
        if out_features is not None:
            if n_in is None:
                self.out = nn.LazyLinear(out_features, device=device)
                if outscale != 1.0:
                    raise ValueError("outscale needs a known input size (in_features or depth > 0)")
            else:
                out = nn.Linear(n_in, out_features, device=device)
                with torch.no_grad():
                    out.weight.mul_(outscale)
                    out.bias.zero_()
                self.out = out
        self.in_features = in_features
        self.out_features = out_features if out_features is not None else n_in

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Maps ``[*B, F_i]`` inputs (concatenated) to ``[*B, out_features]``."""
        x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, dim=-1)
        x = self.hidden(x)
        return x if self.out is None else self.out(x)


class _BlockLinear(nn.Module):
    """``num_blocks`` independent linear maps applied to the blocks of the last dim."""

    def __init__(
        self, in_per_block: int, out_per_block: int, num_blocks: int, bias: bool, device: DeviceLike
    ) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_per_block)
        weight = torch.empty(num_blocks, in_per_block, out_per_block, device=device)
        self.weight = nn.Parameter(weight.uniform_(-bound, bound))
        self.bias = (
            nn.Parameter(torch.zeros(num_blocks, out_per_block, device=device)) if bias else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [N, num_blocks, in_per_block] -> [N, num_blocks, out_per_block]
        out = torch.einsum("ngi,gio->ngo", x, self.weight)
        return out if self.bias is None else out + self.bias


class DreamerV3BlockGRUCell(nn.Module):
    """One step of DreamerV3's block-diagonal GRU.

    The input is projected to ``projection_size`` features (Linear, norm, activation). The
    hidden state is split into ``num_blocks`` blocks; each block sees its own slice of the
    hidden state plus the shared projected input, passes ``num_layers`` block-linear layers
    (norm, activation) and emits its reset, candidate and update gates. Blocks never mix, which
    makes a wide belief cheap. The update is::

        r = sigmoid(g_r); c = tanh(r * g_c); u = sigmoid(g_u + update_bias)
        h' = u * c + (1 - u) * h

    The negative ``update_bias`` makes the cell keep its state at initialisation.

    Args:
        input_size: input features.
        hidden_size: hidden state size, a multiple of ``num_blocks``.
        projection_size: width of the input projection. Defaults to 512.
        num_blocks: number of independent blocks. Defaults to 8.
        num_layers: block-linear hidden layers before the gates. Defaults to 1.
        activation_class: elementwise activation. Defaults to ``nn.SiLU``.
        norm_eps: normalisation epsilon. Defaults to 1e-4.
        update_bias: offset of the update-gate logit. Defaults to -1.0.
        device: device of the parameters.
        norm: ``"layer"`` or ``"rms"`` normalisation.

    Examples:
        >>> cell = DreamerV3BlockGRUCell(6, 8, projection_size=4, num_blocks=2)
        >>> cell(torch.randn(3, 6), torch.zeros(3, 8)).shape
        torch.Size([3, 8])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        projection_size: int = 512,
        num_blocks: int = 8,
        num_layers: int = 1,
        activation_class: Callable[[], nn.Module] = nn.SiLU,
        norm_eps: float = 1e-4,
        update_bias: float = -1.0,
        device: DeviceLike = None,
        norm: NormKind = "layer",
    ) -> None:
        super().__init__()
        if hidden_size % num_blocks:
            raise ValueError(
                f"hidden_size={hidden_size} must be a multiple of num_blocks={num_blocks}"
            )
        if num_layers < 0:
            raise ValueError(f"num_layers must be >= 0, got {num_layers}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_blocks = num_blocks
        self.update_bias = update_bias
        block = hidden_size // num_blocks
        self.block_size = block
        self.input_projection = nn.Sequential(
            nn.Linear(input_size, projection_size, bias=False, device=device),
            _make_norm(norm, projection_size, norm_eps, device),
            activation_class(),
        )
        layers: list[nn.Module] = []
        n_in = block + projection_size
        for _ in range(num_layers):
            layers += [
                _BlockLinear(n_in, block, num_blocks, bias=False, device=device),
                _make_norm(norm, block, norm_eps, device),
                activation_class(),
            ]
            n_in = block
        self.block_layers = nn.Sequential(*layers)
        self.gates = _BlockLinear(n_in, 3 * block, num_blocks, bias=True, device=device)

    def forward(self, input: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Next hidden state ``[*B, hidden_size]`` from ``[*B, input_size]`` and ``[*B, hidden_size]``."""
        if hidden.shape[-1] != self.hidden_size:
            raise ValueError(
                f"hidden has {hidden.shape[-1]} features, expected hidden_size={self.hidden_size}"
            )
        batch = hidden.shape[:-1]
        h = hidden.reshape(-1, self.num_blocks, self.block_size)
        x = self.input_projection(input).reshape(h.shape[0], 1, -1)
        z = torch.cat([h, x.expand(-1, self.num_blocks, -1)], dim=-1)
        gates = self.gates(self.block_layers(z))
        reset, cand, update = gates.chunk(3, dim=-1)
        reset = torch.sigmoid(reset)
        cand = torch.tanh(reset * cand)
        update = torch.sigmoid(update + self.update_bias)
        new = update * cand + (1 - update) * h
        return new.reshape(*batch, self.hidden_size)


class DreamerV3BlockGRU(nn.Module):
    """A :class:`DreamerV3BlockGRUCell` run over a batch-major sequence ``[B, T, input_size]``.

    Where ``is_init[b, t]`` is ``True`` the carried state is zeroed before step ``t`` (episode
    starts inside a sequence). Autograd runs through the Python loop over time.

    Args:
        input_size: input features.
        hidden_size: hidden state size, a multiple of ``num_blocks``.
        projection_size: width of the input projection. Defaults to 512.
        num_blocks: number of independent blocks. Defaults to 8.
        num_layers: block-linear hidden layers before the gates. Defaults to 1.
        activation_class: elementwise activation. Defaults to ``nn.SiLU``.
        norm_eps: normalisation epsilon. Defaults to 1e-4.
        update_bias: offset of the update-gate logit. Defaults to -1.0.
        device: device of the parameters.
        norm: ``"layer"`` or ``"rms"`` normalisation.

    Examples:
        >>> gru = DreamerV3BlockGRU(6, 8, projection_size=4, num_blocks=2)
        >>> out, last = gru(torch.randn(3, 5, 6))
        >>> out.shape, last.shape
        (torch.Size([3, 5, 8]), torch.Size([3, 8]))
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        projection_size: int = 512,
        num_blocks: int = 8,
        num_layers: int = 1,
        activation_class: Callable[[], nn.Module] = nn.SiLU,
        norm_eps: float = 1e-4,
        update_bias: float = -1.0,
        device: DeviceLike = None,
        norm: NormKind = "layer",
    ) -> None:
        super().__init__()
        self.cell = DreamerV3BlockGRUCell(
            input_size,
            hidden_size,
            projection_size=projection_size,
            num_blocks=num_blocks,
            num_layers=num_layers,
            activation_class=activation_class,
            norm_eps=norm_eps,
            update_bias=update_bias,
            device=device,
            norm=norm,
        )

    def forward(
        self,
        input: torch.Tensor,
        hidden: torch.Tensor | None = None,
        is_init: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Runs the cell over time.

        Args:
            input: ``[B, T, input_size]``.
            hidden: initial state ``[B, hidden_size]``; zeros if ``None``.
            is_init: boolean ``[B, T]`` (or ``[B, T, 1]``) episode-start flags.

        Returns:
            ``(outputs [B, T, hidden_size], last_hidden [B, hidden_size])``.
        """
        if input.ndim != 3:
            raise ValueError(f"input must be [B, T, input_size], got {tuple(input.shape)}")
        batch, steps = input.shape[:2]
        if hidden is None:
            hidden = input.new_zeros(batch, self.cell.hidden_size)
        if is_init is not None and is_init.ndim == 3:
            is_init = is_init.squeeze(-1)
        outputs = []
        for t in range(steps):
            if is_init is not None:
                hidden = torch.where(is_init[:, t, None], torch.zeros_like(hidden), hidden)
            hidden = self.cell(input[:, t], hidden)
            outputs.append(hidden)
        return torch.stack(outputs, 1), hidden


class _ChannelNorm(nn.Module):
    """Normalises the channels of each pixel of a ``[N, C, H, W]`` map."""

    def __init__(self, kind: NormKind, channels: int, eps: float, device: DeviceLike) -> None:
        super().__init__()
        self.norm = _make_norm(kind, channels, eps, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def _check_kernel(kernel_size: int) -> None:
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be a positive odd int, got {kernel_size}")


class DreamerV3ImageEncoder(nn.Module):
    """DreamerV3's image encoder: stride-2 convolutions, each followed by channel norm and SiLU.

    Stage ``i`` halves the resolution and outputs ``depth * mults[i]`` channels. Images are
    ``uint8`` in ``[0, 255]`` or floats in ``[0, 1]``; both are mapped to ``[-0.5, 0.5]``.

    Args:
        in_channels: image channels. Defaults to 3.
        depth: base channel count. Defaults to 64.
        mults: channel multiplier of each stage. Defaults to ``(2, 3, 4, 4)``.
        kernel_size: odd kernel size. Defaults to 5.
        norm_eps: normalisation epsilon. Defaults to 1e-4.
        device: device of the parameters.
        norm: ``"layer"`` or ``"rms"`` channel normalisation.

    Examples:
        >>> encoder = DreamerV3ImageEncoder(depth=8, mults=(1, 2))
        >>> image = torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8)
        >>> encoder(image).shape, encoder.output_features((3, 16, 16))
        (torch.Size([4, 256]), 256)
    """

    def __init__(
        self,
        in_channels: int = 3,
        depth: int = 64,
        mults: Sequence[int] = (2, 3, 4, 4),
        kernel_size: int = 5,
        norm_eps: float = 1e-4,
        device: DeviceLike = None,
        *,
        norm: NormKind = "layer",
    ) -> None:
        super().__init__()
        _check_kernel(kernel_size)
        self.in_channels = in_channels
        self.channels = [depth * m for m in mults]
        layers: list[nn.Module] = []
        n_in = in_channels
        for width in self.channels:
            layers += [
                nn.Conv2d(
                    n_in, width, kernel_size, stride=2, padding=kernel_size // 2, device=device
                ),
                _ChannelNorm(norm, width, norm_eps, device),
                nn.SiLU(),
            ]
            n_in = width
        self.net = nn.Sequential(*layers)

    def output_features(self, image_shape: Sequence[int]) -> int:
        """Size of the flat embedding for ``(C, H, W)`` images."""
        _, height, width = image_shape
        for _ in self.channels:
            height, width = (height + 1) // 2, (width + 1) // 2
        return self.channels[-1] * height * width

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        """Embeds ``[*B, C, H, W]`` images into ``[*B, output_features]``."""
        if image.ndim < 3 or image.shape[-3] != self.in_channels:
            raise ValueError(
                f"image must be [*B, {self.in_channels}, H, W], got shape {tuple(image.shape)}"
            )
        x = image.float() / 255.0 if image.dtype == torch.uint8 else image
        batch = x.shape[:-3]
        out = self.net(x.reshape(-1, *x.shape[-3:]) - 0.5)
        return out.reshape(*batch, -1)


class DreamerV3ImageDecoder(nn.Module):
    """DreamerV3's image decoder: a block-linear projection then stride-2 transposed convolutions.

    The latent is projected to the smallest feature map (``depth * mults[-1]`` channels at
    ``H / 2 ** len(mults)``); each stage doubles the resolution with channel norm and SiLU, the
    last one outputs the image channels (no norm) plus 0.5, matching targets scaled to
    ``[0, 1]``. Predictions are unbounded.

    Args:
        in_features: latent size (e.g. state plus belief), a multiple of ``num_blocks``.
        image_shape: ``(C, H, W)``, ``H`` and ``W`` divisible by ``2 ** len(mults)``.
        depth: base channel count. Defaults to 64.
        mults: stage multipliers, mirrored from the encoder. Defaults to ``(2, 3, 4, 4)``.
        kernel_size: odd kernel size. Defaults to 5.
        num_blocks: blocks of the input projection. Defaults to 8.
        norm_eps: normalisation epsilon. Defaults to 1e-4.
        device: device of the parameters.
        norm: ``"layer"`` or ``"rms"`` channel normalisation.

    Examples:
        >>> dec = DreamerV3ImageDecoder(12, image_shape=(3, 16, 16), depth=8, mults=(1, 2), num_blocks=2)
        >>> dec(torch.randn(4, 12)).shape
        torch.Size([4, 3, 16, 16])
    """

    def __init__(
        self,
        in_features: int,
        image_shape: Sequence[int] = (3, 64, 64),
        depth: int = 64,
        mults: Sequence[int] = (2, 3, 4, 4),
        kernel_size: int = 5,
        num_blocks: int = 8,
        norm_eps: float = 1e-4,
        device: DeviceLike = None,
        *,
        norm: NormKind = "layer",
    ) -> None:
        super().__init__()
        _check_kernel(kernel_size)
        channels, height, width = image_shape
        factor = 2 ** len(mults)
        if height % factor or width % factor:
            raise ValueError(
                f"image_shape {tuple(image_shape)}: H and W must be divisible by 2 ** len(mults) "
                f"= {factor}"
            )
        self.image_shape = tuple(image_shape)
        self.start = (depth * mults[-1], height // factor, width // factor)
        proj_out = math.prod(self.start)
        if in_features % num_blocks or proj_out % num_blocks:
            raise ValueError(
                f"in_features={in_features} and the first map size {proj_out} must be multiples "
                f"of num_blocks={num_blocks}"
            )
        self.num_blocks = num_blocks
        self.proj = _BlockLinear(
            in_features // num_blocks, proj_out // num_blocks, num_blocks, True, device
        )
        widths = [depth * m for m in reversed(mults)][1:] + [channels]
        layers: list[nn.Module] = []
        n_in = self.start[0]
        for i, width_out in enumerate(widths):
            layers.append(
                nn.ConvTranspose2d(
                    n_in,
                    width_out,
                    kernel_size,
                    stride=2,
                    padding=kernel_size // 2,
                    output_padding=1,
                    device=device,
                )
            )
            if i < len(widths) - 1:
                layers += [_ChannelNorm(norm, width_out, norm_eps, device), nn.SiLU()]
            n_in = width_out
        self.net = nn.Sequential(*layers)

    def forward(self, *latents: torch.Tensor) -> torch.Tensor:
        """Decodes ``[*B, in_features]`` (inputs concatenated) into ``[*B, C, H, W]`` images."""
        x = latents[0] if len(latents) == 1 else torch.cat(latents, dim=-1)
        batch = x.shape[:-1]
        x = x.reshape(-1, self.num_blocks, x.shape[-1] // self.num_blocks)
        x = self.proj(x).reshape(-1, *self.start)
        out = self.net(x) + 0.5
        return out.reshape(*batch, *self.image_shape)


def _action_dim(
    action_spec: Any, action_shape: Sequence[int] | None, action_dim: int | None
) -> int | None:
    if action_spec is not None and action_shape is not None:
        raise ValueError("pass action_spec or action_shape, not both")
    if action_dim is not None:
        return action_dim
    shape = action_shape if action_shape is not None else getattr(action_spec, "shape", None)
    if shape is not None and len(shape):
        return int(shape[-1])
    return None


class RSSMPriorV3(nn.Module):
    """DreamerV3's sequence model and dynamics predictor (the prior), with discrete latents.

    ``h_t = GRU(h_{t-1}, [z_{t-1}, a_{t-1}])`` then ``z_t ~ Cat(MLP(h_t))``: the MLP gives
    ``[*B, num_categoricals, num_classes]`` logits, and ``z_t`` is a straight-through one-hot
    sample from their unimix mixture, flattened to ``[*B, num_categoricals * num_classes]``.

    Args:
        action_spec: the action spec; only its last dimension is read. Excludes ``action_shape``.
        hidden_dim: width of the input projection and of the prior MLP. Defaults to 512.
        rnn_hidden_dim: belief size. Defaults to 512.
        num_categoricals: number of categorical latents. Defaults to 32.
        num_classes: classes per latent. Defaults to 32.
        action_dim: action size (overrides the spec); lazy input when unknown (``"gru"`` only).
        device: device of the parameters.
        action_shape: the action shape, instead of ``action_spec``.
        recurrent_model: ``"gru"`` (``nn.GRUCell``) or ``"block_gru"`` (:class:`DreamerV3BlockGRUCell`).
        num_blocks: blocks of the block GRU. Defaults to 8.
        num_layers: block-linear layers of the block GRU. Defaults to 1.
        prior_num_layers: hidden layers of the prior MLP. Defaults to 2.
        norm_eps: normalisation epsilon. Defaults to 1e-4.
        unimix: uniform fraction mixed in before sampling. Defaults to 0.01.
        norm: ``"layer"`` or ``"rms"`` normalisation.

    Examples:
        >>> prior = RSSMPriorV3(None, 16, 8, 4, 5, action_dim=2)
        >>> logits, state, belief = prior(torch.zeros(3, 20), torch.zeros(3, 8), torch.zeros(3, 2))
        >>> logits.shape, state.shape, belief.shape
        (torch.Size([3, 4, 5]), torch.Size([3, 20]), torch.Size([3, 8]))
    """

    def __init__(
        self,
        action_spec: Any = None,
        hidden_dim: int = 512,
        rnn_hidden_dim: int = 512,
        num_categoricals: int = 32,
        num_classes: int = 32,
        action_dim: int | None = None,
        device: DeviceLike = None,
        *,
        action_shape: Sequence[int] | None = None,
        recurrent_model: Literal["gru", "block_gru"] = "gru",
        num_blocks: int = 8,
        num_layers: int = 1,
        prior_num_layers: int = 2,
        norm_eps: float = 1e-4,
        unimix: float = 0.01,
        norm: NormKind = "layer",
    ) -> None:
        super().__init__()
        act_dim = _action_dim(action_spec, action_shape, action_dim)
        self.num_categoricals = num_categoricals
        self.num_classes = num_classes
        self.state_dim = num_categoricals * num_classes
        self.rnn_hidden_dim = rnn_hidden_dim
        self.unimix = unimix
        self.recurrent_model = recurrent_model
        in_size = None if act_dim is None else self.state_dim + act_dim
        self.rnn: nn.Module
        self.input_projection: DreamerV3MLP | None = None
        if recurrent_model == "gru":
            self.input_projection = DreamerV3MLP(
                in_size,
                None,
                depth=1,
                num_cells=hidden_dim,
                norm_eps=norm_eps,
                device=device,
                norm=norm,
            )
            self.rnn = nn.GRUCell(hidden_dim, rnn_hidden_dim, device=device)
        elif recurrent_model == "block_gru":
            if in_size is None:
                raise ValueError("recurrent_model='block_gru' needs the action size (action_dim)")
            self.rnn = DreamerV3BlockGRUCell(
                in_size,
                rnn_hidden_dim,
                projection_size=hidden_dim,
                num_blocks=num_blocks,
                num_layers=num_layers,
                norm_eps=norm_eps,
                device=device,
                norm=norm,
            )
        else:
            raise ValueError(
                f"recurrent_model must be 'gru' or 'block_gru', got {recurrent_model!r}"
            )
        self.prior_head = DreamerV3MLP(
            rnn_hidden_dim,
            self.state_dim,
            depth=prior_num_layers,
            num_cells=hidden_dim,
            norm_eps=norm_eps,
            device=device,
            norm=norm,
        )

    def advance(
        self, state: torch.Tensor, belief: torch.Tensor, action: torch.Tensor
    ) -> torch.Tensor:
        """The next belief ``[*B, rnn_hidden_dim]`` alone (no prior distribution)."""
        x = torch.cat([state, action], dim=-1)
        batch = belief.shape[:-1]
        flat_belief = belief.reshape(-1, belief.shape[-1])
        flat_x = x.reshape(flat_belief.shape[0], -1)
        if self.input_projection is not None:
            flat_x = self.input_projection(flat_x)
        return self.rnn(flat_x, flat_belief).reshape(*batch, -1)

    def forward(
        self, state: torch.Tensor, belief: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One prior step.

        Args:
            state: previous flat one-hot state ``[*B, num_categoricals * num_classes]``.
            belief: previous belief ``[*B, rnn_hidden_dim]``.
            action: previous action ``[*B, action_dim]``.

        Returns:
            ``(prior_logits [*B, num_categoricals, num_classes], prior_state, next_belief)``.
        """
        next_belief = self.advance(state, belief, action)
        logits = self.prior_head(next_belief).unflatten(
            -1, (self.num_categoricals, self.num_classes)
        )
        sample = straight_through_sample(logits, self.unimix).flatten(-2)
        return logits, sample, next_belief


class RSSMPosteriorV3(nn.Module):
    """DreamerV3's representation model (the posterior): ``z_t ~ Cat(MLP([h_t, e_t]))``.

    Args:
        hidden_dim: hidden width of the MLP. Defaults to 512.
        num_categoricals: number of categorical latents. Defaults to 32.
        num_classes: classes per latent. Defaults to 32.
        rnn_hidden_dim: belief size; with ``obs_embed_dim`` makes the first layer non-lazy.
        obs_embed_dim: embedding size; with ``rnn_hidden_dim`` makes the first layer non-lazy.
        device: device of the parameters.
        use_rms_norm: RMSNorm instead of LayerNorm.
        num_layers: hidden layers of the MLP. Defaults to 1.
        norm_eps: normalisation epsilon. Defaults to 1e-4.
        unimix: uniform fraction mixed in before sampling. Defaults to 0.01.

    Examples:
        >>> post = RSSMPosteriorV3(16, 4, 5, rnn_hidden_dim=8, obs_embed_dim=6)
        >>> logits, state = post(torch.zeros(3, 8), torch.zeros(3, 6))
        >>> logits.shape, state.shape
        (torch.Size([3, 4, 5]), torch.Size([3, 20]))
    """

    def __init__(
        self,
        hidden_dim: int = 512,
        num_categoricals: int = 32,
        num_classes: int = 32,
        rnn_hidden_dim: int | None = None,
        obs_embed_dim: int | None = None,
        device: DeviceLike = None,
        *,
        use_rms_norm: bool = False,
        num_layers: int = 1,
        norm_eps: float = 1e-4,
        unimix: float = 0.01,
    ) -> None:
        super().__init__()
        in_features = None
        if rnn_hidden_dim is not None and obs_embed_dim is not None:
            in_features = rnn_hidden_dim + obs_embed_dim
        self.num_categoricals = num_categoricals
        self.num_classes = num_classes
        self.unimix = unimix
        self.net = DreamerV3MLP(
            in_features,
            num_categoricals * num_classes,
            depth=num_layers,
            num_cells=hidden_dim,
            norm_eps=norm_eps,
            device=device,
            norm="rms" if use_rms_norm else "layer",
        )

    def forward(
        self, belief: torch.Tensor, obs_embedding: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(posterior_logits [*B, num_categoricals, num_classes], posterior_state [*B, num_categoricals * num_classes])``."""
        logits = self.net(belief, obs_embedding).unflatten(
            -1, (self.num_categoricals, self.num_classes)
        )
        return logits, straight_through_sample(logits, self.unimix).flatten(-2)


class RSSMRolloutV3(RSSMRollout):
    """Runs the DreamerV3 prior and posterior over a ``[*B, T]`` sequence.

    As :class:`~torchrl.modules.models.model_based.RSSMRollout`, with episode starts handled by
    default: where ``"is_init"`` is ``True`` the state, belief and action are zeroed before the
    prior runs, so one sequence may span several episodes.

    Args:
        rssm_prior: a TensorDictModule around :class:`RSSMPriorV3`.
        rssm_posterior: a TensorDictModule around :class:`RSSMPosteriorV3`.
        reset_key: boolean episode-start entry, or ``None``. Defaults to ``"is_init"``.
        action_key: the action entry zeroed on reset; defaults to the prior input that is not
            ``"state"`` or ``"belief"``.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> prior = TensorDictModule(
        ...     RSSMPriorV3(None, 16, 8, 4, 5, action_dim=2),
        ...     in_keys=["state", "belief", "action"],
        ...     out_keys=[("next", "prior_logits"), "_", ("next", "belief")],
        ... )
        >>> posterior = TensorDictModule(
        ...     RSSMPosteriorV3(16, 4, 5, rnn_hidden_dim=8, obs_embed_dim=6),
        ...     in_keys=[("next", "belief"), ("next", "encoded_latents")],
        ...     out_keys=[("next", "posterior_logits"), ("next", "state")],
        ... )
        >>> td = TensorDict(
        ...     {"state": torch.zeros(2, 7, 20), "belief": torch.zeros(2, 7, 8),
        ...      "action": torch.zeros(2, 7, 2), "is_init": torch.zeros(2, 7, 1, dtype=torch.bool),
        ...      ("next", "encoded_latents"): torch.zeros(2, 7, 6)},
        ...     batch_size=[2, 7],
        ... )
        >>> RSSMRolloutV3(prior, posterior)(td)["next", "posterior_logits"].shape
        torch.Size([2, 7, 4, 5])
    """

    def __init__(
        self,
        rssm_prior: TensorDictModuleBase,
        rssm_posterior: TensorDictModuleBase,
        reset_key: NestedKey | None = IS_INIT,
        action_key: NestedKey | None = None,
    ) -> None:
        super().__init__(rssm_prior, rssm_posterior, reset_key=reset_key, action_key=action_key)


class RSSMStateEstimatorV3(TensorDictModuleBase):
    """Updates the acting state from an encoded observation (the posterior path of the RSSM).

    For acting in a real env: from the previous state, belief and action, and the current
    encoded observation, it advances the belief with the prior's recurrent model (the prior
    distribution itself is not evaluated) and samples the posterior state. Where the reset flag
    is ``True`` the previous state, belief and action are zeroed first, per stream. Place it
    between an observation encoder and the actor in a ``TensorDictSequential``.

    Args:
        prior: the trained :class:`RSSMPriorV3`, shared with the world model.
        posterior: the trained :class:`RSSMPosteriorV3`.
        in_keys: previous state, previous belief, previous action, encoded observation and reset
            flag, in this order. Defaults to ``["state", "belief", "previous_action",
            "encoded_latents", "is_init"]``.
        out_keys: the new state and belief. Defaults to ``["state", "belief"]``.

    Examples:
        >>> from tensordict import TensorDict
        >>> est = RSSMStateEstimatorV3(
        ...     RSSMPriorV3(None, 16, 8, 4, 5, action_dim=2),
        ...     RSSMPosteriorV3(16, 4, 5, rnn_hidden_dim=8, obs_embed_dim=6),
        ... )
        >>> td = TensorDict(state=torch.zeros(3, 20), belief=torch.zeros(3, 8),
        ...     previous_action=torch.zeros(3, 2), encoded_latents=torch.zeros(3, 6),
        ...     is_init=torch.ones(3, 1, dtype=torch.bool), batch_size=[3])
        >>> est(td)["state"].sum(-1).tolist()  # one class per categorical
        [4.0, 4.0, 4.0]
    """

    def __init__(
        self,
        prior: RSSMPriorV3,
        posterior: RSSMPosteriorV3,
        *,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__()
        if in_keys is None:
            in_keys = ["state", "belief", "previous_action", "encoded_latents", IS_INIT]
        if out_keys is None:
            out_keys = ["state", "belief"]
        if len(in_keys) != 5:
            raise ValueError(
                "in_keys must be 5 keys (state, belief, previous action, encoded observation, "
                f"reset flag), got {list(in_keys)}"
            )
        if len(out_keys) != 2:
            raise ValueError(f"out_keys must be 2 keys (state, belief), got {list(out_keys)}")
        self.prior = prior
        self.posterior = posterior
        self.in_keys = module_keys(in_keys)
        self.out_keys = module_keys(out_keys)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the posterior state and the new belief; see the class docstring."""
        missing = [k for k in self.in_keys if k not in tensordict.keys(include_nested=True)]
        if missing:
            raise KeyError(
                f"RSSMStateEstimatorV3: missing entries {missing}; the recurrent state must be "
                "primed (e.g. zeros with is_init=True on reset), it is never created implicitly"
            )
        state, belief, action, embedding, reset = (tensordict.get(k) for k in self.in_keys)
        if reset.ndim == state.ndim - 1:
            reset = reset.unsqueeze(-1)
        reset = reset.bool()
        state = torch.where(reset, torch.zeros_like(state), state)
        belief = torch.where(reset, torch.zeros_like(belief), belief)
        action = torch.where(reset, torch.zeros_like(action), action.to(state.dtype))
        belief = self.prior.advance(state, belief, action)
        _, state = self.posterior(belief, embedding)
        tensordict.set(self.out_keys[0], state.float())
        tensordict.set(self.out_keys[1], belief.float())
        return tensordict


class SymExpTwoHotDistribution(D.Distribution):
    """A deterministic scalar prediction read from two-hot logits (DreamerV3 reward and value).

    ``mean`` (and ``mode``) is the decoded scalar and ``log_prob(value)`` the negative two-hot
    cross-entropy, so maximising the log-likelihood trains the logits. Values carry a trailing
    singleton dim: ``logits [*B, num_bins] -> mean [*B, 1]``, ``log_prob([*B, 1]) -> [*B]``.
    Sampling is not defined.

    Args:
        logits: ``[*B, num_bins]`` logits.
        transform: the :class:`SymExpTwoHot` whose bins and space are used.

    Examples:
        >>> dist = SymExpTwoHot(num_bins=11).get_dist(torch.zeros(2, 11))
        >>> dist.mean.shape, dist.log_prob(torch.zeros(2, 1)).shape
        (torch.Size([2, 1]), torch.Size([2]))
    """

    arg_constraints: dict = {}

    def __init__(self, logits: torch.Tensor, transform: SymExpTwoHot) -> None:
        self.logits = logits
        self.transform = transform
        super().__init__(
            batch_shape=logits.shape[:-1], event_shape=torch.Size([1]), validate_args=False
        )

    @property
    def mean(self) -> torch.Tensor:
        return self.transform(self.logits)

    @property
    def mode(self) -> torch.Tensor:
        return self.mean

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mean

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return -self.transform.loss(self.logits, value)

    def entropy(self) -> torch.Tensor:
        log_p = self.logits.log_softmax(-1)
        return -(log_p.exp() * log_p).sum(-1)


class SymExpTwoHot(nn.Module):
    """DreamerV3's categorical representation of scalars (rewards, values) on symlog-spaced bins.

    The bins are ``num_bins`` points evenly spaced from ``low`` to ``high`` in symlog space. With
    ``space="symlog"`` (the paper's formulation) targets are two-hot encoded as ``symlog(y)``
    and predictions decode as ``symexp(E[bin])``. With ``space="raw"`` the support is
    ``symexp(bins)`` and both encoding and expectation happen in raw value space.

    Args:
        num_bins: number of bins. Defaults to 255.
        low: lowest bin in symlog space. Defaults to -20.
        high: highest bin in symlog space. Defaults to 20.
        space: ``"symlog"`` or ``"raw"``.

    Examples:
        >>> two_hot = SymExpTwoHot(num_bins=5)
        >>> target = torch.tensor([-10.0, 0.0, 10.0])
        >>> torch.allclose(two_hot.decode(two_hot.encode(target).log()), target, atol=1e-3)
        True
    """

    def __init__(
        self,
        num_bins: int = 255,
        *,
        low: float = -20.0,
        high: float = 20.0,
        space: Literal["symlog", "raw"] = "symlog",
    ) -> None:
        super().__init__()
        if num_bins < 2:
            raise ValueError(f"num_bins must be >= 2, got {num_bins}")
        if not low < high:
            raise ValueError(f"low ({low}) must be below high ({high})")
        if space not in ("symlog", "raw"):
            raise ValueError(f"space must be 'symlog' or 'raw', got {space!r}")
        self.num_bins = num_bins
        self.space = space
        bins = torch.linspace(low, high, num_bins)
        self.register_buffer("bins", bins if space == "symlog" else symexp(bins))

    def _to_space(self, target: torch.Tensor) -> torch.Tensor:
        return symlog(target) if self.space == "symlog" else target

    def encode(self, target: torch.Tensor) -> torch.Tensor:
        """Two-hot targets ``[..., num_bins]`` for raw scalars ``[...]``."""
        return two_hot_encode(self._to_space(target), cast(torch.Tensor, self.bins))

    def decode(self, logits: torch.Tensor) -> torch.Tensor:
        """Raw scalars ``[...]`` from logits ``[..., num_bins]``."""
        expected = two_hot_decode(logits, cast(torch.Tensor, self.bins))
        return symexp(expected) if self.space == "symlog" else expected

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """Decoded scalars with a trailing singleton dim, ``[..., 1]``."""
        return self.decode(logits).unsqueeze(-1)

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Unreduced two-hot cross-entropy ``[...]`` against raw targets ``[...]`` or ``[..., 1]``."""
        return two_hot_cross_entropy(logits, self._to_space(target), cast(torch.Tensor, self.bins))

    def get_dist(self, logits: torch.Tensor) -> SymExpTwoHotDistribution:
        """The :class:`SymExpTwoHotDistribution` of ``logits``."""
        return SymExpTwoHotDistribution(logits, self)
