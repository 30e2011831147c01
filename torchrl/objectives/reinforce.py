"""REINFORCE with an optional learned baseline (Williams, 1992)."""

from __future__ import annotations

import dataclasses

from tensordict import TensorDict, TensorDictBase
from tensordict.nn import ProbabilisticTensorDictSequential, TensorDictModuleBase, dispatch
from torch import Tensor, nn

from torchrl._keys import (
    ACTION,
    ACTION_LOG_PROB,
    ADVANTAGE,
    DONE,
    REWARD,
    STATE_VALUE,
    TERMINATED,
    VALUE_TARGET,
)
from torchrl._types import NestedKey
from torchrl.objectives._helpers import (
    action_log_prob,
    as_batch,
    check_loss_function,
    check_reduction,
    critic_value_loss,
    reduce_loss,
)
from torchrl.objectives.common import LossModule, next_key
from torchrl.objectives.utils import ValueEstimators

__all__ = ["ReinforceLoss"]


class ReinforceLoss(LossModule):
    """REINFORCE: ``loss_actor = -E[log pi(a|s) A]`` and ``loss_value = d(V(s), value_target)``.

    ``A`` is read at ``"advantage"`` or computed by the value estimator (GAE by default; use
    ``make_value_estimator(ValueEstimators.TD1)`` for Monte-Carlo returns minus a baseline).

    Args:
        actor_network: a probabilistic actor (``get_dist``).
        critic_network: a state-value network (the baseline); optional when the data carries
            ``"advantage"``.
        delay_value: evaluate ``V(s')`` with target parameters (updated by
            :class:`~torchrl.objectives.SoftUpdate`/``HardUpdate``).
        loss_critic_type: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.
        separate_losses: keep the value loss from updating parameters shared with the actor.
        clip_value: clip the new value around the stored one in the value loss.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        functional: unused (TorchRL compatibility).

    Examples:
        >>> from tensordict.nn import TensorDictModule
        >>> from torch import nn
        >>> import torch
        >>> from torchrl.modules import ProbabilisticActor, OneHotCategorical
        >>> actor = ProbabilisticActor(TensorDictModule(nn.Linear(3, 2), ["observation"],
        ...     ["logits"]), in_keys=["logits"], distribution_class=OneHotCategorical)
        >>> td = TensorDict({"observation": torch.randn(6, 3), "advantage": torch.randn(6, 1),
        ...     "action": nn.functional.one_hot(torch.randint(2, (6,)), 2)}, [6])
        >>> ReinforceLoss(actor)(td)["loss_actor"].shape
        torch.Size([])
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by :class:`ReinforceLoss`."""

        advantage: NestedKey = ADVANTAGE
        value_target: NestedKey = VALUE_TARGET
        value: NestedKey = STATE_VALUE
        sample_log_prob: NestedKey = ACTION_LOG_PROB
        action: NestedKey = ACTION
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED

    default_keys = _AcceptedKeys
    actor_network: ProbabilisticTensorDictSequential
    default_value_estimator = ValueEstimators.GAE
    _supported_estimators = tuple(ValueEstimators)

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        critic_network: TensorDictModuleBase | None = None,
        *,
        delay_value: bool = False,
        loss_critic_type: str = "smooth_l1",
        separate_losses: bool = False,
        clip_value: float | None = None,
        reduction: str = "mean",
        functional: bool = True,
    ) -> None:
        super().__init__()
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                "ReinforceLoss: actor_network must be a probabilistic actor with get_dist(), "
                f"got {type(actor_network).__name__}"
            )
        self.convert_to_functional(actor_network, "actor_network")
        if critic_network is not None:
            self.convert_to_functional(
                critic_network, "critic_network", create_target_params=delay_value
            )
            self._adopt_out_key("value", critic_network)
        else:
            self.critic_network = None
        self.delay_value = delay_value and critic_network is not None
        self.loss_critic_type = check_loss_function(loss_critic_type)
        self.separate_losses = separate_losses
        self.clip_value = None if clip_value is None else float(clip_value)
        self.reduction = check_reduction(reduction)
        self.out_keys = ["loss_actor"] + (["loss_value"] if critic_network is not None else [])
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        return [
            *self.actor_network.in_keys,
            keys.action,
            *self._net_in_keys(self.critic_network),
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    def _compute_required_keys(self) -> list[NestedKey]:
        return [*self.actor_network.in_keys, self.tensor_keys.action]

    def _compute_estimator_keys(self) -> list[NestedKey]:
        return self._value_target_keys(self.critic_network)

    def _estimator_value_network(self) -> nn.Module | None:
        return self.critic_network

    def _estimator_actor_network(self) -> nn.Module | None:
        return self.actor_network

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes ``loss_actor`` (and ``loss_value`` with a critic).

        Args:
            tensordict: data ``[*B, T]`` with the actor inputs, the actions and either
                ``"advantage"`` or what the value estimator reads.

        Returns:
            A TensorDict of loss terms.
        """
        keys = self.tensor_keys
        self._check_inputs(tensordict)
        adv = tensordict.get(keys.advantage, None)
        if adv is None:
            if self.critic_network is None:
                raise KeyError(
                    f"ReinforceLoss: the input has no {keys.advantage!r} entry and the loss has "
                    "no critic to compute it"
                )
            target = (
                self.network_params("critic_network", target=True) if self.delay_value else None
            )
            self._check_estimator_inputs(tensordict)
            self.value_estimator(tensordict, target_params=target)
            adv = tensordict.get(keys.advantage)
        dist = self.actor_network.get_dist(tensordict.copy())
        log_prob = action_log_prob(dist, tensordict, keys.action)
        adv = adv.detach()
        adv = as_batch(adv, log_prob, "the advantage", "ReinforceLoss")
        out: dict[str, Tensor] = {"loss_actor": reduce_loss(-(log_prob * adv), self.reduction)}
        if self.critic_network is not None:
            loss, _ = critic_value_loss(
                self,
                tensordict,
                "critic_network",
                self.loss_critic_type,
                self.clip_value,
                "actor_network" if self.separate_losses else None,
                self.reduction,
            )
            out["loss_value"] = loss
        return TensorDict(out, batch_size=[])
