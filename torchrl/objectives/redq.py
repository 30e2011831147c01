"""Randomized ensembled double Q-learning loss (REDQ, Chen et al., 2021)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, dispatch

from torchrl._keys import NEXT
from torchrl._types import NestedKey
from torchrl.objectives._helpers import soft_actor_critic_terms, write_priority
from torchrl.objectives.common import ParamSet
from torchrl.objectives.sac import SACLoss
from torchrl.objectives.utils import distance_loss

if TYPE_CHECKING:
    from torchrl.data.specs import TensorSpec

__all__ = ["REDQLoss"]


class REDQLoss(SACLoss):
    """REDQ: SAC with a large critic ensemble and a random subset in the target.

    ``y = r + gamma (1 - terminated) (min_{i in M} Q_target_i(s', a') - alpha log pi(a'|s'))``
    with ``M`` a random subset of ``sub_sample_len`` critics drawn at each call;
    ``loss_qvalue = sum_i d(Q_i(s, a), y)`` over all critics;
    ``loss_actor = alpha log pi(a~|s) - mean_i Q_i(s, a~)`` (critics detached);
    ``loss_alpha`` as in :class:`~torchrl.objectives.SACLoss`.

    Args:
        actor_network: a probabilistic actor with a reparameterisable distribution.
        qvalue_network: reads the observation and ``"action"``, writes
            ``"state_action_value"``; copied into ``num_qvalue_nets`` critics.
        num_qvalue_nets: ensemble size ``N`` (10 in the paper).
        sub_sample_len: subset size ``M`` (2 in the paper).
        loss_function: ``"smooth_l1"``, ``"l2"`` or ``"l1"``.
        alpha_init: initial temperature.
        min_alpha: lower clamp of alpha.
        max_alpha: upper clamp of alpha.
        action_spec: the action spec (for ``target_entropy="auto"``).
        fixed_alpha: keep alpha constant.
        target_entropy: a number or ``"auto"`` (``-action_dim``).
        delay_qvalue: keep target critic parameters.
        priority_key: where to write the TD error.
        separate_losses: unused.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        deactivate_vmap: loop over the critics instead of vmapping (always done for
            two critics on CPU, where it is faster). Critics made of a plain ``MLP`` skip
            both: their members run stacked, one batched matmul per layer.

    Examples:
        >>> from tensordict.nn import TensorDictModule, NormalParamExtractor
        >>> from torch import nn
        >>> from torchrl.modules import ProbabilisticActor, ValueOperator, TanhNormal, MLP
        >>> actor = ProbabilisticActor(TensorDictModule(nn.Sequential(nn.Linear(3, 2),
        ...     NormalParamExtractor()), ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"], distribution_class=TanhNormal)
        >>> qvalue = ValueOperator(MLP(in_features=4, out_features=1, depth=1),
        ...                        in_keys=["observation", "action"])
        >>> loss = REDQLoss(actor, qvalue, num_qvalue_nets=5, target_entropy=-1.0)
        >>> loss.qvalue_network_params.batch_size
        torch.Size([5])
    """

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        *,
        num_qvalue_nets: int = 10,
        sub_sample_len: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = 0.1,
        max_alpha: float | None = 10.0,
        action_spec: TensorSpec | None = None,
        fixed_alpha: bool = False,
        target_entropy: str | float = "auto",
        delay_qvalue: bool = True,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str = "mean",
        deactivate_vmap: bool = False,
    ) -> None:
        if not 1 <= sub_sample_len <= num_qvalue_nets:
            raise ValueError(
                f"REDQLoss: need 1 <= sub_sample_len <= num_qvalue_nets, got {sub_sample_len} "
                f"and {num_qvalue_nets}"
            )
        super().__init__(
            actor_network,
            qvalue_network,
            None,
            num_qvalue_nets=num_qvalue_nets,
            loss_function=loss_function,
            alpha_init=alpha_init,
            min_alpha=min_alpha,
            max_alpha=max_alpha,
            action_spec=action_spec,
            fixed_alpha=fixed_alpha,
            target_entropy=target_entropy,
            delay_qvalue=delay_qvalue,
            priority_key=priority_key,
            separate_losses=separate_losses,
            reduction=reduction,
            deactivate_vmap=deactivate_vmap,
        )
        self.sub_sample_len = sub_sample_len

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes the REDQ loss terms.

        Args:
            tensordict: a batch ``[*B]`` with the observation (root and ``"next"``), the action
                and ``("next", "reward"/"done"/"terminated")`` (``[*B, 1]``).

        Returns:
            A TensorDict with ``loss_actor``, ``loss_qvalue``, ``loss_alpha`` and the detached
            ``alpha`` and ``entropy``.
        """
        self._check_inputs(tensordict)
        alpha = self.alpha
        acted, log_prob = self._sample(tensordict, ParamSet.ONLINE)
        self._check_action(tensordict, acted)
        loss_actor = alpha * log_prob - self._q(acted, ParamSet.DETACHED).mean(0)

        with torch.no_grad():
            next_acted, next_log_prob = self._sample(tensordict.get(NEXT), ParamSet.ONLINE)
            subset = torch.randperm(self.num_qvalue_nets)[: self.sub_sample_len]
            tensors = self.network_tensors("qvalue_network", ParamSet.TARGET)
            device = tensors[0].device
            chosen = [t[subset.to(device)] for t in tensors]
            key = self.tensor_keys.state_action_value
            next_q = self._call_ensemble("qvalue_network", next_acted, [key], tensors=chosen)[0]
            next_value = next_q.min(0).values - alpha * next_log_prob
            target = self.value_estimator.value_estimate(tensordict, next_value=next_value)
        pred = self._q(tensordict, ParamSet.ONLINE)
        loss_qvalue = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        write_priority(tensordict, self.tensor_keys.priority, pred, target, ensemble=True)
        return soft_actor_critic_terms(self, loss_actor, loss_qvalue, log_prob, alpha)
