"""Soft actor-critic losses (Haarnoja et al., 2018; Christodoulou, 2019 for discrete actions)."""

from __future__ import annotations

import dataclasses
import math
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
    SAMPLE_LOG_PROB,
    STATE_ACTION_VALUE,
    STATE_VALUE,
    TERMINATED,
)
from torchrl._types import NestedKey
from torchrl.objectives._helpers import (
    alpha_loss,
    check_action_shape,
    check_loss_function,
    check_probabilistic_actor,
    check_reduction,
    clamped_alpha,
    ensemble_distance,
    gather_action_values,
    reduce_loss,
    register_log_alpha,
    resolve_action_space,
    resolve_target_entropy,
    rsample_and_log_prob,
    write_priority,
)
from torchrl.objectives.common import LossModule, ParamSet, actor_dist, loss_output, next_key
from torchrl.objectives.utils import ValueEstimators, distance_loss

if TYPE_CHECKING:
    from torchrl.data.specs import TensorSpec

__all__ = ["DiscreteSACLoss", "SACLoss"]

_TD_ESTIMATORS = (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)


class SACLoss(LossModule):
    """Soft actor-critic, with (v1) or without (v2) a state-value network.

    With ``a~ ~ pi(.|s)`` (reparameterised) and ``alpha = exp(log_alpha)``:

    - ``loss_actor = alpha * log pi(a~|s) - min_i Q_i(s, a~)`` (critics detached);
    - v2: ``loss_qvalue = sum_i d(Q_i(s, a), y)``, ``y = r + gamma (1 - terminated)
      (min_i Q_target_i(s', a') - alpha log pi(a'|s'))``, ``a' ~ pi(.|s')``;
    - v1: ``y = r + gamma (1 - terminated) V_target(s')`` and
      ``loss_value = d(V(s), min_i Q_i(s, a~) - alpha log pi(a~|s))`` (target detached);
    - ``loss_alpha = -log_alpha * (log pi(a~|s) + target_entropy)`` (zero with
      ``fixed_alpha``).

    Args:
        actor_network: a probabilistic actor with a reparameterisable distribution
            (e.g. ``TanhNormal``).
        qvalue_network: reads the observation and ``"action"``, writes
            ``"state_action_value"``; copied into an ensemble of ``num_qvalue_nets``.
        value_network: a state-value network for SAC v1 (``None``: v2).
        num_qvalue_nets: number of critics.
        loss_function: ``"smooth_l1"``, ``"l2"`` or ``"l1"``.
        alpha_init: initial entropy temperature.
        min_alpha: lower clamp of alpha.
        max_alpha: upper clamp of alpha.
        action_spec: the action spec (for ``target_entropy="auto"``).
        fixed_alpha: keep alpha constant.
        target_entropy: a number, or ``"auto"`` for ``-action_dim``.
        delay_actor: sample the next actions with target actor parameters.
        delay_qvalue: keep target critic parameters.
        delay_value: keep target value parameters (v1).
        priority_key: where to write the TD error.
        separate_losses: unused (the actor loss never updates the critics).
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
        >>> loss = SACLoss(actor, qvalue, target_entropy=-1.0)
        >>> out = loss(observation=torch.randn(5, 3), action=torch.rand(5, 1),
        ...     next_observation=torch.randn(5, 3), next_reward=torch.randn(5, 1),
        ...     next_done=torch.zeros(5, 1, dtype=torch.bool),
        ...     next_terminated=torch.zeros(5, 1, dtype=torch.bool))
        >>> loss.out_keys
        ['loss_actor', 'loss_qvalue', 'loss_alpha', 'alpha', 'entropy']
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by :class:`SACLoss`."""

        action: NestedKey = ACTION
        value: NestedKey = STATE_VALUE
        state_action_value: NestedKey = STATE_ACTION_VALUE
        log_prob: NestedKey = SAMPLE_LOG_PROB
        priority: NestedKey = PRIORITY
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED

    default_keys = _AcceptedKeys
    actor_network: ProbabilisticTensorDictSequential
    default_value_estimator = ValueEstimators.TD0
    _supported_estimators = _TD_ESTIMATORS
    log_alpha: Tensor
    fixed_alpha: bool
    min_log_alpha: float | None
    max_log_alpha: float | None

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        value_network: TensorDictModuleBase | None = None,
        *,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: TensorSpec | None = None,
        fixed_alpha: bool = False,
        target_entropy: str | float = "auto",
        delay_actor: bool = False,
        delay_qvalue: bool = True,
        delay_value: bool = True,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str = "mean",
        deactivate_vmap: bool = False,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        check_probabilistic_actor(name, actor_network)
        sample_keys = list(getattr(actor_network, "dist_sample_keys", None) or [ACTION])
        self._tensor_keys.action = sample_keys[0]
        self.convert_to_functional(actor_network, "actor_network", create_target_params=delay_actor)
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            expand_dim=num_qvalue_nets,
            create_target_params=delay_qvalue,
        )
        if value_network is not None:
            self.convert_to_functional(
                value_network, "value_network", create_target_params=delay_value
            )
            self._adopt_out_key("value", value_network)
        else:
            self.value_network = None
        self._adopt_out_key("state_action_value", qvalue_network)
        if priority_key is not None:
            self._tensor_keys.priority = priority_key
        self.num_qvalue_nets = num_qvalue_nets
        self.delay_actor = delay_actor
        self.loss_function = check_loss_function(loss_function)
        self.reduction = check_reduction(reduction)
        self.deactivate_vmap = deactivate_vmap
        register_log_alpha(self, alpha_init, fixed_alpha, min_alpha, max_alpha)
        self.target_entropy = resolve_target_entropy(
            name, target_entropy, action_spec, actor_network, sample_keys[0], fixed_alpha
        )
        self.out_keys = ["loss_actor", "loss_qvalue"]
        if value_network is not None:
            self.out_keys.append("loss_value")
        self.out_keys += ["loss_alpha", "alpha", "entropy"]
        self._refresh_keys()

    @property
    def alpha(self) -> Tensor:
        """The entropy temperature ``exp(log_alpha)`` (clamped, detached)."""
        return clamped_alpha(self)

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        return [
            *self._net_in_keys(self.actor_network),
            *self._net_in_keys(self.qvalue_network, with_next=False),
            keys.action,
            *self._net_in_keys(self.value_network),
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    # ---- pieces ------------------------------------------------------------------------------

    def _sample(
        self, tensordict: TensorDictBase, param_set: ParamSet
    ) -> tuple[TensorDictBase, Tensor]:
        """Draws ``a ~ pi(.|s)``; returns (inputs with the action, ``log pi(a|s)`` ``[*B, 1]``)."""
        inputs = tensordict.select(*self.actor_network.in_keys, strict=False)
        if param_set is ParamSet.ONLINE:
            dist = actor_dist(self.actor_network, inputs, write=False)
        else:
            tensors = self.network_tensors("actor_network", param_set)
            with self.using_tensors("actor_network", tensors):
                dist = actor_dist(self.actor_network, inputs, write=False)
        action, log_prob = rsample_and_log_prob(dist)
        inputs.set(self.tensor_keys.action, action)
        return inputs, log_prob.unsqueeze(-1)

    def _check_action(self, tensordict: TensorDictBase, acted: TensorDictBase) -> None:
        key = self.tensor_keys.action
        check_action_shape(type(self).__name__, key, tensordict.get(key), acted.get(key))

    def _q(self, tensordict: TensorDictBase, param_set: ParamSet, minimum: bool = False) -> Tensor:
        """``[n_critics, *B, 1]`` action values (their minimum ``[*B, 1]`` with ``minimum``)."""
        key = self.tensor_keys.state_action_value
        (values,) = self._call_ensemble(
            "qvalue_network", tensordict, [key], param_set, minimum=minimum
        )
        return values

    def _value(self, tensordict: TensorDictBase, param_set: ParamSet) -> Tensor:
        in_keys = self._net_in_keys(self.value_network, with_next=False)
        inputs = tensordict.select(*in_keys, strict=False)
        return self._call_network("value_network", inputs, param_set).get(self.tensor_keys.value)

    def _next_value(self, tensordict: TensorDictBase, alpha: Tensor) -> Tensor:
        next_td = tensordict.get(NEXT)
        if self.value_network is not None:
            return self._value(next_td, ParamSet.TARGET)
        acted, log_prob = self._sample(
            next_td, ParamSet.TARGET if self.delay_actor else ParamSet.ONLINE
        )
        return self._q(acted, ParamSet.TARGET, minimum=True) - alpha * log_prob

    # ---- forward -----------------------------------------------------------------------------

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes the SAC loss terms.

        Args:
            tensordict: a batch ``[*B]`` with the observation (root and ``"next"``), the action
                and ``("next", "reward"/"done"/"terminated")`` (``[*B, 1]``).

        Returns:
            A TensorDict with ``loss_actor``, ``loss_qvalue`` (``loss_value`` for v1),
            ``loss_alpha`` and the detached ``alpha`` and ``entropy``.
        """
        self._check_inputs(tensordict)
        alpha = self.alpha
        acted, log_prob = self._sample(tensordict, ParamSet.ONLINE)
        self._check_action(tensordict, acted)
        min_q_pi = self._q(acted, ParamSet.DETACHED, minimum=True)  # [*B, 1]
        loss_actor = alpha * log_prob - min_q_pi

        with torch.no_grad():
            next_value = self._next_value(tensordict, alpha)
            target = self.value_estimator.value_estimate(tensordict, next_value=next_value)
        pred = self._q(tensordict, ParamSet.ONLINE)  # [n, *B, 1]
        loss_qvalue = ensemble_distance(pred, target, self.loss_function, self.reduction)
        write_priority(tensordict, self.tensor_keys.priority, pred, target, ensemble=True)

        out = {
            "loss_actor": reduce_loss(loss_actor, self.reduction),
            "loss_qvalue": loss_qvalue,
        }
        if self.value_network is not None:
            value = self._value(tensordict, ParamSet.ONLINE)
            value_target = (min_q_pi - alpha * log_prob).detach()
            loss_value = distance_loss(value, value_target, self.loss_function)
            out["loss_value"] = reduce_loss(loss_value, self.reduction)
        out["loss_alpha"] = reduce_loss(alpha_loss(self, log_prob), self.reduction)
        out["alpha"] = alpha
        out["entropy"] = -log_prob.detach().mean()
        return loss_output(out)


class DiscreteSACLoss(LossModule):
    """Soft actor-critic for discrete actions: expectations over actions replace sampling.

    With ``p = pi(.|s)`` and ``Q_min = min_i Q_i(s, .)`` (``[*B, n]``):
    ``loss_actor = sum_a p(a) (alpha log p(a) - Q_min(a))``;
    ``y = r + gamma (1 - terminated) sum_a p'(a) (min_i Q_target_i(s', a) - alpha log p'(a))``;
    ``loss_qvalue = sum_i d(Q_i(s, a), y)``;
    ``loss_alpha = log_alpha * (H(p) - target_entropy)`` with ``H(p)`` detached.

    Args:
        actor_network: a probabilistic actor with a categorical (or one-hot) distribution.
        qvalue_network: reads the observation, writes ``"action_value"`` (``[*B, n]``).
        action_space: ``"one_hot"`` or ``"categorical"`` (or a spec) for the stored actions.
        num_actions: number of actions (for ``target_entropy="auto"``; read from the critic's
            output otherwise).
        num_qvalue_nets: number of critics.
        loss_function: ``"smooth_l1"``, ``"l2"`` or ``"l1"``.
        alpha_init: initial temperature.
        min_alpha: lower clamp of alpha.
        max_alpha: upper clamp of alpha.
        fixed_alpha: keep alpha constant.
        target_entropy_weight: ``"auto"`` target entropy is this fraction of ``log(n)``.
        target_entropy: a number or ``"auto"``.
        delay_qvalue: keep target critic parameters.
        priority_key: where to write the TD error.
        separate_losses: unused.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        deactivate_vmap: loop over the critics instead of vmapping (always done for
            two critics on CPU, where it is faster). Critics made of a plain ``MLP`` skip
            both: their members run stacked, one batched matmul per layer.

    Examples:
        >>> from tensordict.nn import TensorDictModule
        >>> from torch import nn
        >>> from torchrl.modules import ProbabilisticActor, OneHotCategorical
        >>> actor = ProbabilisticActor(TensorDictModule(nn.Linear(3, 4), ["observation"],
        ...     ["logits"]), in_keys=["logits"], distribution_class=OneHotCategorical)
        >>> qvalue = TensorDictModule(nn.Linear(3, 4), ["observation"], ["action_value"])
        >>> loss = DiscreteSACLoss(actor, qvalue, action_space="one_hot", num_actions=4)
        >>> out = loss(observation=torch.randn(5, 3),
        ...     action=nn.functional.one_hot(torch.randint(4, (5,)), 4),
        ...     next_observation=torch.randn(5, 3), next_reward=torch.randn(5, 1),
        ...     next_done=torch.zeros(5, 1, dtype=torch.bool),
        ...     next_terminated=torch.zeros(5, 1, dtype=torch.bool))
        >>> round(loss.target_entropy, 4)  # 0.98 * log(4)
        1.3586
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by :class:`DiscreteSACLoss`."""

        action: NestedKey = ACTION
        action_value: NestedKey = ACTION_VALUE
        priority: NestedKey = PRIORITY
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED

    default_keys = _AcceptedKeys
    actor_network: ProbabilisticTensorDictSequential
    default_value_estimator = ValueEstimators.TD0
    _supported_estimators = _TD_ESTIMATORS
    log_alpha: Tensor
    fixed_alpha: bool
    min_log_alpha: float | None
    max_log_alpha: float | None

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        *,
        action_space: str | TensorSpec | None = None,
        num_actions: int | None = None,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        fixed_alpha: bool = False,
        target_entropy_weight: float = 0.98,
        target_entropy: str | float = "auto",
        delay_qvalue: bool = True,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str = "mean",
        deactivate_vmap: bool = False,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        check_probabilistic_actor(name, actor_network)
        self.action_space = resolve_action_space(name, action_space, actor_network)
        sample_keys = list(getattr(actor_network, "dist_sample_keys", None) or [ACTION])
        self._tensor_keys.action = sample_keys[0]
        self.convert_to_functional(actor_network, "actor_network")
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            expand_dim=num_qvalue_nets,
            create_target_params=delay_qvalue,
        )
        self._adopt_out_key("action_value", qvalue_network)
        if priority_key is not None:
            self._tensor_keys.priority = priority_key
        self.num_qvalue_nets = num_qvalue_nets
        self.loss_function = check_loss_function(loss_function)
        self.reduction = check_reduction(reduction)
        self.deactivate_vmap = deactivate_vmap
        self.target_entropy_weight = float(target_entropy_weight)
        register_log_alpha(self, alpha_init, fixed_alpha, min_alpha, max_alpha)
        self._auto_entropy = target_entropy == "auto"
        self.target_entropy = (
            self._auto_target(num_actions)
            if self._auto_entropy and num_actions is not None
            else (0.0 if self._auto_entropy else float(target_entropy))
        )
        self._target_known = not self._auto_entropy or num_actions is not None
        self.out_keys = ["loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"]
        self._refresh_keys()

    def _auto_target(self, num_actions: int) -> float:
        return self.target_entropy_weight * math.log(num_actions)

    @property
    def alpha(self) -> Tensor:
        """The entropy temperature ``exp(log_alpha)`` (clamped, detached)."""
        return clamped_alpha(self)

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        return [
            *self._net_in_keys(self.actor_network),
            *self._net_in_keys(self.qvalue_network),
            keys.action,
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    def _policy(self, tensordict: TensorDictBase) -> tuple[Tensor, Tensor]:
        """``(probs, log_probs)`` over the actions, ``[*B, n]``; masked actions get 0 / 0."""
        inputs = tensordict.select(*self.actor_network.in_keys, strict=False)
        # A categorical policy (OneHotCategorical, Categorical, MaskedCategorical): its logits.
        dist: Any = self.actor_network.get_dist(inputs)
        logits = dist.logits
        log_probs = logits - logits.logsumexp(-1, keepdim=True)
        probs = log_probs.exp()
        # 0 * log(0) is 0 for actions that cannot be taken (masked logits are -inf).
        log_probs = torch.where(probs > 0, log_probs, torch.zeros_like(log_probs))
        return probs, log_probs

    def _q(self, tensordict: TensorDictBase, param_set: ParamSet, minimum: bool = False) -> Tensor:
        """``[n_critics, *B, n_actions]`` action values (their minimum with ``minimum``)."""
        key = self.tensor_keys.action_value
        (values,) = self._call_ensemble(
            "qvalue_network", tensordict, [key], param_set, minimum=minimum
        )
        return values

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes the discrete SAC loss terms.

        Args:
            tensordict: a batch ``[*B]`` with the observation (root and ``"next"``), the action
                and ``("next", "reward"/"done"/"terminated")`` (``[*B, 1]``).

        Returns:
            A TensorDict with ``loss_actor``, ``loss_qvalue``, ``loss_alpha`` and the detached
            ``alpha`` and ``entropy``.
        """
        keys = self.tensor_keys
        self._check_inputs(tensordict)
        alpha = self.alpha
        probs, log_probs = self._policy(tensordict)
        q_all = self._q(tensordict, ParamSet.ONLINE)  # [n_nets, *B, n]
        if not self._target_known:
            self.target_entropy = self._auto_target(q_all.shape[-1])
            self._target_known = True
        min_q = q_all.detach().min(0).values
        loss_actor = (probs * (alpha * log_probs - min_q)).sum(-1, keepdim=True)
        entropy = -(probs * log_probs).sum(-1, keepdim=True)

        with torch.no_grad():
            next_probs, next_log_probs = self._policy(tensordict.get(NEXT))
            next_q = self._q(tensordict.get(NEXT), ParamSet.TARGET, minimum=True)
            next_value = (next_probs * (next_q - alpha * next_log_probs)).sum(-1, keepdim=True)
            target = self.value_estimator.value_estimate(tensordict, next_value=next_value)
        action = tensordict.get(keys.action)
        action = action.expand(q_all.shape[0], *action.shape)
        pred = gather_action_values(q_all, action, self.action_space, type(self).__name__)
        loss_qvalue = ensemble_distance(pred, target, self.loss_function, self.reduction)
        write_priority(tensordict, keys.priority, pred, target, ensemble=True)
        return TensorDict(
            {
                "loss_actor": reduce_loss(loss_actor, self.reduction),
                "loss_qvalue": loss_qvalue,
                "loss_alpha": reduce_loss(alpha_loss(self, -entropy), self.reduction),
                "alpha": alpha,
                "entropy": entropy.detach().mean(),
            },
            batch_size=[],
        )
