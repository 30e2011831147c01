"""Deep deterministic policy gradient loss (Lillicrap et al., 2016)."""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, dispatch
from torch import Tensor

from torchrl._keys import DONE, NEXT, PRIORITY, REWARD, STATE_ACTION_VALUE, TERMINATED
from torchrl._types import NestedKey
from torchrl.objectives._helpers import (
    check_action_shape,
    check_loss_function,
    check_reduction,
    reduce_loss,
    write_priority,
)
from torchrl.objectives.common import LossModule, ParamSet, next_key
from torchrl.objectives.utils import ValueEstimators, distance_loss

__all__ = ["DDPGLoss"]


class DDPGLoss(LossModule):
    """DDPG: ``loss_actor = -Q(s, pi(s))`` and ``loss_value = d(Q(s, a), y)``.

    ``y = r + gamma * (1 - terminated) * Q_target(s', pi_target(s'))`` (TD(0) by default).
    The actor loss does not update the critic (its parameters are detached there).

    Args:
        actor_network: a deterministic actor writing ``"action"``.
        value_network: reads the observation and ``"action"``, writes
            ``"state_action_value"``.
        loss_function: ``"l2"``, ``"l1"`` or ``"smooth_l1"`` for the value loss.
        delay_actor: keep target actor parameters.
        delay_value: keep target critic parameters.
        separate_losses: unused (the actor loss never updates the critic).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Examples:
        >>> from torch import nn
        >>> from torchrl.modules import Actor, ValueOperator, MLP
        >>> actor = Actor(nn.Linear(3, 1))
        >>> critic = ValueOperator(MLP(in_features=4, out_features=1, depth=1),
        ...                        in_keys=["observation", "action"])
        >>> loss = DDPGLoss(actor, critic)
        >>> loss_actor, loss_value, *diagnostics = loss(observation=torch.randn(5, 3), action=torch.randn(5, 1),
        ...     next_observation=torch.randn(5, 3), next_reward=torch.randn(5, 1),
        ...     next_done=torch.zeros(5, 1, dtype=torch.bool),
        ...     next_terminated=torch.zeros(5, 1, dtype=torch.bool))
        >>> loss_actor.shape
        torch.Size([])
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by :class:`DDPGLoss`."""

        state_action_value: NestedKey = STATE_ACTION_VALUE
        priority: NestedKey = PRIORITY
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED

    default_keys = _AcceptedKeys
    value_network: TensorDictModuleBase
    default_value_estimator = ValueEstimators.TD0
    _supported_estimators = (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        value_network: TensorDictModuleBase,
        *,
        loss_function: str = "l2",
        delay_actor: bool = False,
        delay_value: bool = True,
        separate_losses: bool = False,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        self.convert_to_functional(actor_network, "actor_network", create_target_params=delay_actor)
        self.convert_to_functional(value_network, "value_network", create_target_params=delay_value)
        self.delay_actor = delay_actor
        self._action_key = (getattr(actor_network, "out_keys", None) or ["action"])[-1]
        self.delay_value = delay_value
        self.loss_function = check_loss_function(loss_function)
        self.reduction = check_reduction(reduction)
        self._adopt_out_key("state_action_value", value_network)
        self.out_keys = [
            "loss_actor",
            "loss_value",
            "pred_value",
            "target_value",
            "pred_value_max",
            "target_value_max",
        ]
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        return [
            *self._net_in_keys(self.actor_network),
            *self._net_in_keys(self.value_network, with_next=False),
            *(
                next_key(k)
                for k in self.value_network.in_keys
                if k not in self.actor_network.out_keys
            ),
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    def _q(self, tensordict: TensorDictBase, param_set: ParamSet) -> Tensor:
        inputs = tensordict.select(*self.value_network.in_keys, strict=False)
        out = self._call_network("value_network", inputs, param_set)
        return out.get(self.tensor_keys.state_action_value)

    def _act(self, tensordict: TensorDictBase, param_set: ParamSet) -> TensorDictBase:
        inputs = tensordict.select(*self.actor_network.in_keys, strict=False)
        return self._call_network("actor_network", inputs, param_set)

    def actor_loss(self, tensordict: TensorDictBase) -> Tensor:
        """``-Q(s, pi(s))`` per sample, gradients to the actor only (``[*B, 1]``)."""
        acted = self._act(tensordict, ParamSet.ONLINE)
        key = self._action_key
        if key in tensordict.keys(True):
            check_action_shape("DDPGLoss", key, tensordict.get(key), acted.get(key))
        return -self._q(acted, ParamSet.DETACHED)

    def value_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, Tensor, Tensor]:
        """``(d(Q(s, a), y), Q(s, a), y)`` per sample."""
        pred = self._q(tensordict, ParamSet.ONLINE)
        with torch.no_grad():
            next_acted = self._act(tensordict.get(NEXT), ParamSet.TARGET)
            next_value = self._q(next_acted, ParamSet.TARGET)
            target = self.value_estimator.value_estimate(tensordict, next_value=next_value)
        return distance_loss(pred, target, self.loss_function), pred, target

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes ``loss_actor``, ``loss_value`` and value diagnostics.

        Args:
            tensordict: a batch ``[*B]`` with the actor's and critic's inputs (root and
                ``"next"``, including ``"action"``) and ``("next", "reward"/"done"/...)``.

        Returns:
            A TensorDict of loss terms and detached diagnostics.
        """
        self._check_inputs(tensordict)
        loss_actor = self.actor_loss(tensordict)
        loss_value, pred, target = self.value_loss(tensordict)
        write_priority(tensordict, self.tensor_keys.priority, pred, target)
        pred = pred.detach()
        return TensorDict(
            {
                "loss_actor": reduce_loss(loss_actor, self.reduction),
                "loss_value": reduce_loss(loss_value, self.reduction),
                "pred_value": pred.mean(),
                "target_value": target.mean(),
                "pred_value_max": pred.max(),
                "target_value_max": target.max(),
            },
            batch_size=[],
        )
