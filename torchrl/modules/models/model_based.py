"""Dreamer (v1/v2) world-model networks: observation encoder/decoder, Gaussian RSSM, actor.

The recurrent state-space model (RSSM, Hafner et al. 2019, https://arxiv.org/abs/1811.04551)
splits the latent into a deterministic *belief* ``h_t`` (a GRU state) and a stochastic *state*
``s_t`` (a diagonal Gaussian sample). The prior predicts ``s_t`` from ``h_t`` alone; the posterior
also sees the encoded observation. :class:`RSSMRollout` runs both over a ``[*B, T]`` sequence.

Default keys (as TorchRL's Dreamer uses them): the prior reads ``"state"``, ``"belief"``,
``"action"`` and writes ``("next", "prior_mean")``, ``("next", "prior_std")``, ``"_"`` (its own
sample, unused in filtering) and ``("next", "belief")``; the posterior reads ``("next",
"belief")`` and ``("next", "encoded_latents")`` and writes ``("next", "posterior_mean")``,
``("next", "posterior_std")`` and ``("next", "state")``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn
from torch.nn import functional as F

from torchrl._keys import NEXT
from torchrl._types import DeviceLike, NestedKey
from torchrl.modules._spec_utils import module_keys
from torchrl.modules.models.mlp import MLP, no_global_hooks, plain_call

__all__ = [
    "DreamerActor",
    "ObsDecoder",
    "ObsEncoder",
    "RSSMPosterior",
    "RSSMPrior",
    "RSSMRollout",
    "WorldModel",
]


def _resolve_channels(channels: int, depth: int | None) -> int:
    # ``depth`` is the paper-era name of ``channels``; both may be given only if they agree.
    if depth is None:
        return channels
    if channels not in (32, depth):
        raise ValueError(f"depth={depth} and channels={channels} disagree: pass only channels")
    return depth


def _flatten_batch(x: torch.Tensor, event_dims: int) -> tuple[torch.Tensor, torch.Size]:
    """Merges the leading batch dims into one: ``[*B, *E] -> [prod(B), *E]``."""
    batch = x.shape[: x.ndim - event_dims]
    return x.reshape(-1, *x.shape[x.ndim - event_dims :]), batch


def _plain_layers(net: nn.Module, kinds: tuple[type, ...]) -> list[nn.Module] | None:
    """The layers of ``net`` when each is exactly one of ``kinds`` with a plain call, else None.

    The fast conv paths below call these layers' functions in another memory layout (and the
    ELUs in place); a hook, a subclass or an instance ``forward`` keeps the module calls.
    """
    if not no_global_hooks():
        return None
    layers = list(net.children())
    if all(type(layer) in kinds and plain_call(layer) for layer in layers):
        return layers
    return None


def _elu_inplace(x: torch.Tensor, layer: nn.Module) -> torch.Tensor:
    # In place on a fresh conv output: a convolution saves its input, not its output, for the
    # backward, and ELU's backward reads its result, so no saved tensor is overwritten. It
    # saves one activation-sized allocation (and its page faults) per layer.
    return F.elu_(x, cast(nn.ELU, layer).alpha)


# Images per chunk of the conv stacks: the largest activation of a chunk stays under this many
# bytes. glibc serves blocks below its mmap threshold (at most 32 MiB) from its heap and reuses
# them on the next call, while larger blocks are mapped fresh and page-faulted on every call; on
# a 64x64 Dreamer batch of 2500 images that was a third of the update's CPU time (system time).
_CHUNK_BYTES = 16 * 2**20


def _images_per_chunk(x: torch.Tensor, largest_per_image: int) -> int:
    if x.device.type != "cpu":  # an accelerator wants the whole batch in each kernel
        return max(1, x.shape[0])
    return max(1, _CHUNK_BYTES // max(1, largest_per_image * x.element_size()))


def _in_chunks(
    x: torch.Tensor, largest_per_image: int, fn: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """``fn`` over chunks of ``x``'s images (see ``_CHUNK_BYTES``), concatenated."""
    outs = [fn(chunk) for chunk in x.split(_images_per_chunk(x, largest_per_image))]
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def _pair(value: Any) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def _conv_stack_largest(layers: Sequence[nn.Module], channels: int, size: tuple[int, int]) -> int:
    """The most elements per image among the outputs of a stack of (transposed) convolutions."""
    height, width = size
    largest = channels * height * width
    for layer in layers:
        if isinstance(layer, nn.ConvTranspose2d):
            k, st, p = layer.kernel_size, layer.stride, _pair(layer.padding)
            d, op = layer.dilation, layer.output_padding
            height = (height - 1) * st[0] - 2 * p[0] + d[0] * (k[0] - 1) + op[0] + 1
            width = (width - 1) * st[1] - 2 * p[1] + d[1] * (k[1] - 1) + op[1] + 1
        elif isinstance(layer, nn.Conv2d):
            k, st, d = layer.kernel_size, layer.stride, layer.dilation
            if not isinstance(layer.padding, str):  # "same"/"valid": the size is a bound
                p = _pair(layer.padding)
                height = (height + 2 * p[0] - d[0] * (k[0] - 1) - 1) // st[0] + 1
                width = (width + 2 * p[1] - d[1] * (k[1] - 1) - 1) // st[1] + 1
        else:
            continue
        largest = max(largest, layer.out_channels * height * width)
    return largest


