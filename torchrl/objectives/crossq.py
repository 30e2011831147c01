"""CrossQ (Bhatt et al., 2024): soft actor-critic without target networks.

The critics carry batch (re)normalisation and are evaluated once on the current and next
state-action pairs together, so the normalisation statistics are those of the joint batch; the
bootstrap target is the next-state half of that same forward pass, with its gradient stopped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import ProbabilisticTensorDictSequential, TensorDictModuleBase, dispatch
from torch import Tensor, nn

from torchrl._keys import (
    ACTION,
    DONE,
    NEXT,
    PRIORITY,
    REWARD,
    SAMPLE_LOG_PROB,
    STATE_ACTION_VALUE,
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
    reduce_loss,
    register_log_alpha,
    resolve_target_entropy,
    rsample_and_log_prob,
    soft_actor_critic_terms,
    write_priority,
)
from torchrl.objectives.common import LossModule, ParamSet, next_key
from torchrl.objectives.utils import ValueEstimators, distance_loss

if TYPE_CHECKING:
    from torchrl.data.specs import TensorSpec

__all__ = ["CrossQLoss"]


@contextmanager
def _mode(module: nn.Module, training: bool) -> Iterator[None]:
    """Runs the block with ``module`` (and every sub-module) in train or eval mode, then restores."""
    previous = [(m, m.training) for m in module.modules()]
    module.train(training)
    try:
        yield
    finally:
        for m, flag in previous:
            m.training = flag


class CrossQLoss(LossModule):
    """CrossQ: SAC whose critics normalise the current and next batch jointly, without targets.

    With ``a~ ~ pi(.|s)`` (reparameterised), ``a' ~ pi(.|s')`` (actor in eval mode, no gradient)
    and ``alpha = exp(log_alpha)``, the critics run once, in train mode, on the concatenation
    ``[(s, a); (s', a')]``, giving ``Q_i(s, a)`` and ``Q_i(s', a')`` from shared batch statistics:

    - ``loss_qvalue = sum_i d(Q_i(s, a), y)``, ``y = r + gamma (1 - terminated)
      (min_i Q_i(s', a') - alpha log pi(a'|s'))`` with the gradient stopped on ``y``;
    - ``loss_actor = alpha * log pi(a~|s) - min_i Q_i(s, a~)`` (critics detached, eval mode:
      their running statistics);
    - ``loss_alpha = -log_alpha * (log pi(a~|s) + target_entropy)``.

    There are no target parameters (``target_network_names`` is empty): no ``SoftUpdate``.
    Give the critic :class:`~torchrl.modules.BatchRenorm1d` layers (e.g. ``MLP(...,
    norm_class=BatchRenorm1d)``); without normalisation this is SAC without target networks.

    Args:
        actor_network: a probabilistic actor with a reparameterisable distribution.
        qvalue_network: reads the observation and ``"action"``, writes
            ``"state_action_value"`` ``[*B, 1]``; copied into ``num_qvalue_nets`` critics.
        num_qvalue_nets: number of critics.
        loss_function: ``"smooth_l1"``, ``"l2"`` or ``"l1"``.
        alpha_init: initial entropy temperature.
        min_alpha: lower clamp of alpha.
        max_alpha: upper clamp of alpha.
        action_spec: the action spec (for ``target_entropy="auto"``).
        fixed_alpha: keep alpha constant.
        target_entropy: a number, or ``"auto"`` for ``-action_dim``.
        priority_key: where to write the TD error.
        separate_losses: unused (the actor loss never updates the critics).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        deactivate_vmap: loop over the critics instead of vmapping.

    Examples:
        >>> from tensordict.nn import TensorDictModule, NormalParamExtractor
        >>> from torch import nn
        >>> from torchrl.modules import (BatchRenorm1d, MLP, ProbabilisticActor, TanhNormal,
        ...     ValueOperator)
        >>> actor = ProbabilisticActor(TensorDictModule(nn.Sequential(nn.Linear(3, 2),
        ...     NormalParamExtractor()), ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"], distribution_class=TanhNormal)
        >>> qvalue = ValueOperator(MLP(in_features=4, out_features=1, num_cells=[8],
        ...     norm_class=BatchRenorm1d, norm_kwargs={"num_features": 8}),
        ...     in_keys=["observation", "action"])
        >>> loss = CrossQLoss(actor, qvalue, target_entropy=-1.0)
        >>> out = loss(observation=torch.randn(5, 3), action=torch.rand(5, 1),
        ...     next_observation=torch.randn(5, 3), next_reward=torch.randn(5, 1),
        ...     next_done=torch.zeros(5, 1, dtype=torch.bool),
        ...     next_terminated=torch.zeros(5, 1, dtype=torch.bool))
        >>> loss.out_keys, loss.target_network_names
        (['loss_actor', 'loss_qvalue', 'loss_alpha', 'alpha', 'entropy'], [])
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by :class:`CrossQLoss`."""

        action: NestedKey = ACTION
        state_action_value: NestedKey = STATE_ACTION_VALUE
        log_prob: NestedKey = SAMPLE_LOG_PROB
        priority: NestedKey = PRIORITY
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED

    default_keys = _AcceptedKeys
    actor_network: ProbabilisticTensorDictSequential
    default_value_estimator = ValueEstimators.TD0
    _supported_estimators = (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)
    log_alpha: Tensor
    fixed_alpha: bool
    min_log_alpha: float | None
    max_log_alpha: float | None

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        *,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: TensorSpec | None = None,
        fixed_alpha: bool = False,
        target_entropy: str | float = "auto",
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
        self.convert_to_functional(actor_network, "actor_network")
        self.convert_to_functional(qvalue_network, "qvalue_network", expand_dim=num_qvalue_nets)
        self._adopt_out_key("state_action_value", qvalue_network)
        if priority_key is not None:
            self._tensor_keys.priority = priority_key
        self.num_qvalue_nets = num_qvalue_nets
        self.loss_function = check_loss_function(loss_function)
        self.reduction = check_reduction(reduction)
        self.deactivate_vmap = deactivate_vmap
        register_log_alpha(self, alpha_init, fixed_alpha, min_alpha, max_alpha)
        self.target_entropy = resolve_target_entropy(
            name, target_entropy, action_spec, actor_network, sample_keys[0], fixed_alpha
        )
        self.out_keys = ["loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"]
        self._refresh_keys()

    @property
    def alpha(self) -> Tensor:
        """The entropy temperature ``exp(log_alpha)`` (clamped, detached)."""
        return clamped_alpha(self)

    def _critic_state_keys(self) -> list[NestedKey]:
        """What the critics read besides the action (read at the root and under ``"next"``)."""
        action = self.tensor_keys.action
        return [k for k in self.qvalue_network.in_keys if k != action]

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        critic = self._critic_state_keys()
        return [
            *self._net_in_keys(self.actor_network),
            *critic,
            *[next_key(k) for k in critic],
            keys.action,
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    # ---- pieces ------------------------------------------------------------------------------

    def _sample(self, tensordict: TensorDictBase) -> tuple[Tensor, Tensor]:
        """Draws ``a ~ pi(.|s)``; returns ``(a, log pi(a|s))`` (``[*B, *A]``, ``[*B, 1]``)."""
        inputs = tensordict.select(*self.actor_network.in_keys, strict=False)
        dist = self.actor_network.get_dist(inputs.copy())
        action, log_prob = rsample_and_log_prob(dist)
        return action, log_prob.unsqueeze(-1)

    def _critic_inputs(self, tensordict: TensorDictBase, action: Tensor) -> TensorDictBase:
        inputs = tensordict.select(*self._critic_state_keys(), strict=False).copy()
        inputs.set(self.tensor_keys.action, action)
        return inputs

    def _q(self, inputs: TensorDictBase, param_set: ParamSet) -> Tensor:
        """``[n_critics, *B, 1]`` action values."""
        key = self.tensor_keys.state_action_value
        return self._call_ensemble("qvalue_network", inputs, [key], param_set)[0]

    def _check_batch(self, tensordict: TensorDictBase) -> None:
        if tensordict.batch_dims == 0:
            raise ValueError(
                f"{type(self).__name__}: the input has no batch dimension; the critics normalise "
                "over a batch of transitions, pass a TensorDict with batch_size [B, ...]"
            )

    def _qvalue_terms(self, tensordict: TensorDictBase, alpha: Tensor) -> tuple[Tensor, Tensor]:
        """Per-sample critic loss ``[*B, 1]`` and TD error ``[*B, 1]``; writes the priority."""
        self._check_batch(tensordict)
        next_td = tensordict.get(NEXT)
        # The paper samples the next action with the actor's running statistics (eval mode).
        with torch.no_grad(), _mode(self.actor_network, False):
            next_action, next_log_prob = self._sample(next_td)
        key = self.tensor_keys.action
        check_action_shape(type(self).__name__, key, tensordict.get(key), next_action)
        joint = TensorDict.cat(
            [
                self._critic_inputs(tensordict, tensordict.get(key)),
                self._critic_inputs(next_td, next_action),
            ],
            0,
        )
        # One forward pass over both halves: the normalisation sees current and next pairs
        # together, which is what lets CrossQ drop the target network.
        with _mode(self.qvalue_network, self.training):
            q_all = self._q(joint, ParamSet.ONLINE)  # [n, 2 * B0, ..., 1]
        pred, q_next = q_all.split(tensordict.batch_size[0], dim=1)
        with torch.no_grad():
            next_value = q_next.detach().min(0).values - alpha * next_log_prob
            target = self.value_estimator.value_estimate(tensordict, next_value=next_value)
        loss = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        td_error = write_priority(tensordict, self.tensor_keys.priority, pred, target, True)
        return loss, td_error

    def _actor_terms(self, tensordict: TensorDictBase, alpha: Tensor) -> tuple[Tensor, Tensor]:
        """Per-sample actor loss ``[*B, 1]`` and ``log pi(a~|s)`` ``[*B, 1]``."""
        action, log_prob = self._sample(tensordict)
        key = self.tensor_keys.action
        data_action = tensordict.get(key, None)
        if data_action is not None:
            check_action_shape(type(self).__name__, key, data_action, action)
        # The critics judge the policy with their running statistics, as in the paper.
        with _mode(self.qvalue_network, False):
            q = self._q(self._critic_inputs(tensordict, action), ParamSet.DETACHED)
        return alpha * log_prob - q.min(0).values, log_prob

    # ---- public terms ------------------------------------------------------------------------

    def qvalue_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The critic loss (reduced), computed on the joint current/next batch.

        Runs the critics in the loss's own mode (``loss.train()``: batch statistics, and the
        running statistics are updated), and writes the TD error at the priority key.

        Args:
            tensordict: a batch ``[B, ...]`` as for :meth:`forward`.

        Returns:
            ``(loss_qvalue, {"td_error": [*B, 1]})``.
        """
        self._check_inputs(tensordict)
        loss, td_error = self._qvalue_terms(tensordict, self.alpha)
        return reduce_loss(loss, self.reduction), {"td_error": td_error}

    def actor_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The actor loss (reduced); the critics run in eval mode, detached.

        Args:
            tensordict: a batch with the actor's and the critics' inputs.

        Returns:
            ``(loss_actor, {"log_prob": log pi(a~|s) [*B, 1]})``; pass ``log_prob`` to
            :meth:`alpha_loss`.
        """
        keys = [*self._net_in_keys(self.actor_network, False), *self._critic_state_keys()]
        self._check_inputs(tensordict, keys)
        loss, log_prob = self._actor_terms(tensordict, self.alpha)
        return reduce_loss(loss, self.reduction), {"log_prob": log_prob.detach()}

    def alpha_loss(self, log_prob: Tensor) -> Tensor:
        """The temperature loss ``-log_alpha * (log_prob + target_entropy)`` (reduced).

        Args:
            log_prob: ``log pi(a~|s)`` of fresh policy samples, ``[*B, 1]``.

        Returns:
            The reduced loss (zero with ``fixed_alpha``).
        """
        return reduce_loss(alpha_loss(self, log_prob), self.reduction)

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes the CrossQ loss terms: critics first (updating their statistics), then actor.

        Args:
            tensordict: a batch ``[B, ...]`` with the observation (root and ``"next"``), the
                action and ``("next", "reward"/"done"/"terminated")`` (``[B, ..., 1]``).

        Returns:
            A TensorDict with ``loss_actor``, ``loss_qvalue``, ``loss_alpha`` and the detached
            ``alpha`` and ``entropy``.
        """
        self._check_inputs(tensordict)
        alpha = self.alpha
        loss_qvalue, _ = self._qvalue_terms(tensordict, alpha)
        loss_actor, log_prob = self._actor_terms(tensordict, alpha)
        return soft_actor_critic_terms(self, loss_actor, loss_qvalue, log_prob, alpha)
