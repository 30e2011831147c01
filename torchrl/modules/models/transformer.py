"""Decision Transformer (Chen et al. 2021) on a small causal transformer written here."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from torchrl._types import DeviceLike
from torchrl._utils import warn_once

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


@dataclasses.dataclass
class DTConfig:
    """Sizes of the causal transformer of :class:`DecisionTransformer` (GPT-2 style names).

    Examples:
        >>> DTConfig(n_embd=32, n_layer=1).n_head
        4
    """

    n_embd: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_inner: int = 1024
    activation: str = "relu"
    n_positions: int = 1024
    resid_pdrop: float = 0.1
    attn_pdrop: float = 0.1


class _CausalSelfAttention(nn.Module):
    def __init__(self, cfg: DTConfig, device: DeviceLike) -> None:
        super().__init__()
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"n_embd={cfg.n_embd} is not divisible by n_head={cfg.n_head}")
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, device=device)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, device=device)
        self.attn_pdrop = cfg.attn_pdrop
        self.resid_drop = nn.Dropout(cfg.resid_pdrop)

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        width = value.shape[-1]
        q, k, v = self.qkv(value).split(width, -1)
        # [*B, L, W] -> [*B, heads, L, W/heads]
        q, k, v = (t.unflatten(-1, (self.n_head, -1)).transpose(-3, -2) for t in (q, k, v))
        out = nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.attn_pdrop if self.training else 0.0
        )
        out = out.transpose(-3, -2).flatten(-2)
        return self.resid_drop(self.proj(out))


class _Block(nn.Module):
    def __init__(self, cfg: DTConfig, device: DeviceLike) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, device=device)
        self.attn = _CausalSelfAttention(cfg, device)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, device=device)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, cfg.n_inner, device=device),
            _ACTIVATIONS[cfg.activation](),
            nn.Linear(cfg.n_inner, cfg.n_embd, device=device),
            nn.Dropout(cfg.resid_pdrop),
        )

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        value = value + self.attn(self.ln_1(value))
        return value + self.mlp(self.ln_2(value))


class GPTBackbone(nn.Module):
    """A GPT-2 style stack of pre-norm causal self-attention blocks with learned positions.

    The trunk of :class:`DecisionTransformer` (TorchRL's ``CausalTransformer`` is the backbone
    of :class:`~torchrl.modules.TransformerModule`, a different network).

    Args:
        config: sizes (a :class:`DTConfig` or a dict of its fields).
        device: device of the parameters.

    Examples:
        >>> net = GPTBackbone(DTConfig(n_embd=16, n_layer=2, n_head=2, n_inner=32))
        >>> net(torch.zeros(3, 7, 16)).shape
        torch.Size([3, 7, 16])
    """

    def __init__(self, config: DTConfig | dict[str, Any], device: DeviceLike = None) -> None:
        super().__init__()
        cfg = config if isinstance(config, DTConfig) else DTConfig(**config)
        if cfg.activation not in _ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(_ACTIVATIONS)}, got {cfg.activation!r}"
            )
        self.config = cfg
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd, device=device)
        self.drop = nn.Dropout(cfg.resid_pdrop)
        self.blocks = nn.ModuleList(_Block(cfg, device) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, device=device)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[-2]
        if length > self.config.n_positions:
            raise ValueError(
                f"sequence of {length} tokens is longer than n_positions={self.config.n_positions}"
            )
        value = self.drop(tokens + self.wpe(torch.arange(length, device=tokens.device)))
        for block in self.blocks:
            value = block(value)
        return self.ln_f(value)


class CausalTransformer(GPTBackbone):
    """Former name of :class:`GPTBackbone` (kept one minor release; warns once per process).

    Renamed because TorchRL's ``torchrl.modules.CausalTransformer`` is the backbone of
    :class:`~torchrl.modules.TransformerModule`, which ``torchrl.modules`` now exports.

    Examples:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     net = CausalTransformer(DTConfig(n_embd=8, n_layer=1, n_head=2, n_inner=16))
        >>> isinstance(net, GPTBackbone)
        True
    """

    def __init__(self, config: DTConfig | dict[str, Any], device: DeviceLike = None) -> None:
        warn_once(
            "torchrl.modules.models.CausalTransformer is now GPTBackbone; the old name goes in "
            "the next minor release (torchrl.modules.CausalTransformer is TransformerModule's "
            "backbone)",
            FutureWarning,
            stacklevel=3,
        )
        super().__init__(config, device)


class DecisionTransformer(nn.Module):
    """Decision Transformer: a causal transformer over (return-to-go, state, action) tokens.

    Each time step contributes three tokens ``R_t, s_t, a_t``; the output at the state token
    ``s_t`` (which has seen ``R_<=t, s_<=t, a_<t``) is returned, ready for an action head.

    Args:
        state_dim: observation size.
        action_dim: action size.
        config: transformer sizes (:class:`DTConfig` or dict). ``3 * T`` must fit ``n_positions``.
        device: device of the parameters.

    Examples:
        >>> dt = DecisionTransformer(3, 2, DTConfig(n_embd=16, n_layer=1, n_head=2, n_inner=32))
        >>> obs, act, rtg = torch.zeros(4, 10, 3), torch.zeros(4, 10, 2), torch.zeros(4, 10, 1)
        >>> dt(obs, act, rtg).shape
        torch.Size([4, 10, 16])
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        config: DTConfig | dict[str, Any] | None = None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        cfg = config if isinstance(config, DTConfig) else DTConfig(**(config or {}))
        self.config = cfg
        self.state_dim = state_dim
        self.action_dim = action_dim
        self.embed_return = nn.Linear(1, cfg.n_embd, device=device)
        self.embed_state = nn.Linear(state_dim, cfg.n_embd, device=device)
        self.embed_action = nn.Linear(action_dim, cfg.n_embd, device=device)
        self.embed_ln = nn.LayerNorm(cfg.n_embd, device=device)
        self.transformer = GPTBackbone(cfg, device=device)

    def forward(
        self, observation: torch.Tensor, action: torch.Tensor, return_to_go: torch.Tensor
    ) -> torch.Tensor:
        """Returns the state-token features ``[*B, T, n_embd]``.

        Args:
            observation: ``[*B, T, state_dim]``.
            action: ``[*B, T, action_dim]``.
            return_to_go: ``[*B, T, 1]``.
        """
        tokens = torch.stack(
            [
                self.embed_return(return_to_go),
                self.embed_state(observation),
                self.embed_action(action),
            ],
            dim=-2,
        )  # [*B, T, 3, E]: interleaving R_t, s_t, a_t along time
        tokens = self.embed_ln(tokens.flatten(-3, -2))
        hidden = self.transformer(tokens)
        return hidden.unflatten(-2, (-1, 3))[..., 1, :]


class DTActor(nn.Module):
    """A deterministic Decision-Transformer actor: features -> linear -> tanh actions in [-1, 1].

    Args:
        state_dim: observation size.
        action_dim: action size.
        transformer_config: transformer sizes (:class:`DTConfig` or dict).
        device: device of the parameters.

    Examples:
        >>> actor = DTActor(3, 2, DTConfig(n_embd=16, n_layer=1, n_head=2, n_inner=32))
        >>> actor(torch.zeros(5, 3), torch.zeros(5, 2), torch.zeros(5, 1)).shape
        torch.Size([5, 2])
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        transformer_config: DTConfig | dict[str, Any] | None = None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        self.transformer = DecisionTransformer(state_dim, action_dim, transformer_config, device)
        self.action_layer = nn.Linear(self.transformer.config.n_embd, action_dim, device=device)

    def forward(
        self, observation: torch.Tensor, action: torch.Tensor, return_to_go: torch.Tensor
    ) -> torch.Tensor:
        """Predicts ``[*B, T, action_dim]`` actions from ``[*B, T, *]`` context."""
        return torch.tanh(self.action_layer(self.transformer(observation, action, return_to_go)))