def _transposed_conv_geometry(layer: nn.ConvTranspose2d) -> bool:
    """Whether ``layer`` is a plain strided transposed conv (no padding, dilation or groups)."""
    return (
        layer.padding == (0, 0)
        and layer.output_padding == (0, 0)
        and layer.dilation == (1, 1)
        and layer.groups == 1
        and layer.padding_mode == "zeros"
    )


def _transposed_conv_of_a_point(layer: nn.ConvTranspose2d, x: torch.Tensor) -> torch.Tensor:
    """A transposed conv of ``[N, C_in]`` (a ``1x1`` map) as one matrix product.

    On a single input pixel every output pixel ``(i, j)`` of channel ``c`` is
    ``sum_k x[k] * W[k, c, i, j] + b[c]``: a linear map with the weight seen as
    ``[C_in, C_out * kh * kw]``. One GEMM is ~5x faster (forward and backward) than oneDNN's
    transposed convolution on this shape on a CPU, with the same sums.
    """
    weight = layer.weight
    c_in, c_out, kh, kw = weight.shape
    flat_weight = weight.reshape(c_in, c_out * kh * kw)
    if layer.bias is None:
        out = x.mm(flat_weight)
    else:
        out = torch.addmm(layer.bias.repeat_interleave(kh * kw), x, flat_weight)
    return out.view(x.shape[0], c_out, kh, kw)


