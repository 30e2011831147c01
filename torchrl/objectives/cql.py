"""Conservative Q-learning losses for offline RL (Kumar et al., 2020)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, dispatch
from torch import Tensor, nn

from torchrl._keys import NEXT
from torchrl._types import NestedKey
from torchrl.objectives._helpers import (
    action_bounds,
    alpha_loss,
    ensemble_distance,
    gather_action_values,
    reduce_loss,
    reduced_distance,
    write_priority,
)
from torchrl.objectives.common import ParamSet
from torchrl.objectives.dqn import DQNLoss
from torchrl.objectives.sac import SACLoss

if TYPE_CHECKING:
    from torchrl.data.specs import TensorSpec

__all__ = ["CQLLoss", "DiscreteCQLLoss"]


class CQLLoss(SACLoss):
    """CQL(H) on top of SAC: the critics are pushed down on policy and random actions.

    The actor, alpha and TD terms are SAC's (with ``deterministic_backup`` dropping the
    entropy term of the target, and ``max_q_backup`` using the best of ``num_random`` next
    actions). For each critic ``i`` and state ``s``, with ``R = num_random`` actions of each
    kind (uniform in the action bounds, from ``pi(.|s)`` and from ``pi(.|s')``, all evaluated
    at ``s`` and without gradients to the policy) and ``T = temperature``:
    ``cql_i = min_q_weight * (T * logsumexp_j((Q_i(s, a_j) - log rho(a_j)) / T) - Q_i(s, a))``
    where ``log rho`` is the log-density each action was drawn with. ``loss_cql`` sums over the
    critics. With ``with_lagrange``, ``alpha' = exp(log_alpha_prime)`` (clamped to
    ``[0, 1e6]``) scales ``cql_i - lagrange_thresh`` and ``loss_alpha_prime`` adapts it.

    Args:
        actor_network: a probabilistic actor with a reparameterisable distribution.
        qvalue_network: reads the observation and ``"action"``, writes
            ``"state_action_value"`` (two critics are made).
        loss_function: ``"smooth_l1"``, ``"l2"`` or ``"l1"``.
        alpha_init: initial temperature of the entropy term.
        min_alpha: lower clamp of alpha.
        max_alpha: upper clamp of alpha.
        action_spec: the bounded action spec (random actions, ``"auto"`` target entropy).
        bounds: ``(low, high)`` of the actions instead of ``action_spec`` (default ``(-1, 1)``
            when neither is known).
        fixed_alpha: keep alpha constant.
        target_entropy: a number or ``"auto"``.
        delay_actor: sample next actions with target actor parameters.
        delay_qvalue: keep target critic parameters.
        temperature: ``T`` of the logsumexp.
        min_q_weight: weight of the CQL term.
        max_q_backup: use ``max`` over ``num_random`` next actions in the target.
        deterministic_backup: no entropy term in the target.
        num_random: number of sampled actions of each kind.
        with_lagrange: learn the CQL weight ``alpha'``.
        lagrange_thresh: the target gap of the Lagrangian version.
        priority_key: where to write the TD error.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        deactivate_vmap: loop over the critics instead of vmapping (always done for
            two critics on CPU, where it is faster). Critics made of a plain ``MLP`` skip
            both: their members run stacked, one batched matmul per layer.

    Examples:
        >>> from tensordict.nn import TensorDictModule, NormalParamExtractor
        >>> from torchrl.modules import ProbabilisticActor, ValueOperator, TanhNormal, MLP
        >>> actor = ProbabilisticActor(TensorDictModule(nn.Sequential(nn.Linear(3, 2),
        ...     NormalParamExtractor()), ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"], distribution_class=TanhNormal)
        >>> qvalue = ValueOperator(MLP(in_features=4, out_features=1, depth=1),
        ...                        in_keys=["observation", "action"])
        >>> loss = CQLLoss(actor, qvalue, bounds=(-1.0, 1.0), target_entropy=-1.0)
        >>> loss.out_keys
        ['loss_actor', 'loss_qvalue', 'loss_cql', 'loss_alpha', 'alpha', 'entropy']
    """

    low: Tensor
    high: Tensor
    log_alpha_prime: Tensor

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        *,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: TensorSpec | None = None,
        bounds: tuple[Any, Any] | None = None,
        fixed_alpha: bool = False,
        target_entropy: str | float = "auto",
        delay_actor: bool = False,
        delay_qvalue: bool = True,
        temperature: float = 1.0,
        min_q_weight: float = 1.0,
        max_q_backup: bool = False,
        deterministic_backup: bool = True,
        num_random: int = 10,
        with_lagrange: bool = False,
        lagrange_thresh: float = 0.0,
        priority_key: NestedKey | None = None,
        reduction: str = "mean",
        deactivate_vmap: bool = False,
    ) -> None:
        super().__init__(
            actor_network,
            qvalue_network,
            None,
            num_qvalue_nets=2,
            loss_function=loss_function,
            alpha_init=alpha_init,
            min_alpha=min_alpha,
            max_alpha=max_alpha,
            action_spec=action_spec,
            fixed_alpha=fixed_alpha,
            target_entropy=target_entropy,
            delay_actor=delay_actor,
            delay_qvalue=delay_qvalue,
            priority_key=priority_key,
            reduction=reduction,
            deactivate_vmap=deactivate_vmap,
        )
        try:
            low, high = action_bounds(
                "CQLLoss", action_spec, bounds, actor_network, self.tensor_keys.action
            )
        except ValueError:
            low, high = torch.tensor(-1.0), torch.tensor(1.0)
        self.register_buffer("low", low)
        self.register_buffer("high", high)
        if num_random < 1:
            raise ValueError(f"CQLLoss: num_random must be >= 1, got {num_random}")
        self.temperature = float(temperature)
        self.min_q_weight = float(min_q_weight)
        self.max_q_backup = max_q_backup
        self.deterministic_backup = deterministic_backup
        self.num_random = int(num_random)
        self.with_lagrange = with_lagrange
        self.lagrange_thresh = float(lagrange_thresh)
        if with_lagrange:
            self.log_alpha_prime = nn.Parameter(torch.zeros(()))
        self.out_keys = ["loss_actor", "loss_qvalue", "loss_cql", "loss_alpha"]
        if with_lagrange:
            self.out_keys.append("loss_alpha_prime")
        self.out_keys += ["alpha", "entropy"]

    def _repeat(self, tensordict: TensorDictBase) -> TensorDictBase:
        """``[R, *B]`` copies of the actor's inputs."""
        inputs = tensordict.select(*self.actor_network.in_keys, strict=False)
        return inputs.expand(self.num_random, *inputs.batch_size).clone()

    def _next_value(self, tensordict: TensorDictBase, alpha: Tensor) -> Tensor:
        param_set = ParamSet.TARGET if self.delay_actor else ParamSet.ONLINE
        next_td = tensordict.get(NEXT)
        if self.max_q_backup:
            acted, _ = self._sample(self._repeat(next_td), param_set)
            q = self._q(acted, ParamSet.TARGET, minimum=True)  # [R, *B, 1]
            return q.max(0).values
        acted, log_prob = self._sample(next_td, param_set)
        value = self._q(acted, ParamSet.TARGET, minimum=True)
        if not self.deterministic_backup:
            value = value - alpha * log_prob
        return value

    def _cql_terms(self, tensordict: TensorDictBase, pred: Tensor) -> Tensor:
        """``[n_critics, *B, 1]`` CQL terms (before the Lagrange weight)."""
        key = self.tensor_keys.action
        obs = self._repeat(tensordict)  # [R, *B]
        with torch.no_grad():
            curr, curr_log_prob = self._sample(obs, ParamSet.ONLINE)
            nxt, next_log_prob = self._sample(self._repeat(tensordict.get(NEXT)), ParamSet.ONLINE)
            sample = curr.get(key)
            low = self.low.to(sample.dtype)
            high = self.high.to(sample.dtype)
            uniform = low + (high - low) * torch.rand_like(sample)
            # Uniform density over the box: -sum(log(high - low)) over the action dims.
            log_density = -(high - low).log().expand_as(sample).sum(-1, keepdim=True)
        q_rand = self._q(obs.clone(False).set(key, uniform), ParamSet.ONLINE)
        q_curr = self._q(obs.clone(False).set(key, sample), ParamSet.ONLINE)
        q_next = self._q(obs.clone(False).set(key, nxt.get(key)), ParamSet.ONLINE)
        cat = torch.cat(
            [q_rand - log_density, q_next - next_log_prob, q_curr - curr_log_prob], dim=1
        )  # [n, 3R, *B, 1]
        lse = torch.logsumexp(cat / self.temperature, dim=1) * self.temperature
        return self.min_q_weight * (lse - pred)

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes the SAC terms plus the CQL regulariser.

        Args:
            tensordict: a batch ``[*B]`` with the observation (root and ``"next"``), the action
                and ``("next", "reward"/"done"/"terminated")`` (``[*B, 1]``).

        Returns:
            A TensorDict with ``loss_actor``, ``loss_qvalue``, ``loss_cql``, ``loss_alpha``
            (``loss_alpha_prime``) and the detached ``alpha`` and ``entropy``.
        """
        self._check_inputs(tensordict)
        alpha = self.alpha
        acted, log_prob = self._sample(tensordict, ParamSet.ONLINE)
        self._check_action(tensordict, acted)
        loss_actor = alpha * log_prob - self._q(acted, ParamSet.DETACHED, minimum=True)
        with torch.no_grad():
            next_value = self._next_value(tensordict, alpha)
            target = self.value_estimator.value_estimate(tensordict, next_value=next_value)
        pred = self._q(tensordict, ParamSet.ONLINE)  # [2, *B, 1]
        loss_qvalue = ensemble_distance(pred, target, self.loss_function, self.reduction)
        write_priority(tensordict, self.tensor_keys.priority, pred, target, ensemble=True)
        cql = self._cql_terms(tensordict, pred)  # [2, *B, 1]
        out = {
            "loss_actor": reduce_loss(loss_actor, self.reduction),
            "loss_qvalue": loss_qvalue,
        }
        if self.with_lagrange:
            alpha_prime = self.log_alpha_prime.exp().clamp(0.0, 1e6)
            gap = cql - self.lagrange_thresh
            out["loss_cql"] = reduce_loss((alpha_prime.detach() * gap).sum(0), self.reduction)
            out["loss_alpha_prime"] = reduce_loss(
                -0.5 * (alpha_prime * gap.detach()).sum(0), self.reduction
            )
        else:
            out["loss_cql"] = reduce_loss(cql.sum(0), self.reduction)
        out["loss_alpha"] = reduce_loss(alpha_loss(self, log_prob), self.reduction)
        out["alpha"] = alpha
        out["entropy"] = -log_prob.detach().mean()
        return TensorDict(out, batch_size=[])


class DiscreteCQLLoss(DQNLoss):
    """CQL for discrete actions on top of DQN: ``loss_cql = logsumexp_a Q(s, a) - Q(s, a_data)``.

    ``loss_qvalue`` is the DQN TD loss (``double_dqn`` and masks as in
    :class:`~torchrl.objectives.DQNLoss`).

    Args:
        value_network: writes ``"action_value"`` (``[*B, n]``), e.g. a ``QValueActor``.
        loss_function: ``"l2"``, ``"l1"`` or ``"smooth_l1"``.
        delay_value: keep target parameters.
        action_space: ``"one_hot"`` or ``"categorical"`` (or a spec).
        priority_key: where to write the TD error.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        **kwargs: other :class:`~torchrl.objectives.DQNLoss` arguments.

    Examples:
        >>> from torchrl.modules import QValueActor
        >>> loss = DiscreteCQLLoss(QValueActor(nn.Linear(4, 3), action_space="categorical"))
        >>> loss_qvalue, loss_cql = loss(observation=torch.randn(8, 4),
        ...     action=torch.randint(3, (8,)), next_observation=torch.randn(8, 4),
        ...     next_reward=torch.randn(8, 1), next_done=torch.zeros(8, 1, dtype=torch.bool),
        ...     next_terminated=torch.zeros(8, 1, dtype=torch.bool))
        >>> bool(loss_cql > 0)
        True
    """

    def __init__(
        self,
        value_network: nn.Module,
        *,
        loss_function: str = "l2",
        delay_value: bool = True,
        action_space: str | TensorSpec | None = None,
        priority_key: NestedKey | None = None,
        reduction: str = "mean",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            value_network,
            loss_function=loss_function,
            delay_value=delay_value,
            action_space=action_space,
            priority_key=priority_key,
            reduction=reduction,
            **kwargs,
        )
        self.out_keys = ["loss_qvalue", "loss_cql"]

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes ``loss_qvalue`` and ``loss_cql``.

        Args:
            tensordict: a batch ``[*B]`` as for :class:`~torchrl.objectives.DQNLoss`.

        Returns:
            A TensorDict with ``loss_qvalue`` and ``loss_cql``.
        """
        keys = self.tensor_keys
        self._check_inputs(tensordict)
        qnet = self._direct_q()
        (values,) = self._action_values(tensordict, qnet, ParamSet.ONLINE)
        pred = gather_action_values(
            values, tensordict.get(keys.action), self.action_space, "DiscreteCQLLoss", keys.action
        )
        with torch.no_grad():
            next_value = self._next_value(tensordict, qnet)
            target = self.value_estimator.value_estimate(tensordict, next_value=next_value)
        write_priority(tensordict, keys.priority, pred, target)
        loss_qvalue = reduced_distance(pred, target, self.loss_function, self.reduction)
        loss_cql = values.logsumexp(-1, keepdim=True) - pred
        return TensorDict(
            {
                "loss_qvalue": loss_qvalue,
                "loss_cql": reduce_loss(loss_cql, self.reduction),
            },
            batch_size=[],
        )
