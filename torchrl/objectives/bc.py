"""Behavioural cloning: regress or maximise the likelihood of the data's actions."""

from __future__ import annotations

import dataclasses
from typing import cast

from tensordict import TensorDict, TensorDictBase
from tensordict.nn import ProbabilisticTensorDictSequential, TensorDictModuleBase, dispatch

from torchrl._keys import ACTION
from torchrl._types import NestedKey
from torchrl.objectives._helpers import (
    action_log_prob,
    check_loss_function,
    check_reduction,
    reduce_loss,
)
from torchrl.objectives.common import LossModule
from torchrl.objectives.utils import distance_loss

__all__ = ["BCLoss"]


class BCLoss(LossModule):
    """Behavioural cloning.

    A deterministic actor is regressed onto the data's actions
    (``loss_bc = d(pi(s), a)``, averaged over the action dims); a probabilistic actor (one
    with ``get_dist``) maximises their likelihood (``loss_bc = -log pi(a|s)``).

    Args:
        actor_network: the policy.
        loss_function: ``"l2"``, ``"l1"`` or ``"smooth_l1"`` (deterministic actors).
        probabilistic: force one of the two forms (default: probabilistic when the actor
            has ``get_dist``).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from torchrl.modules import Actor
        >>> loss = BCLoss(Actor(nn.Linear(3, 2)))
        >>> loss(observation=torch.randn(4, 3), action=torch.randn(4, 2)).shape
        torch.Size([])
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read by :class:`BCLoss`."""

        action: NestedKey = ACTION

    default_keys = _AcceptedKeys
    out_keys = ["loss_bc"]

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        *,
        loss_function: str = "l2",
        probabilistic: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        if probabilistic is None:
            probabilistic = hasattr(actor_network, "get_dist")
        elif probabilistic and not hasattr(actor_network, "get_dist"):
            raise TypeError(
                "BCLoss: probabilistic=True needs an actor with get_dist(), got "
                f"{type(actor_network).__name__}"
            )
        self.probabilistic = probabilistic
        self.convert_to_functional(actor_network, "actor_network")
        keys = list(getattr(actor_network, "dist_sample_keys", None) or [])
        keys = keys or list(getattr(actor_network, "out_keys", None) or [ACTION])
        self._tensor_keys.action = keys[0]
        self.loss_function = check_loss_function(loss_function)
        self.reduction = check_reduction(reduction)
        self.out_keys = ["loss_bc"]
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        return [*self.actor_network.in_keys, self.tensor_keys.action]

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes ``loss_bc``.

        Args:
            tensordict: a batch ``[*B]`` with the actor's inputs and the data's actions.

        Returns:
            A TensorDict with ``loss_bc``.
        """
        key = self.tensor_keys.action
        self._check_inputs(tensordict)
        inputs = tensordict.select(*self.actor_network.in_keys, strict=False)
        if self.probabilistic:
            # ``probabilistic`` says the actor has get_dist (checked when the loss was made).
            dist = cast(ProbabilisticTensorDictSequential, self.actor_network).get_dist(inputs)
            loss = -action_log_prob(dist, tensordict, key)
        else:
            target = tensordict.get(key)
            pred = self.actor_network(inputs).get(key)
            if pred.shape != target.shape:
                raise ValueError(
                    f"BCLoss: the actor wrote {key!r} of shape {tuple(pred.shape)} but the data's "
                    f"actions have shape {tuple(target.shape)}"
                )
            loss = distance_loss(pred, target.to(pred.dtype), self.loss_function)
            if loss.ndim > tensordict.batch_dims:
                loss = loss.flatten(tensordict.batch_dims).mean(-1)
        return TensorDict({"loss_bc": reduce_loss(loss, self.reduction)}, batch_size=[])