def _transposed_conv_as_subpixel_conv(layer: nn.ConvTranspose2d, x: torch.Tensor) -> torch.Tensor:
    """A stride-``s`` transposed conv as a stride-1 conv with ``s * s`` times the outputs.

    Output pixel ``(s*m + a, s*n + b)`` only meets the kernel taps of parity ``(a, b)``, so
    each of the ``s * s`` phases is an ordinary convolution with a ``ceil(k / s)`` sub-kernel
    (flipped) over the input padded by ``ceil(k / s) - 1``; all phases are one conv with
    ``s * s * C_out`` channels and ``pixel_shuffle`` interleaves them, cropped to the
    transposed conv's size. The sums are the same; oneDNN runs it ~1.5x faster (forward and
    backward) than the transposed conv when ``C_out`` is small (an image's 3 channels). The
    input stays in its layout: a channels-last copy here made the previous layer's backward
    slower than it saved.
    """
    s = layer.stride[0]
    c_in, c_out, kh, kw = layer.weight.shape
    jh, jw = -(-kh // s), -(-kw // s)
    weight = F.pad(layer.weight, (0, s * jw - kw, 0, s * jh - kh))
    # [c_in, c_out, t, a, u, b] -> [c_out, a, b, c_in, t, u], taps reversed (conv vs its transpose)
    weight = weight.reshape(c_in, c_out, jh, s, jw, s).flip(2, 4)
    weight = weight.permute(1, 3, 5, 0, 2, 4).reshape(c_out * s * s, c_in, jh, jw)
    bias = None if layer.bias is None else layer.bias.repeat_interleave(s * s)
    out = F.pixel_shuffle(F.conv2d(x, weight, bias, padding=(jh - 1, jw - 1)), s)
    height = (x.shape[-2] - 1) * s + kh
    width = (x.shape[-1] - 1) * s + kw
    return out[..., :height, :width].contiguous()


class ObsEncoder(nn.Module):
    """Encodes an observation into a flat embedding: a conv stack for pixels, an MLP for states.

    Pixels ``[*B, C, H, W]`` pass through ``num_layers`` stride-2 convolutions with kernel 4 and
    ELU activations, doubling the channels each layer (``channels``, ``2 * channels``, ...), and
    are flattened: a ``64x64`` image gives ``[*B, 8 * channels * 2 * 2]`` (1024 by default). With
    ``obs_dim`` the encoder is instead an MLP over a flat state ``[*B, obs_dim]`` with
    ``num_layers`` hidden layers of ``num_cells`` units, giving ``[*B, num_cells]``. The pixel
    stack runs channels-last, in chunks of images; a layer with hooks keeps its module call.

    Args:
        channels: channels of the first convolution. Defaults to 32.
        num_layers: number of convolutions (or hidden MLP layers). Defaults to 4.
        in_channels: image channels; ``None`` makes the first convolution lazy.
        depth: paper-era name of ``channels``.
        device: device of the parameters.
        obs_dim: size of a flat state observation; selects the MLP encoder.
        num_cells: hidden and output width of the MLP encoder. Defaults to 256.

    Examples:
        >>> enc = ObsEncoder(channels=4, in_channels=3)
        >>> enc(torch.zeros(2, 5, 3, 64, 64)).shape
        torch.Size([2, 5, 128])
        >>> ObsEncoder(obs_dim=3, num_layers=2, num_cells=16)(torch.zeros(4, 3)).shape
        torch.Size([4, 16])
    """

    def __init__(
        self,
        channels: int = 32,
        num_layers: int = 4,
        in_channels: int | None = None,
        depth: int | None = None,
        device: DeviceLike = None,
        *,
        obs_dim: int | None = None,
        num_cells: int = 256,
    ) -> None:
        super().__init__()
        channels = _resolve_channels(channels, depth)
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.obs_dim = obs_dim
        self.net: nn.Module
        if obs_dim is not None:
            self.net = MLP(
                in_features=obs_dim,
                out_features=num_cells,
                depth=num_layers,
                num_cells=num_cells,
                activation_class=nn.ELU,
                activate_last_layer=True,
                device=device,
            )
            return
        layers: list[nn.Module] = []
        width = channels
        for i in range(num_layers):
            if i == 0 and in_channels is None:
                layers.append(nn.LazyConv2d(width, 4, stride=2, device=device))
            else:
                n_in = in_channels if i == 0 else width // 2
                layers.append(nn.Conv2d(cast(int, n_in), width, 4, stride=2, device=device))
            layers.append(nn.ELU())
            width *= 2
        self.net = nn.Sequential(*layers)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """Embeds ``[*B, C, H, W]`` pixels (or ``[*B, obs_dim]`` states) into ``[*B, F]``."""
        if self.obs_dim is not None:
            return self.net(observation)
        if observation.ndim < 3:
            raise ValueError(
                f"ObsEncoder expects pixels shaped [*B, C, H, W], got shape {tuple(observation.shape)}"
            )
        flat, batch = _flatten_batch(observation, 3)
        layers = _plain_layers(self.net, (nn.Conv2d, nn.ELU))
        if layers is None:
            out = self.net(flat).flatten(1)
            return out.reshape(*batch, out.shape[-1])
        # Channels-last end to end: oneDNN convolves NHWC without reordering every layer's
        # input and output (~10% less time, forward and backward, on 64x64 pixels on a CPU),
        # in chunks of images (see _CHUNK_BYTES). The embedding is flattened in the usual
        # (C, H, W) order.
        largest = _conv_stack_largest(layers, flat.shape[-3], (flat.shape[-2], flat.shape[-1]))
        out = _in_chunks(flat, largest, lambda chunk: self._conv_stack(layers, chunk))
        return out.reshape(*batch, out.shape[-1])

    @staticmethod
    def _conv_stack(layers: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous(memory_format=torch.channels_last)
        fresh = False  # whether x is a conv output that nothing else holds
        for layer in layers:
            if type(layer) is nn.Conv2d:
                x, fresh = layer(x), True
            else:
                x, fresh = (_elu_inplace(x, layer) if fresh else layer(x)), False
        return x.contiguous().flatten(1)


class ObsDecoder(nn.Module):
    """Decodes a (state, belief) pair back into an observation: transposed convs or an MLP.

    The concatenated latent ``[*B, state_dim + rnn_hidden_dim]`` is projected to
    ``channels * 2 ** (num_layers + 1)`` features seen as a ``1x1`` map, then ``num_layers``
    stride-2 transposed convolutions halve the channels down to ``out_channels``. With the
    default kernels ``[5, 5, 6, 6]`` the output is ``[*B, out_channels, 64, 64]``. With
    ``obs_dim`` it is an MLP giving ``[*B, obs_dim]``. The same sums run faster in chunks of
    images: the first layer as one matrix product, a last layer of few channels as a sub-pixel
    convolution; a layer with hooks keeps its module call.

    Args:
        channels: channels of the last hidden transposed convolution. Defaults to 32.
        num_layers: number of transposed convolutions (or hidden MLP layers). Defaults to 4.
        kernel_sizes: kernel of each layer; ``[5, 5, 6, 6]`` for 4 layers, else ``5`` each.
        latent_dim: input size (state plus belief); ``None`` makes the projection lazy.
        out_channels: image channels of the output. Defaults to 3.
        depth: paper-era name of ``channels``.
        device: device of the parameters.
        obs_dim: size of a flat state observation; selects the MLP decoder.
        num_cells: hidden width of the MLP decoder. Defaults to 256.

    Examples:
        >>> dec = ObsDecoder(channels=4, latent_dim=10)
        >>> dec(torch.zeros(2, 5, 6), torch.zeros(2, 5, 4)).shape
        torch.Size([2, 5, 3, 64, 64])
        >>> ObsDecoder(obs_dim=3, latent_dim=10, num_cells=16)(torch.zeros(4, 6), torch.zeros(4, 4)).shape
        torch.Size([4, 3])
    """

    def __init__(
        self,
        channels: int = 32,
        num_layers: int = 4,
        kernel_sizes: int | Sequence[int] | None = None,
        latent_dim: int | None = None,
        out_channels: int = 3,
        depth: int | None = None,
        device: DeviceLike = None,
        *,
        obs_dim: int | None = None,
        num_cells: int = 256,
    ) -> None:
        super().__init__()
        channels = _resolve_channels(channels, depth)
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.obs_dim = obs_dim
        self.net: nn.Module
        if obs_dim is not None:
            self.net = MLP(
                in_features=latent_dim,
                out_features=obs_dim,
                depth=num_layers,
                num_cells=num_cells,
                activation_class=nn.ELU,
                device=device,
            )
            return
        if kernel_sizes is None:
            kernel_sizes = [5, 5, 6, 6] if num_layers == 4 else [5] * num_layers
        elif isinstance(kernel_sizes, int):
            kernel_sizes = [kernel_sizes] * num_layers
        kernels = list(kernel_sizes)
        if len(kernels) != num_layers:
            raise ValueError(f"kernel_sizes has {len(kernels)} entries for num_layers={num_layers}")
        self.proj_features = channels * 2 ** (num_layers + 1)
        if latent_dim is None:
            self.proj: nn.Module = nn.LazyLinear(self.proj_features, device=device)
        else:
            self.proj = nn.Linear(latent_dim, self.proj_features, device=device)
        widths = [channels * 2 ** (num_layers - 2 - i) for i in range(num_layers - 1)]
        widths.append(out_channels)
        layers: list[nn.Module] = []
        n_in = self.proj_features
        for i, (width, kernel) in enumerate(zip(widths, kernels)):
            layers.append(nn.ConvTranspose2d(n_in, width, kernel, stride=2, device=device))
            if i < num_layers - 1:
                layers.append(nn.ELU())
            n_in = width
        self.net = nn.Sequential(*layers)

    def forward(self, state: torch.Tensor, rnn_hidden: torch.Tensor) -> torch.Tensor:
        """Decodes ``[*B, state_dim]`` and ``[*B, rnn_hidden_dim]`` into an observation."""
        latent = torch.cat([state, rnn_hidden], dim=-1)
        if self.obs_dim is not None:
            return self.net(latent)
        flat, batch = _flatten_batch(latent, 1)
        hidden = self.proj(flat)
        layers = _plain_layers(self.net, (nn.ConvTranspose2d, nn.ELU))
        if layers is None:
            out = self.net(hidden.reshape(-1, self.proj_features, 1, 1))
            return out.reshape(*batch, *out.shape[1:])
        largest = _conv_stack_largest(layers, self.proj_features, (1, 1))
        out = _in_chunks(hidden, largest, lambda chunk: self._conv_stack(layers, chunk))
        return out.reshape(*batch, *out.shape[1:])

    def _conv_stack(self, layers: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
        fresh = False  # whether x is a conv output that nothing else holds
        for layer in layers:
            if type(layer) is nn.ELU:
                x, fresh = (_elu_inplace(x, layer) if fresh else layer(x)), False
                continue
            conv = cast(nn.ConvTranspose2d, layer)
            plain = _transposed_conv_geometry(conv)
            if x.ndim == 2 and plain:
                x, fresh = _transposed_conv_of_a_point(conv, x), True
                continue
            if x.ndim == 2:
                x = x.reshape(-1, self.proj_features, 1, 1)
            if plain and conv.stride[0] == conv.stride[1] and conv.out_channels <= 8:
                x = _transposed_conv_as_subpixel_conv(conv, x)
            else:
                x = conv(x)
            fresh = True
        return x


def _gaussian_params(raw: torch.Tensor, scale_lb: float) -> tuple[torch.Tensor, torch.Tensor]:
    mean, std = raw.chunk(2, dim=-1)
    # softplus runs ~10x slower on the strided half than on a contiguous copy of it (CPU); its
    # backward reads its input, so the bound is added in place on its output.
    return mean, F.softplus(std.contiguous()).add_(scale_lb)


def _action_dim_from(action_spec: Any, action_dim: int | None) -> int | None:
    if action_dim is not None:
        return action_dim
    shape = getattr(action_spec, "shape", None)
    if shape is not None and len(shape):
        return int(shape[-1])
    return None


class RSSMPrior(nn.Module):
    """The prior (transition) network of the Gaussian RSSM.

    From the previous state ``s_t``, belief ``h_t`` and action ``a_t`` it computes the next belief
    ``h_{t+1} = GRU(ELU(Linear([s_t, a_t])), h_t)`` and the prior ``p(s_{t+1} | h_{t+1}) =
    N(mean, std)`` with ``std = softplus(.) + scale_lb``, and samples ``s_{t+1}`` from it
    (reparameterised, so gradients flow through the sample). Inputs may have any leading batch
    shape ``[*B]``.

    Args:
        action_spec: the action spec; only its last dimension is read (may be ``None``).
        hidden_dim: width of the input projection (input of the GRU). Defaults to 200.
        rnn_hidden_dim: belief size. Defaults to 200.
        state_dim: stochastic state size. Defaults to 30.
        scale_lb: lower bound of the standard deviation. Defaults to 0.1.
        action_dim: action size; read from ``action_spec`` when omitted, lazy if neither.
        device: device of the parameters.

    Examples:
        >>> prior = RSSMPrior(None, hidden_dim=8, rnn_hidden_dim=6, state_dim=4, action_dim=2)
        >>> mean, std, state, belief = prior(torch.zeros(3, 4), torch.zeros(3, 6), torch.zeros(3, 2))
        >>> mean.shape, state.shape, belief.shape, bool((std >= 0.1).all())
        (torch.Size([3, 4]), torch.Size([3, 4]), torch.Size([3, 6]), True)
    """

    def __init__(
        self,
        action_spec: Any = None,
        hidden_dim: int = 200,
        rnn_hidden_dim: int = 200,
        state_dim: int = 30,
        scale_lb: float = 0.1,
        action_dim: int | None = None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        action_dim = _action_dim_from(action_spec, action_dim)
        self.state_dim = state_dim
        self.rnn_hidden_dim = rnn_hidden_dim
        self.scale_lb = scale_lb
        self.action_dim = action_dim
        if action_dim is None:
            self.action_state_projector: nn.Module = nn.LazyLinear(hidden_dim, device=device)
        else:
            self.action_state_projector = nn.Linear(
                state_dim + action_dim, hidden_dim, device=device
            )
        self.rnn = nn.GRUCell(hidden_dim, rnn_hidden_dim, device=device)
        self.rnn_to_prior_projector = nn.Sequential(
            nn.Linear(rnn_hidden_dim, hidden_dim, device=device),
            nn.ELU(),
            nn.Linear(hidden_dim, 2 * state_dim, device=device),
        )

    def forward(
        self,
        state: torch.Tensor,
        belief: torch.Tensor,
        action: torch.Tensor,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One prior step.

        Args:
            state: previous stochastic state, ``[*B, state_dim]``.
            belief: previous belief, ``[*B, rnn_hidden_dim]``.
            action: action taken, ``[*B, action_dim]``.
            noise: standard-normal noise ``[*B, state_dim]`` for the sample; drawn if ``None``.

        Returns:
            ``(prior_mean, prior_std, prior_state, next_belief)``.
        """
        projected = F.elu(self.action_state_projector(torch.cat([state, action], dim=-1)))
        flat, batch = _flatten_batch(projected, 1)
        next_belief = self.rnn(flat, belief.reshape(-1, belief.shape[-1])).reshape(*batch, -1)
        mean, std = _gaussian_params(self.rnn_to_prior_projector(next_belief), self.scale_lb)
        if noise is None:
            noise = torch.randn_like(mean)
        return mean, std, mean + std * noise, next_belief


class RSSMPosterior(nn.Module):
    """The posterior (representation) network of the Gaussian RSSM.

    ``q(s_t | h_t, e_t) = N(mean, std)`` from the belief ``h_t`` and the observation embedding
    ``e_t``, with ``std = softplus(.) + scale_lb``, and a reparameterised sample ``s_t``.

    Args:
        hidden_dim: hidden width. Defaults to 200.
        state_dim: stochastic state size. Defaults to 30.
        scale_lb: lower bound of the standard deviation. Defaults to 0.1.
        rnn_hidden_dim: belief size; with ``obs_embed_dim`` makes the first layer non-lazy.
        obs_embed_dim: embedding size; with ``rnn_hidden_dim`` makes the first layer non-lazy.
        device: device of the parameters.

    Examples:
        >>> post = RSSMPosterior(hidden_dim=8, state_dim=4, rnn_hidden_dim=6, obs_embed_dim=5)
        >>> mean, std, state = post(torch.zeros(3, 6), torch.zeros(3, 5))
        >>> state.shape
        torch.Size([3, 4])
    """

    def __init__(
        self,
        hidden_dim: int = 200,
        state_dim: int = 30,
        scale_lb: float = 0.1,
        rnn_hidden_dim: int | None = None,
        obs_embed_dim: int | None = None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        first: nn.Module
        if rnn_hidden_dim is not None and obs_embed_dim is not None:
            first = nn.Linear(rnn_hidden_dim + obs_embed_dim, hidden_dim, device=device)
        else:
            first = nn.LazyLinear(hidden_dim, device=device)
        self.obs_rnn_to_post_projector = nn.Sequential(
            first, nn.ELU(), nn.Linear(hidden_dim, 2 * state_dim, device=device)
        )
        self.state_dim = state_dim
        self.scale_lb = scale_lb

    def forward(
        self, belief: torch.Tensor, obs_embedding: torch.Tensor, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One posterior step.

        Args:
            belief: the belief ``[*B, rnn_hidden_dim]``.
            obs_embedding: the encoded observation ``[*B, obs_embed_dim]``.
            noise: standard-normal noise ``[*B, state_dim]``; drawn if ``None``.

        Returns:
            ``(posterior_mean, posterior_std, posterior_state)``.
        """
        raw = self.obs_rnn_to_post_projector(torch.cat([belief, obs_embedding], dim=-1))
        mean, std = _gaussian_params(raw, self.scale_lb)
        if noise is None:
            noise = torch.randn_like(mean)
        return mean, std, mean + std * noise


def _strip_next(key: NestedKey) -> NestedKey | None:
    """``("next", *k)`` -> ``k`` (a str when one element is left); ``None`` for other keys."""
    if isinstance(key, tuple) and len(key) > 1 and key[0] == NEXT:
        rest = key[1:]
        return rest[0] if len(rest) == 1 else rest
    return None


class RSSMRollout(TensorDictModuleBase):
    """Runs an RSSM prior and posterior over a ``[*B, T]`` sequence (filtering on real data).

    At step ``t`` the prior reads the state, belief and action of step ``t`` and writes the next
    belief (and prior parameters) under ``"next"``; the posterior then reads that belief and the
    encoded next observation and writes the next state. The ``("next", k)`` outputs whose ``k``
    the prior reads (by default ``"state"`` and ``"belief"``) become step ``t + 1``'s inputs, so
    only step 0's ``"state"``/``"belief"`` (the primer) are read from the data; the entries of
    later steps are overwritten with the values actually used. Time is the last batch dim.

    With ``reset_key``, the state, belief and action are zeroed where that boolean entry is
    ``True`` (episode starts inside a sequence), before the prior runs.

    Args:
        rssm_prior: a TensorDictModule around e.g. :class:`RSSMPrior`.
        rssm_posterior: a TensorDictModule around e.g. :class:`RSSMPosterior`.
        reset_key: boolean ``[*B, T]`` or ``[*B, T, 1]`` entry marking episode starts, or ``None``.
        action_key: the action entry zeroed on reset; defaults to the prior input that is neither
            carried state nor belief.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> prior = TensorDictModule(
        ...     RSSMPrior(None, 8, 6, 4, action_dim=2),
        ...     in_keys=["state", "belief", "action"],
        ...     out_keys=[("next", "prior_mean"), ("next", "prior_std"), "_", ("next", "belief")],
        ... )
        >>> posterior = TensorDictModule(
        ...     RSSMPosterior(8, 4, rnn_hidden_dim=6, obs_embed_dim=5),
        ...     in_keys=[("next", "belief"), ("next", "encoded_latents")],
        ...     out_keys=[("next", "posterior_mean"), ("next", "posterior_std"), ("next", "state")],
        ... )
        >>> td = TensorDict(
        ...     {"state": torch.zeros(2, 7, 4), "belief": torch.zeros(2, 7, 6),
        ...      "action": torch.zeros(2, 7, 2), ("next", "encoded_latents"): torch.zeros(2, 7, 5)},
        ...     batch_size=[2, 7],
        ... )
        >>> RSSMRollout(prior, posterior)(td)["next", "state"].shape
        torch.Size([2, 7, 4])
    """

    def __init__(
        self,
        rssm_prior: TensorDictModuleBase,
        rssm_posterior: TensorDictModuleBase,
        *,
        reset_key: NestedKey | None = None,
        action_key: NestedKey | None = None,
    ) -> None:
        super().__init__()
        self.rssm_prior = rssm_prior
        self.rssm_posterior = rssm_posterior
        out_keys = [k for k in [*rssm_prior.out_keys, *rssm_posterior.out_keys] if k != "_"]
        self.out_keys = module_keys(dict.fromkeys(out_keys))
        # (written under "next", read by the prior at the next step)
        self.carried: list[tuple[NestedKey, NestedKey]] = []
        for key in self.out_keys:
            inner = _strip_next(key)
            if inner is not None and inner in rssm_prior.in_keys:
                self.carried.append((key, inner))
        if not self.carried:
            raise ValueError(
                "RSSMRollout: no ('next', k) output of the prior/posterior is an input k of the "
                f"prior, so nothing carries over time. Prior in_keys={rssm_prior.in_keys}, "
                f"outputs={self.out_keys}"
            )
        carried_in = [inner for _, inner in self.carried]
        self.primer_keys = carried_in
        in_keys = list(rssm_prior.in_keys)
        in_keys += [k for k in rssm_posterior.in_keys if k not in self.out_keys]
        self.reset_key = reset_key
        if reset_key is not None:
            in_keys.append(reset_key)
        self.in_keys = module_keys(dict.fromkeys(in_keys))
        if action_key is None and reset_key is not None:
            others = [k for k in rssm_prior.in_keys if k not in carried_in]
            if len(others) != 1:
                raise ValueError(
                    f"RSSMRollout could not pick the action among prior inputs {others}: pass "
                    "action_key"
                )
            action_key = others[0]
        self.action_key = action_key
        # Plain TensorDictModules around nn.Modules are called on tensors directly: no
        # TensorDict is built per step (same calls in the same order, so the same results).
        self.tensor_path = all(
            type(m) is TensorDictModule
            and isinstance(m.module, nn.Module)
            and isinstance(m.in_keys, list)
            for m in (rssm_prior, rssm_posterior)
        )

    def _check(self, tensordict: TensorDictBase) -> None:
        if tensordict.ndim < 1:
            raise ValueError("RSSMRollout needs a [*B, T] TensorDict (time is the last batch dim)")
        missing = [k for k in self.in_keys if k not in tensordict.keys(include_nested=True)]
        if missing:
            raise KeyError(
                f"RSSMRollout: missing input entries {missing}. The recurrent primer "
                f"{self.primer_keys} must be present (zeros at episode starts); it is never "
                "created implicitly."
            )

    def _tensor_forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        time_dim = tensordict.ndim - 1
        sequences = {key: tensordict.get(key) for key in self.in_keys}
        recorded = [*self.out_keys, *self.primer_keys]
        history: dict[NestedKey, list[torch.Tensor]] = {key: [] for key in recorded}
        modules = [cast(TensorDictModule, m) for m in (self.rssm_prior, self.rssm_posterior)]
        carry: dict[NestedKey, torch.Tensor] = {}
        for t in range(tensordict.shape[-1]):
            values = {key: seq.select(time_dim, t) for key, seq in sequences.items()}
            values.update(carry)
            if self.reset_key is not None:
                mask = values[self.reset_key]
                if mask.ndim == time_dim:
                    mask = mask.unsqueeze(-1)
                for key in [*self.primer_keys, cast(NestedKey, self.action_key)]:
                    values[key] = torch.where(mask, torch.zeros_like(values[key]), values[key])
            for module in modules:
                outputs = module.module(*(values[key] for key in module.in_keys))
                if isinstance(outputs, torch.Tensor):
                    outputs = (outputs,)
                for key, value in zip(module.out_keys, outputs):
                    if key != "_":
                        values[key] = value
            for key in recorded:
                history[key].append(values[key])
            carry = {inner: values[key] for key, inner in self.carried}
        for key, steps in history.items():
            tensordict.set(key, torch.stack(steps, time_dim))
        return tensordict

    def _reset(self, step: TensorDictBase) -> None:
        assert self.reset_key is not None
        mask = step.get(self.reset_key)
        if mask.ndim == step.ndim:
            mask = mask.unsqueeze(-1)
        keys = [*self.primer_keys, cast(NestedKey, self.action_key)]
        for key in keys:
            value = step.get(key)
            step.set(key, torch.where(mask, torch.zeros_like(value), value))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Filters the sequence and writes every step's outputs into ``tensordict``.

        Args:
            tensordict: data with batch ``[*B, T]`` holding the prior's and posterior's inputs.

        Returns:
            ``tensordict``, updated with the stacked outputs (``[*B, T, ...]``) and the states and
            beliefs each step actually used.
        """
        self._check(tensordict)
        if self.tensor_path:
            return self._tensor_forward(tensordict)
        time_dim = tensordict.ndim - 1
        steps = tensordict.select(*self.in_keys).unbind(time_dim)
        outputs: list[TensorDictBase] = []
        carry: dict[NestedKey, torch.Tensor] = {}
        for step in steps:
            for key, value in carry.items():
                step.set(key, value)
            if self.reset_key is not None:
                self._reset(step)
            self.rssm_prior(step)
            self.rssm_posterior(step)
            outputs.append(step)
            carry = {inner: step.get(key) for key, inner in self.carried}
        stacked = cast(TensorDictBase, torch.stack(outputs, time_dim))  # type: ignore[arg-type]
        return tensordict.update(stacked.select(*self.out_keys, *self.primer_keys))


class DreamerActor(nn.Module):
    """The Dreamer actor network: an MLP over ``[state, belief]`` giving a Gaussian's parameters.

    Returns ``loc`` and ``scale = softplus(raw + std_bias) + std_min_val`` (the bias starts the
    policy with a wide standard deviation); a ``TanhNormal`` over them gives bounded actions.

    Args:
        out_features: action size.
        depth: number of hidden layers. Defaults to 4.
        num_cells: hidden width. Defaults to 200.
        activation_class: hidden activation. Defaults to ``nn.ELU``.
        std_bias: added to the raw scale before the softplus. Defaults to 5.0.
        std_min_val: lower bound of the scale. Defaults to 1e-4.
        device: device of the parameters.
        in_features: ``state_dim + rnn_hidden_dim``; ``None`` makes the first layer lazy.

    Examples:
        >>> actor = DreamerActor(2, depth=2, num_cells=16, in_features=10)
        >>> loc, scale = actor(torch.zeros(5, 4), torch.zeros(5, 6))
        >>> loc.shape, bool((scale > 0).all())
        (torch.Size([5, 2]), True)
    """

    def __init__(
        self,
        out_features: int,
        depth: int = 4,
        num_cells: int = 200,
        activation_class: Callable[..., nn.Module] = nn.ELU,
        std_bias: float = 5.0,
        std_min_val: float = 1e-4,
        device: DeviceLike = None,
        *,
        in_features: int | None = None,
    ) -> None:
        super().__init__()
        self.backbone = MLP(
            in_features=in_features,
            out_features=2 * out_features,
            depth=depth,
            num_cells=num_cells,
            activation_class=activation_class,
            device=device,
        )
        self.std_bias = std_bias
        self.std_min_val = std_min_val

    def forward(
        self, state: torch.Tensor, belief: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loc, scale)``, each ``[*B, out_features]``, from ``[*B, state_dim]`` and ``[*B, rnn_hidden_dim]``."""
        loc, raw_scale = self.backbone(state, belief).chunk(2, dim=-1)
        return loc, F.softplus(raw_scale + self.std_bias) + self.std_min_val


class WorldModel(TensorDictModuleBase):
    """A world model assembled from TensorDict modules: encoder, dynamics, reward, done, decoder.

    Composition only: ``forward`` runs ``encoder -> dynamics -> reward_head [-> done_head]
    [-> decoder]`` on one TensorDict; :meth:`encode`, :meth:`step` and :meth:`decode` run the
    parts alone. Rolling the model out over time is the job of an env around it (a
    ``WorldModelEnv``, which drives :attr:`step_module`). No latent layout is assumed: the parts
    talk through their ``in_keys``/``out_keys``.

    Args:
        encoder: observation to latent, e.g. ``"observation" -> "latent"``.
        dynamics: latent and action to next latent, e.g. ``("latent", "action") -> ("next", "latent")``.
        reward_head: next latent to ``("next", "reward")``.
        done_head: next latent to ``("next", "done")`` (optional).
        decoder: latent to a reconstructed observation (optional).

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> wm = WorldModel(
        ...     TensorDictModule(nn.Linear(3, 4), ["observation"], ["latent"]),
        ...     TensorDictModule(MLP(out_features=4, depth=1), ["latent", "action"], [("next", "latent")]),
        ...     TensorDictModule(nn.Linear(4, 1), [("next", "latent")], [("next", "reward")]),
        ... )
        >>> td = wm(TensorDict(observation=torch.zeros(2, 3), action=torch.zeros(2, 1), batch_size=[2]))
        >>> td["next", "reward"].shape
        torch.Size([2, 1])
    """

    def __init__(
        self,
        encoder: TensorDictModuleBase,
        dynamics: TensorDictModuleBase,
        reward_head: TensorDictModuleBase,
        done_head: TensorDictModuleBase | None = None,
        decoder: TensorDictModuleBase | None = None,
    ) -> None:
        super().__init__()
        for name, part in (
            ("encoder", encoder),
            ("dynamics", dynamics),
            ("reward_head", reward_head),
        ):
            if not isinstance(part, TensorDictModuleBase):
                raise TypeError(
                    f"WorldModel {name} must be a TensorDictModuleBase (e.g. TensorDictModule), "
                    f"got {type(part).__name__}"
                )
        self.encoder = encoder
        self.dynamics = dynamics
        self.reward_head = reward_head
        self.done_head = done_head
        self.decoder = decoder
        step_parts = [dynamics, reward_head] + ([done_head] if done_head is not None else [])
        self.step_module = TensorDictSequential(*step_parts)
        parts = [encoder, *step_parts] + ([decoder] if decoder is not None else [])
        self.module = TensorDictSequential(*parts)
        self.in_keys = module_keys(self.module.in_keys)
        self.out_keys = module_keys(self.module.out_keys)

    def encode(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Runs the encoder only."""
        return self.encoder(tensordict)

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Runs dynamics, reward head and (if any) done head: one imagined transition."""
        return self.step_module(tensordict)

    def decode(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Runs the decoder; an error if the model has none."""
        if self.decoder is None:
            raise RuntimeError("WorldModel.decode: this world model was built without a decoder")
        return self.decoder(tensordict)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Encode, step, predict reward (and done), and decode when a decoder is set."""
        return self.module(tensordict)
