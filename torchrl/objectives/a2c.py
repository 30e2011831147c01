"""Advantage actor-critic loss (Mnih et al., 2016)."""

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
from torchrl.modules.models.value_norm import (
    ValueNorm,
    ValueTransform,
)
from torchrl.objectives._helpers import (
    UNSET,
    action_log_prob,
    as_batch,
    check_loss_function,
    check_probabilistic_actor,
    check_reduction,
    critic_value_loss,
    decoded_critic,
    dist_entropy,
    either_alias,
    encoded_critic_data,
    reduce_loss,
)
from torchrl.objectives.common import LossModule, next_key
from torchrl.objectives.utils import ValueEstimators

__all__ = ["A2CLoss"]


class A2CLoss(LossModule):
    """A2C: ``-E[log pi(a|s) A]`` plus a critic loss and an entropy bonus.

    The advantage is read at ``"advantage"`` or computed by the value estimator (GAE by default)
    and written into the input. With ``make_value_estimator(ValueEstimators.VTrace)`` this is
    IMPALA's loss on off-policy data: the advantage is ``rho_t (r_t + gamma v_{t+1} - V(s_t))``,
    the critic regresses the V-trace targets, and the behaviour log-probabilities are read at
    ``"action_log_prob"`` (``set_keys(sample_log_prob=...)`` renames it).

    Args:
        actor_network: a probabilistic actor (``get_dist``).
        critic_network: a state-value network (``"state_value"``); optional when the data
            carries ``"advantage"`` and ``"value_target"``.
        entropy_bonus: add ``-entropy_coef * H(pi)``.
        samples_mc_entropy: samples of the Monte-Carlo entropy estimate when needed.
        entropy_coef: weight of the entropy bonus.
        critic_coef: weight of the critic loss (``None`` drops it).
        loss_critic_type: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.
        separate_losses: keep the critic loss from updating parameters shared with the actor.
        clip_value: clip the new value around the stored one in the critic loss.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        functional: unused (TorchRL compatibility).
        entropy_coeff: TorchRL's current name of ``entropy_coef`` (give one).
        critic_coeff: TorchRL's current name of ``critic_coef`` (give one).
        value_norm: a :class:`~torchrl.modules.ValueNorm`: the critic predicts normalised
            values, regresses the normalised targets (statistics updated by each training-mode
            call) and the value estimator reads denormalised predictions.
        value_transform: a :class:`~torchrl.modules.ValueTransform` applied to the targets
            before ``value_norm`` (inverted for the value estimator). The ``"state_value"``
            and ``"value_target"`` entries of the data are always real values.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torch import nn
        >>> from torchrl.modules import ProbabilisticActor, OneHotCategorical, ValueOperator
        >>> actor = ProbabilisticActor(TensorDictModule(nn.Linear(3, 2), ["observation"],
        ...     ["logits"]), in_keys=["logits"], distribution_class=OneHotCategorical)
        >>> loss = A2CLoss(actor, ValueOperator(nn.Linear(3, 1)))
        >>> td = TensorDict({"observation": torch.randn(2, 5, 3),
        ...     "action": nn.functional.one_hot(torch.randint(2, (2, 5)), 2),
        ...     "next": {"observation": torch.randn(2, 5, 3), "reward": torch.randn(2, 5, 1),
        ...     "done": torch.zeros(2, 5, 1, dtype=torch.bool),
        ...     "terminated": torch.zeros(2, 5, 1, dtype=torch.bool)}}, batch_size=[2, 5])
        >>> sorted(loss(td).keys())
        ['entropy', 'loss_critic', 'loss_entropy', 'loss_objective']
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by :class:`A2CLoss`."""

        advantage: NestedKey = ADVANTAGE
        value_target: NestedKey = VALUE_TARGET
        value: NestedKey = STATE_VALUE
        action: NestedKey = ACTION
        reward: NestedKey = REWARD
        done: NestedKey = DONE
        terminated: NestedKey = TERMINATED
        # the behaviour policy's log-probabilities: read by the V-trace estimator only
        sample_log_prob: NestedKey = ACTION_LOG_PROB

    default_keys = _AcceptedKeys
    actor_network: ProbabilisticTensorDictSequential
    default_value_estimator = ValueEstimators.GAE
    _supported_estimators = (
        ValueEstimators.TD0,
        ValueEstimators.TD1,
        ValueEstimators.TDLambda,
        ValueEstimators.GAE,
        ValueEstimators.VTrace,
    )

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        critic_network: TensorDictModuleBase | None = None,
        *,
        entropy_bonus: bool = True,
        samples_mc_entropy: int = 1,
        entropy_coef: float = UNSET,
        critic_coef: float | None = UNSET,
        loss_critic_type: str = "smooth_l1",
        separate_losses: bool = False,
        clip_value: float | None = None,
        reduction: str = "mean",
        functional: bool = True,
        entropy_coeff: float = UNSET,
        critic_coeff: float | None = UNSET,
        value_norm: ValueNorm | None = None,
        value_transform: ValueTransform | None = None,
    ) -> None:
        super().__init__()
        entropy_coef = either_alias(
            type(self).__name__, "entropy_coef", entropy_coef, "entropy_coeff", entropy_coeff, 0.01
        )
        critic_coef = either_alias(
            type(self).__name__, "critic_coef", critic_coef, "critic_coeff", critic_coeff, 1.0
        )
        check_probabilistic_actor(type(self).__name__, actor_network)
        self.convert_to_functional(actor_network, "actor_network")
        if critic_network is not None:
            self.convert_to_functional(critic_network, "critic_network")
            self._adopt_out_key("value", critic_network)
        else:
            self.critic_network = None
        self.entropy_bonus = bool(entropy_bonus) and entropy_coef != 0
        self.samples_mc_entropy = samples_mc_entropy
        self.entropy_coef = float(entropy_coef)
        self.critic_coef = None if critic_coef is None else float(critic_coef)
        self.loss_critic_type = check_loss_function(loss_critic_type)
        self.separate_losses = separate_losses
        self.clip_value = None if clip_value is None else float(clip_value)
        self.reduction = check_reduction(reduction)
        self.value_norm = value_norm
        self.value_transform = value_transform
        sample_keys = list(getattr(actor_network, "dist_sample_keys", None) or [ACTION])
        if sample_keys != [ACTION]:
            self._tensor_keys.action = sample_keys[0]
        self.out_keys = ["loss_objective"]
        if critic_network is not None and critic_coef is not None:
            self.out_keys.append("loss_critic")
        if self.entropy_bonus:
            self.out_keys += ["loss_entropy", "entropy"]
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
        return decoded_critic(self)

    def _estimator_actor_network(self) -> nn.Module | None:
        return self.actor_network

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes ``loss_objective``, ``loss_critic``, ``loss_entropy`` and ``entropy``.

        Args:
            tensordict: data ``[*B, T]`` with the actor's inputs, the actions and either
                ``"advantage"``/``"value_target"`` or what the value estimator reads.

        Returns:
            A TensorDict of loss terms (and the detached ``entropy``).
        """
        keys = self.tensor_keys
        self._check_inputs(tensordict)
        adv = tensordict.get(keys.advantage, None)
        if adv is None:
            if self.critic_network is None:
                raise KeyError(
                    f"A2CLoss: the input has no {keys.advantage!r} entry and the loss has no "
                    "critic to compute it"
                )
            self._check_estimator_inputs(tensordict)
            self.value_estimator(tensordict)
            adv = tensordict.get(keys.advantage)
        dist = self.actor_network.get_dist(tensordict.copy())
        log_prob = action_log_prob(dist, tensordict, keys.action)
        adv = adv.detach()
        adv = as_batch(adv, log_prob, "the advantage", "A2CLoss")
        out: dict[str, Tensor] = {"loss_objective": reduce_loss(-(log_prob * adv), self.reduction)}
        if self.entropy_bonus:
            entropy = dist_entropy(dist, self.samples_mc_entropy)
            out["entropy"] = entropy.detach().mean()
            out["loss_entropy"] = -self.entropy_coef * reduce_loss(entropy, self.reduction)
        if self.critic_network is not None and self.critic_coef is not None:
            critic_data = tensordict
            if self.value_norm is not None or self.value_transform is not None:
                critic_data = encoded_critic_data(self, tensordict)
            loss, clip_fraction = critic_value_loss(
                self,
                critic_data,
                "critic_network",
                self.loss_critic_type,
                self.clip_value,
                "actor_network" if self.separate_losses else None,
                self.reduction,
            )
            out["loss_critic"] = self.critic_coef * loss
            if clip_fraction is not None:
                out["value_clip_fraction"] = clip_fraction
        return TensorDict(out, batch_size=[])
