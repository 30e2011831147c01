"""Implicit Q-learning losses for offline RL (Kostrikov et al., 2022)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import ProbabilisticTensorDictSequential, TensorDictModuleBase, dispatch
from torch import Tensor

from torchrl._keys import (
    ACTION,
    ACTION_VALUE,
    DONE,
    NEXT,
    PRIORITY,
    REWARD,
    STATE_ACTION_VALUE,
    STATE_VALUE,
    TERMINATED,
)
from torchrl._types import NestedKey
from torchrl.objectives._helpers import (
    action_log_prob,
    check_loss_function,
    check_probabilistic_actor,
    check_reduction,
    ensemble_distance,
    gather_action_values,
    reduce_loss,
    resolve_action_space,
    write_priority,
)
from torchrl.objectives.common import LossModule, ParamSet, next_key
from torchrl.objectives.utils import ValueEstimators

if TYPE_CHECKING:
    from torchrl.data.specs import TensorSpec

__all__ = ["DiscreteIQLLoss", "IQLLoss"]


class IQLLoss(LossModule):
    """IQL: expectile value regression, TD critics and advantage-weighted regression.

    With ``q = min_i Q_target_i(s, a)`` on the data's actions:

    - ``loss_value = |expectile - 1(q < V(s))| (q - V(s))^2``;
    - ``loss_qvalue = sum_i d(Q_i(s, a), r + gamma (1 - terminated) V(s'))``;
    - ``loss_actor = -exp(temperature * (q - V(s))).clamp(max=100) * log pi(a|s)``.

    Args:
        actor_network: a probabilistic actor (``get_dist``).
        qvalue_network: reads the observation and ``"action"``, writes
            ``"state_action_value"``; copied into ``num_qvalue_nets`` critics (with targets).
        value_network: a state-value network writing ``"state_value"``.
        num_qvalue_nets: number of critics.
        loss_function: ``"smooth_l1"``, ``"l2"`` or ``"l1"`` for the critics.
        temperature: the inverse temperature ``beta`` of the advantage weights.
        expectile: ``tau`` of the expectile regression, in ``(0, 1)``.
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
        >>> value = ValueOperator(nn.Linear(3, 1))
        >>> loss = IQLLoss(actor, qvalue, value, expectile=0.7)
        >>> loss.out_keys
        ['loss_actor', 'loss_qvalue', 'loss_value', 'entropy']
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by :class:`IQLLoss`."""

        action: NestedKey = ACTION
        value: NestedKey = STATE_VALUE
        state_action_value: NestedKey = STATE_ACTION_VALUE
        priority: NestedKey = PRIORITY
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED

    default_keys: Any = _AcceptedKeys
    actor_network: ProbabilisticTensorDictSequential
    value_network: TensorDictModuleBase
    default_value_estimator = ValueEstimators.TD0
    _supported_estimators = (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        value_network: TensorDictModuleBase,
        *,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        temperature: float = 1.0,
        expectile: float = 0.5,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str = "mean",
        deactivate_vmap: bool = False,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        check_probabilistic_actor(name, actor_network)
        if not 0.0 < expectile < 1.0:
            raise ValueError(f"{name}: expectile must lie in (0, 1), got {expectile}")
        sample_keys = list(getattr(actor_network, "dist_sample_keys", None) or [ACTION])
        self._tensor_keys.action = sample_keys[0]
        self.convert_to_functional(actor_network, "actor_network")
        self.convert_to_functional(
            qvalue_network, "qvalue_network", expand_dim=num_qvalue_nets, create_target_params=True
        )
        self.convert_to_functional(value_network, "value_network")
        self._set_qvalue_key(qvalue_network)
        self._adopt_out_key("value", value_network)
        if priority_key is not None:
            self._tensor_keys.priority = priority_key
        self.num_qvalue_nets = num_qvalue_nets
        self.loss_function = check_loss_function(loss_function)
        self.temperature = float(temperature)
        self.expectile = float(expectile)
        self.reduction = check_reduction(reduction)
        self.deactivate_vmap = deactivate_vmap
        self.out_keys = ["loss_actor", "loss_qvalue", "loss_value", "entropy"]
        self._refresh_keys()

    def _set_qvalue_key(self, qvalue_network: TensorDictModuleBase) -> None:
        self._adopt_out_key("state_action_value", qvalue_network)

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        return [
            *self._net_in_keys(self.actor_network, with_next=False),
            *self._net_in_keys(self.qvalue_network, with_next=False),
            keys.action,
            *self._net_in_keys(self.value_network),
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    def _q_taken(self, tensordict: TensorDictBase, param_set: ParamSet) -> Tensor:
        """``[n_critics, *B, 1]`` values of the data's actions."""
        key = self.tensor_keys.state_action_value
        return self._call_ensemble("qvalue_network", tensordict, [key], param_set)[0]

    def _value(self, tensordict: TensorDictBase) -> Tensor:
        inputs = tensordict.select(*self.value_network.in_keys, strict=False)
        return self.value_network(inputs).get(self.tensor_keys.value)

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes the IQL loss terms.

        Args:
            tensordict: a batch ``[*B]`` with the observation (root and ``"next"``), the action
                and ``("next", "reward"/"done"/"terminated")`` (``[*B, 1]``).

        Returns:
            A TensorDict with ``loss_actor``, ``loss_qvalue``, ``loss_value`` and the detached
            ``entropy`` (``-log pi(a|s)`` of the data's actions, averaged).
        """
        keys = self.tensor_keys
        self._check_inputs(tensordict)
        with torch.no_grad():
            q_target = self._q_taken(tensordict, ParamSet.TARGET).min(0).values  # [*B, 1]
        value = self._value(tensordict)
        diff = q_target - value
        weight = (self.expectile - (diff < 0).to(diff.dtype)).abs()
        loss_value = weight * diff.pow(2)

        inputs = tensordict.select(*self.actor_network.in_keys, strict=False)
        dist = self.actor_network.get_dist(inputs)
        log_prob = action_log_prob(dist, tensordict, keys.action)  # [*B]
        with torch.no_grad():
            adv = (q_target - value.detach()).reshape(log_prob.shape)
            exp_adv = (adv * self.temperature).exp().clamp(max=100.0)
        loss_actor = -exp_adv * log_prob

        with torch.no_grad():
            next_value = self._value(tensordict.get(NEXT))
            target = self.value_estimator.value_estimate(tensordict, next_value=next_value)
        pred = self._q_taken(tensordict, ParamSet.ONLINE)
        loss_qvalue = ensemble_distance(pred, target, self.loss_function, self.reduction)
        write_priority(tensordict, keys.priority, pred, target, ensemble=True)
        return TensorDict(
            {
                "loss_actor": reduce_loss(loss_actor, self.reduction),
                "loss_qvalue": loss_qvalue,
                "loss_value": reduce_loss(loss_value, self.reduction),
                "entropy": -log_prob.detach().mean(),
            },
            batch_size=[],
        )


class DiscreteIQLLoss(IQLLoss):
    """IQL for discrete actions: the critics output ``"action_value"`` (``[*B, n]``).

    The value of the data's action is gathered from the critics' outputs; everything else is
    as in :class:`IQLLoss`.

    Args:
        actor_network: a probabilistic actor with a categorical (or one-hot) distribution.
        qvalue_network: reads the observation, writes ``"action_value"``.
        value_network: a state-value network.
        action_space: ``"one_hot"`` or ``"categorical"`` (or a spec).
        **kwargs: the other :class:`IQLLoss` arguments.

    Examples:
        >>> from tensordict.nn import TensorDictModule
        >>> from torch import nn
        >>> from torchrl.modules import ProbabilisticActor, OneHotCategorical, ValueOperator
        >>> actor = ProbabilisticActor(TensorDictModule(nn.Linear(3, 4), ["observation"],
        ...     ["logits"]), in_keys=["logits"], distribution_class=OneHotCategorical)
        >>> qvalue = TensorDictModule(nn.Linear(3, 4), ["observation"], ["action_value"])
        >>> loss = DiscreteIQLLoss(actor, qvalue, ValueOperator(nn.Linear(3, 1)),
        ...                        action_space="one_hot")
        >>> out = loss(observation=torch.randn(5, 3),
        ...     action=nn.functional.one_hot(torch.randint(4, (5,)), 4),
        ...     next_observation=torch.randn(5, 3), next_reward=torch.randn(5, 1),
        ...     next_done=torch.zeros(5, 1, dtype=torch.bool),
        ...     next_terminated=torch.zeros(5, 1, dtype=torch.bool))
        >>> len(out)
        4
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by :class:`DiscreteIQLLoss`."""

        action: NestedKey = ACTION
        value: NestedKey = STATE_VALUE
        action_value: NestedKey = ACTION_VALUE
        priority: NestedKey = PRIORITY
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED

    default_keys = _AcceptedKeys

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        value_network: TensorDictModuleBase,
        *,
        action_space: str | TensorSpec | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(actor_network, qvalue_network, value_network, **kwargs)
        self.action_space = resolve_action_space(type(self).__name__, action_space, actor_network)

    def _set_qvalue_key(self, qvalue_network: TensorDictModuleBase) -> None:
        self._adopt_out_key("action_value", qvalue_network)

    def _q_taken(self, tensordict: TensorDictBase, param_set: ParamSet) -> Tensor:
        keys = self.tensor_keys
        values = self._call_ensemble("qvalue_network", tensordict, [keys.action_value], param_set)[
            0
        ]
        action = tensordict.get(keys.action)
        action = action.expand(values.shape[0], *action.shape)
        return gather_action_values(values, action, self.action_space, type(self).__name__)
