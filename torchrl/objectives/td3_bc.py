"""TD3+BC loss for offline RL (Fujimoto and Gu, 2021)."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import Tensor

from torchrl.objectives._helpers import check_action_shape
from torchrl.objectives.common import ParamSet
from torchrl.objectives.td3 import TD3Loss

__all__ = ["TD3BCLoss"]


class TD3BCLoss(TD3Loss):
    """TD3+BC: the TD3 critic loss and a behaviour-cloning-regularised actor loss.

    ``loss_actor = -lmbda * Q_1(s, pi(s)) + (pi(s) - a)^2`` per sample, with
    ``lmbda = alpha / mean(|Q_1(s, pi(s))|)`` (no gradient through ``lmbda``); the squared
    error is averaged over the action dims.

    Args:
        actor_network: a deterministic actor writing ``"action"``.
        qvalue_network: reads the observation and ``"action"``, writes
            ``"state_action_value"``.
        alpha: the weight of the Q term (2.5 in the paper).
        **kwargs: the other :class:`~torchrl.objectives.TD3Loss` arguments.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from torchrl.modules import Actor, ValueOperator, MLP
        >>> actor = Actor(nn.Linear(3, 1))
        >>> critic = ValueOperator(MLP(in_features=4, out_features=1, depth=1),
        ...                        in_keys=["observation", "action"])
        >>> loss = TD3BCLoss(actor, critic, bounds=(-1.0, 1.0))
        >>> out = loss(observation=torch.randn(5, 3), action=torch.rand(5, 1),
        ...     next_observation=torch.randn(5, 3), next_reward=torch.randn(5, 1),
        ...     next_done=torch.zeros(5, 1, dtype=torch.bool),
        ...     next_terminated=torch.zeros(5, 1, dtype=torch.bool))
        >>> out[2].shape  # bc_loss
        torch.Size([])
    """

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        *,
        alpha: float = 2.5,
        **kwargs: Any,
    ):
        super().__init__(actor_network, qvalue_network, **kwargs)
        self.alpha = float(alpha)

    def _loss_out_keys(self) -> list[str]:
        keys = super()._loss_out_keys()
        return [*keys[:2], "bc_loss", "lmbda", *keys[2:]]

    def _actor_terms(self, tensordict: TensorDictBase, out: dict[str, Tensor]) -> Tensor:
        key = self.tensor_keys.action
        acted = self._act(tensordict, ParamSet.ONLINE)
        check_action_shape(type(self).__name__, key, tensordict.get(key), acted.get(key))
        q_actor = self._q(acted, ParamSet.DETACHED)[0]  # [*B, 1]
        lmbda = self.alpha / q_actor.abs().mean().detach()
        bc = (acted.get(key) - tensordict.get(key)).pow(2).mean(-1, keepdim=True)
        out["state_action_value_actor"] = q_actor.detach().mean()
        out["bc_loss"] = bc.detach().mean()
        out["lmbda"] = lmbda.detach()
        return -lmbda * q_actor + bc
