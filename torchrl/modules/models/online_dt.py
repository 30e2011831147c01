"""The Gaussian actor of the Online Decision Transformer (Zheng et al. 2022)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torchrl._types import DeviceLike
from torchrl.modules.models.transformer import DecisionTransformer, DTConfig

__all__ = ["OnlineDTActor"]


class OnlineDTActor(nn.Module):
    """Online Decision Transformer actor: the mean and standard deviation of a Gaussian policy.

    The :class:`~torchrl.modules.DecisionTransformer` reads the ``(return-to-go, state, action)``
    context; two linear heads on the state tokens give the mean and the log standard deviation,
    the latter squashed into ``[log_std_min, log_std_max]``. The mean is not bounded: pair the
    actor with a :class:`~torchrl.modules.TanhNormal` for bounded actions (as
    :class:`~torchrl.objectives.OnlineDTLoss` expects).

    Args:
        state_dim: observation size.
        action_dim: action size.
        transformer_config: transformer sizes (:class:`DTConfig` or dict); defaults to
            :meth:`default_config`.
        device: device of the parameters.
        log_std_min: lower bound of the log standard deviation.
        log_std_max: upper bound of the log standard deviation.

    Examples:
        >>> actor = OnlineDTActor(4, 2, DTConfig(n_embd=16, n_layer=1, n_head=2, n_inner=32))
        >>> obs, act, rtg = torch.randn(8, 10, 4), torch.randn(8, 10, 2), torch.randn(8, 10, 1)
        >>> mu, std = actor(obs, act, rtg)
        >>> mu.shape, std.shape, bool((std > 0).all())
        (torch.Size([8, 10, 2]), torch.Size([8, 10, 2]), True)
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        transformer_config: DTConfig | dict[str, Any] | None = None,
        device: DeviceLike = None,
        *,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
    ) -> None:
        super().__init__()
        if log_std_min >= log_std_max:
            raise ValueError(
                f"OnlineDTActor: log_std_min={log_std_min} must be below log_std_max={log_std_max}"
            )
        if transformer_config is None:
            transformer_config = self.default_config()
        self.transformer = DecisionTransformer(state_dim, action_dim, transformer_config, device)
        width = self.transformer.config.n_embd
        self.action_layer_mean = nn.Linear(width, action_dim, device=device)
        self.action_layer_logstd = nn.Linear(width, action_dim, device=device)
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max

    @classmethod
    def default_config(cls) -> DTConfig:
        """The transformer sizes of the Online Decision Transformer paper (512-wide, 4 layers).

        Examples:
            >>> OnlineDTActor.default_config().n_embd
            512
        """
        return DTConfig(n_embd=512, n_layer=4, n_head=4, n_inner=2048, activation="relu")

    def forward(
        self, observation: torch.Tensor, action: torch.Tensor, return_to_go: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(mean, std)``, each ``[*B, T, action_dim]``.

        Args:
            observation: ``[*B, T, state_dim]``.
            action: ``[*B, T, action_dim]`` (the previous actions of the context).
            return_to_go: ``[*B, T, 1]``.
        """
        hidden = self.transformer(observation, action, return_to_go)
        mean = self.action_layer_mean(hidden)
        # tanh keeps the log-std in its range with a gradient everywhere (a clamp would not)
        unit = torch.tanh(self.action_layer_logstd(hidden))
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (unit + 1)
        return mean, log_std.exp()
