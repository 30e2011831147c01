"""Proximal policy optimisation losses (Schulman et al., 2017): plain, clipped and KL-penalised."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDictBase
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
    paper_era_log_prob_key,
)
from torchrl._types import DeviceLike, NestedKey
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
    get_log_prob,
    reduce_loss,
)
from torchrl.objectives.common import LossModule, actor_dist, loss_output, next_key
from torchrl.objectives.utils import ValueEstimators
from torchrl.objectives.value.estimators import standardize

__all__ = ["ClipPPOLoss", "KLPENPPOLoss", "PPOLoss"]


def _sample_keys(actor: Any) -> list[NestedKey]:
    keys = getattr(actor, "dist_sample_keys", None)
    return list(keys) if keys else [ACTION]


class PPOLoss(LossModule):
    """The unclipped PPO objective ``-E[r_t(theta) A_t]`` with ``r_t = pi(a|s) / pi_old(a|s)``.

    Also a critic loss ``critic_coef * d(V(s), value_target)`` and an entropy bonus
    ``-entropy_coef * H(pi)``. The advantage is read at ``"advantage"`` or, when absent,
    computed by the value estimator (GAE by default) and written into the input.
    ``"action_log_prob"`` (what a ``ProbabilisticActor`` with ``return_log_prob=True`` writes;
    the paper-era ``"sample_log_prob"`` is read when the data has only that) must hold the
    log-probabilities of the data-collecting policy. With
    ``make_value_estimator(ValueEstimators.VTrace)`` this is APPO (asynchronous PPO): the ratio
    is taken against the behaviour policy, and the advantages and critic targets are V-trace's.

    Args:
        actor_network: a probabilistic actor (``get_dist``), e.g.
            :class:`~torchrl.modules.ProbabilisticActor`; composite distributions work.
        critic_network: a state-value network writing ``"state_value"`` (optional when the
            advantage and value target come with the data).
        entropy_bonus: add the entropy term.
        samples_mc_entropy: samples of the Monte-Carlo entropy estimate (when the
            distribution has no closed form).
        entropy_coef: weight of the entropy bonus.
        critic_coef: weight of the critic loss (``None`` drops the critic loss).
        loss_critic_type: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.
        normalize_advantage: standardize the advantage over the batch.
        normalize_advantage_exclude_dims: dims kept out of that standardization.
        separate_losses: keep the critic loss from updating parameters shared with the actor.
        clip_value: clip the new value to ``old_value +- clip_value`` in the critic loss
            (PPO2 style; ``old_value`` is the ``"state_value"`` of the data).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        functional: unused (kept for TorchRL compatibility).
        entropy_coeff: TorchRL's current name of ``entropy_coef`` (give one).
        critic_coeff: TorchRL's current name of ``critic_coef`` (give one).
        device: unused.
        value_norm: a :class:`~torchrl.modules.ValueNorm` (e.g. ``PopArtValueNorm()``): the
            critic then predicts normalised values; in training mode each call updates the
            statistics with the value targets, the critic regresses the normalised targets,
            and the value estimator sees denormalised predictions.
        value_transform: a :class:`~torchrl.modules.ValueTransform` (e.g.
            ``SymLogValueTransform()``) applied to the targets before ``value_norm``; its
            inverse maps predictions back for the value estimator. ``"state_value"`` and
            ``"value_target"`` in the data are always real (untransformed) values.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule, NormalParamExtractor
        >>> from torch import nn
        >>> from torchrl.modules import ProbabilisticActor, ValueOperator, TanhNormal
        >>> actor = ProbabilisticActor(TensorDictModule(nn.Sequential(nn.Linear(3, 4),
        ...     NormalParamExtractor()), ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"], distribution_class=TanhNormal)
        >>> critic = ValueOperator(nn.Linear(3, 1))
        >>> loss = PPOLoss(actor, critic)
        >>> td = TensorDict({"observation": torch.randn(4, 5, 3), "action": torch.rand(4, 5, 2),
        ...     "action_log_prob": torch.zeros(4, 5), "next": {"observation": torch.randn(4, 5, 3),
        ...     "reward": torch.randn(4, 5, 1), "done": torch.zeros(4, 5, 1, dtype=torch.bool),
        ...     "terminated": torch.zeros(4, 5, 1, dtype=torch.bool)}}, batch_size=[4, 5])
        >>> out = loss(td)
        >>> sorted(out.keys())
        ['entropy', 'kl_approx', 'loss_critic', 'loss_entropy', 'loss_objective']
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read and written by the PPO losses."""

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
        actor_network: ProbabilisticTensorDictSequential,
        critic_network: TensorDictModuleBase | None = None,
        *,
        entropy_bonus: bool = True,
        samples_mc_entropy: int = 1,
        entropy_coef: float = UNSET,
        critic_coef: float | None = UNSET,
        loss_critic_type: str = "smooth_l1",
        normalize_advantage: bool = False,
        normalize_advantage_exclude_dims: tuple[int, ...] = (),
        separate_losses: bool = False,
        clip_value: float | None = None,
        reduction: str = "mean",
        functional: bool = True,
        entropy_coeff: float = UNSET,
        critic_coeff: float | None = UNSET,
        device: DeviceLike = None,
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
        self.normalize_advantage = normalize_advantage
        self.normalize_advantage_exclude_dims = tuple(normalize_advantage_exclude_dims)
        self.separate_losses = separate_losses
        if clip_value is not None and clip_value <= 0:
            raise ValueError(f"clip_value must be positive, got {clip_value}")
        self.clip_value = None if clip_value is None else float(clip_value)
        self.reduction = check_reduction(reduction)
        self.value_norm = value_norm
        self.value_transform = value_transform
        self._action_keys = _sample_keys(actor_network)
        if self._action_keys != [ACTION]:
            self._tensor_keys.action = self._action_keys[0]
        self.out_keys = self._loss_out_keys()
        self._refresh_keys()

    # ---- keys --------------------------------------------------------------------------------

    def _loss_out_keys(self) -> list[str]:
        keys = ["loss_objective"]
        if self.critic_network is not None and self.critic_coef is not None:
            keys.append("loss_critic")
        if self.entropy_bonus:
            keys += ["loss_entropy", "entropy"]
        keys.append("kl_approx")
        return keys

    def _compute_in_keys(self) -> list[NestedKey]:
        keys = self.tensor_keys
        actions = self._action_keys if len(self._action_keys) > 1 else [keys.action]
        return [
            *self.actor_network.in_keys,
            *actions,
            keys.sample_log_prob,
            *self._net_in_keys(self.critic_network),
            next_key(keys.reward),
            next_key(keys.done),
            next_key(keys.terminated),
        ]

    def _compute_required_keys(self) -> list[NestedKey]:
        # the log-probability is looked up where it is read: a composite actor's
        # log-probabilities may come per action instead (its log_prob_keys)
        keys = self.tensor_keys
        actions = self._action_keys if len(self._action_keys) > 1 else [keys.action]
        return [*self.actor_network.in_keys, *actions]

    def _compute_estimator_keys(self) -> list[NestedKey]:
        return self._value_target_keys(self.critic_network)

    def _estimator_value_network(self) -> nn.Module | None:
        return decoded_critic(self)

    def _estimator_actor_network(self) -> nn.Module | None:
        return self.actor_network

    # ---- pieces ------------------------------------------------------------------------------

    def _advantage(self, tensordict: TensorDictBase) -> Tensor:
        keys = self.tensor_keys
        adv = tensordict.get(keys.advantage, None)
        if adv is None:
            if self.critic_network is None:
                raise KeyError(
                    f"{type(self).__name__}: the input has no {keys.advantage!r} entry and the "
                    "loss has no critic to compute it"
                )
            self._check_estimator_inputs(tensordict)
            self.value_estimator(tensordict)
            adv = tensordict.get(keys.advantage)
        adv = adv.detach()
        if self.normalize_advantage:
            adv = standardize(adv, self.normalize_advantage_exclude_dims)
        return adv

    def _dist_and_log_weight(
        self, tensordict: TensorDictBase
    ) -> tuple[torch.distributions.Distribution, Tensor, Tensor]:
        """``(current distribution, log_prob, log(pi / pi_old))``, shapes ``[*B]``."""
        keys = self.tensor_keys
        prev = get_log_prob(tensordict, keys.sample_log_prob)
        if prev is None:
            prev = self._composite_prev_log_prob(tensordict)
        if prev.requires_grad:
            raise RuntimeError(
                f"{type(self).__name__}: the stored {keys.sample_log_prob!r} requires grad; "
                "collect data under torch.no_grad()"
            )
        # Nothing written: the data keeps the distribution parameters of the collecting
        # policy (KLPENPPOLoss reads them). The whole input, not a select of the actor's
        # in_keys: a recurrent actor also reads entries it does not list ("is_init" or the
        # done flags mark its episode starts).
        dist = actor_dist(self.actor_network, tensordict, write=False)
        log_prob = action_log_prob(dist, tensordict, keys.action)
        prev = as_batch(prev, log_prob, repr(keys.sample_log_prob), type(self).__name__)
        return dist, log_prob, log_prob - prev

    def _composite_prev_log_prob(self, tensordict: TensorDictBase) -> Tensor:
        lp_keys = list(getattr(self.actor_network, "log_prob_keys", None) or [])
        values = [tensordict.get(k, None) for k in lp_keys]
        if not lp_keys or any(v is None for v in values):
            present = sorted(map(str, tensordict.keys(True, True)))
            key = self.tensor_keys.sample_log_prob
            legacy = paper_era_log_prob_key(key)
            also = f" nor {legacy!r}" if legacy is not None else ""
            raise KeyError(
                f"{type(self).__name__}: the input has no {key!r}{also} "
                "entry (log-probabilities of the data-collecting policy; set "
                f"return_log_prob=True on the actor); entries present: {present}"
            )
        bdims = tensordict.batch_dims
        return sum(v.reshape(*v.shape[:bdims], -1).sum(-1) for v in values)  # type: ignore[return-value]

    def _match_adv(self, adv: Tensor, like: Tensor) -> Tensor:
        # A trailing singleton feature dim ([*B, 1] vs [*B]) is reshaped away by as_batch.
        return as_batch(adv, like, "the advantage", type(self).__name__)

    def _critic_terms(self, tensordict: TensorDictBase, out: dict[str, Tensor]) -> None:
        if self.critic_network is None or self.critic_coef is None:
            return
        if self.value_norm is not None or self.value_transform is not None:
            tensordict = encoded_critic_data(self, tensordict)
        loss, clip_fraction = critic_value_loss(
            self,
            tensordict,
            "critic_network",
            self.loss_critic_type,
            self.clip_value,
            "actor_network" if self.separate_losses else None,
            self.reduction,
        )
        if clip_fraction is not None:
            out["value_clip_fraction"] = clip_fraction
        out["loss_critic"] = self.critic_coef * loss

    def _entropy_terms(
        self, dist: torch.distributions.Distribution, out: dict[str, Tensor]
    ) -> None:
        if not self.entropy_bonus:
            return
        entropy = dist_entropy(dist, self.samples_mc_entropy)
        reduced = reduce_loss(entropy, self.reduction)
        out["entropy"] = (reduced if self.reduction == "mean" else entropy.mean()).detach()
        out["loss_entropy"] = -self.entropy_coef * reduced

    def _objective(
        self,
        tensordict: TensorDictBase,
        dist: torch.distributions.Distribution,
        log_weight: Tensor,
        adv: Tensor,
        out: dict[str, Tensor],
    ) -> Tensor:
        return -(log_weight.exp() * adv)

    # ---- forward -----------------------------------------------------------------------------

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes the loss terms.

        Args:
            tensordict: data ``[*B]`` (usually ``[*B, T]`` when the advantage is computed
                here) with the actor inputs, the actions, ``"action_log_prob"`` and, for the
                critic, the value-estimator inputs or ``"advantage"``/``"value_target"``.

        Returns:
            A TensorDict with ``loss_objective``, ``loss_critic``, ``loss_entropy`` and the
            detached ``entropy``, ``kl_approx`` (and ``clip_fraction`` / ``kl`` / ``beta`` /
            ``value_clip_fraction`` where they apply).
        """
        self._check_inputs(tensordict)
        adv = self._advantage(tensordict)
        dist, log_prob, log_weight = self._dist_and_log_weight(tensordict)
        adv = self._match_adv(adv, log_weight)
        out: dict[str, Tensor] = {}
        objective = self._objective(tensordict, dist, log_weight, adv, out)
        out["loss_objective"] = reduce_loss(objective, self.reduction)
        self._entropy_terms(dist, out)
        self._critic_terms(tensordict, out)
        out["kl_approx"] = log_weight.detach().mean().neg()
        return loss_output(out)


class ClipPPOLoss(PPOLoss):
    """Clipped PPO: ``-E[min(r A, clip(r, 1 - eps, 1 + eps) A)]``.

    Args:
        actor_network: see :class:`PPOLoss`.
        critic_network: see :class:`PPOLoss`.
        clip_epsilon: the clipping range ``eps`` (default 0.2).
        **kwargs: the other :class:`PPOLoss` arguments.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torch import nn
        >>> from torchrl.modules import ProbabilisticActor, OneHotCategorical
        >>> actor = ProbabilisticActor(TensorDictModule(nn.Linear(3, 2), ["observation"],
        ...     ["logits"]), in_keys=["logits"], distribution_class=OneHotCategorical)
        >>> loss = ClipPPOLoss(actor, clip_epsilon=0.1)
        >>> td = TensorDict({"observation": torch.randn(6, 3),
        ...     "action": nn.functional.one_hot(torch.randint(2, (6,)), 2),
        ...     "sample_log_prob": torch.full((6,), -0.7), "advantage": torch.randn(6, 1)}, [6])
        >>> float(loss(td)["clip_fraction"]) <= 1.0
        True
    """

    def __init__(
        self,
        actor_network: ProbabilisticTensorDictSequential,
        critic_network: TensorDictModuleBase | None = None,
        *,
        clip_epsilon: float = 0.2,
        **kwargs: Any,
    ) -> None:
        if not 0 < clip_epsilon < 1:
            raise ValueError(f"clip_epsilon must lie in (0, 1), got {clip_epsilon}")
        super().__init__(actor_network, critic_network, **kwargs)
        self.clip_epsilon = float(clip_epsilon)

    def _loss_out_keys(self) -> list[str]:
        return [*super()._loss_out_keys(), "clip_fraction"]

    def _objective(
        self,
        tensordict: TensorDictBase,
        dist: torch.distributions.Distribution,
        log_weight: Tensor,
        adv: Tensor,
        out: dict[str, Tensor],
    ) -> Tensor:
        eps = self.clip_epsilon
        ratio = log_weight.exp()
        clipped = ratio.clamp(1.0 - eps, 1.0 + eps)
        # The share of samples whose ratio the clip moved (a comparison: no graph).
        out["clip_fraction"] = torch.mean(clipped != ratio, dtype=ratio.dtype)
        return -torch.minimum(ratio * adv, clipped * adv)


class KLPENPPOLoss(PPOLoss):
    """KL-penalised PPO: ``-E[r A - beta KL(pi_old || pi)]`` with an adaptive ``beta``.

    ``pi_old`` is rebuilt from the distribution parameters stored in the data (e.g.
    ``"loc"``/``"scale"`` written by the collecting actor). After each training-mode call,
    ``beta`` is multiplied by ``increment`` when the mean KL exceeds ``1.5 * dtarg`` and by
    ``decrement`` when it is below ``dtarg / 1.5``.

    Args:
        actor_network: see :class:`PPOLoss`.
        critic_network: see :class:`PPOLoss`.
        dtarg: the target KL.
        beta: the initial penalty weight.
        increment: factor applied to ``beta`` when the KL is too large.
        decrement: factor applied to ``beta`` when the KL is too small.
        samples_mc_kl: samples of the Monte-Carlo KL estimate (no closed form).
        **kwargs: the other :class:`PPOLoss` arguments.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torch import nn
        >>> from torchrl.modules import ProbabilisticActor, OneHotCategorical
        >>> actor = ProbabilisticActor(TensorDictModule(nn.Linear(3, 2), ["observation"],
        ...     ["logits"]), in_keys=["logits"], distribution_class=OneHotCategorical)
        >>> loss = KLPENPPOLoss(actor)
        >>> td = TensorDict({"observation": torch.randn(6, 3), "logits": torch.zeros(6, 2),
        ...     "action": nn.functional.one_hot(torch.randint(2, (6,)), 2),
        ...     "sample_log_prob": torch.full((6,), -0.7), "advantage": torch.randn(6, 1)}, [6])
        >>> sorted(loss(td).keys())
        ['beta', 'entropy', 'kl', 'kl_approx', 'loss_entropy', 'loss_objective']
    """

    beta: Tensor

    def __init__(
        self,
        actor_network: ProbabilisticTensorDictSequential,
        critic_network: TensorDictModuleBase | None = None,
        *,
        dtarg: float = 0.01,
        beta: float = 1.0,
        increment: float = 2.0,
        decrement: float = 0.5,
        samples_mc_kl: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(actor_network, critic_network, **kwargs)
        if increment < 1.0 or not 0.0 < decrement <= 1.0:
            raise ValueError(
                f"need increment >= 1 and 0 < decrement <= 1, got {increment}, {decrement}"
            )
        self.dtarg = float(dtarg)
        self.register_buffer("beta", torch.tensor(float(beta)))
        self.increment = float(increment)
        self.decrement = float(decrement)
        self.samples_mc_kl = samples_mc_kl
        self.out_keys = self._loss_out_keys()

    def _loss_out_keys(self) -> list[str]:
        return [*super()._loss_out_keys(), "kl", "beta"]

    def _compute_in_keys(self) -> list[NestedKey]:
        params = list(getattr(self.actor_network, "dist_params_keys", None) or [])
        return [*super()._compute_in_keys(), *params]

    def _compute_required_keys(self) -> list[NestedKey]:
        # the collecting policy's distribution parameters (for the KL term)
        params = list(getattr(self.actor_network, "dist_params_keys", None) or [])
        return [*super()._compute_required_keys(), *params]

    def _objective(
        self,
        tensordict: TensorDictBase,
        dist: torch.distributions.Distribution,
        log_weight: Tensor,
        adv: Tensor,
        out: dict[str, Tensor],
    ) -> Tensor:
        previous = self.actor_network.build_dist_from_params(tensordict.detach())
        try:
            kl = torch.distributions.kl.kl_divergence(previous, dist)
        except NotImplementedError:
            sample = previous.sample((self.samples_mc_kl,))
            kl = (previous.log_prob(sample) - dist.log_prob(sample)).mean(0)
        kl = as_batch(kl, log_weight, "the KL divergence", type(self).__name__)
        beta = self.beta.clone()
        objective = -(log_weight.exp() * adv - beta * kl)
        kl_mean = kl.detach().mean()
        out["kl"] = kl_mean
        out["beta"] = beta
        if self.training:
            # A select, not an `if` on the tensor: torch.compile traces it without a break.
            with torch.no_grad():
                factor = torch.where(
                    kl_mean > self.dtarg * 1.5,
                    self.increment,
                    torch.where(kl_mean < self.dtarg / 1.5, self.decrement, 1.0),
                )
                self.beta.mul_(factor)
        return objective
