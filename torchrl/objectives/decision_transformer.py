"""Decision-transformer losses: offline (Chen et al., 2021) and online (Zheng et al., 2022)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import ProbabilisticTensorDictSequential, TensorDictModuleBase, dispatch
from torch import Tensor

from torchrl._keys import ACTION
from torchrl._types import NestedKey
from torchrl.objectives._helpers import (
    action_log_prob,
    check_loss_function,
    check_reduction,
    clamped_alpha,
    dist_entropy,
    reduce_loss,
    register_log_alpha,
    resolve_target_entropy,
)
from torchrl.objectives.common import LossModule
from torchrl.objectives.utils import distance_loss

if TYPE_CHECKING:
    from torchrl.data.specs import TensorSpec

__all__ = ["DTLoss", "OnlineDTLoss"]


class DTLoss(LossModule):
    """Decision Transformer: regress the predicted actions onto the data's (``loss``).

    The actor reads the context (observations, past actions, returns-to-go, ``[*B, T, *]``)
    and writes its predictions at ``action_pred``; the targets are read at ``action_target``
    before the call (both default to ``"action"``). The error is averaged over all elements.

    Args:
        actor_network: a tensordict module around e.g. :class:`~torchrl.modules.DTActor`.
        loss_function: ``"l2"``, ``"l1"`` or ``"smooth_l1"``.
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (per-element errors averaged over the
            action dim).

    Examples:
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.modules import DTActor, DTConfig
        >>> net = DTActor(3, 2, DTConfig(n_embd=16, n_layer=1, n_head=2, n_inner=32))
        >>> actor = TensorDictModule(net, ["observation", "action", "return_to_go"], ["action"])
        >>> td = TensorDict(observation=torch.randn(4, 10, 3), action=torch.rand(4, 10, 2),
        ...                 return_to_go=torch.randn(4, 10, 1), batch_size=[4, 10])
        >>> DTLoss(actor)(td)["loss"].shape
        torch.Size([])
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read by :class:`DTLoss`."""

        action_target: NestedKey = ACTION
        action_pred: NestedKey = ACTION

    default_keys = _AcceptedKeys
    out_keys = ["loss"]

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        *,
        loss_function: str = "l2",
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        self.convert_to_functional(actor_network, "actor_network")
        self._adopt_out_key("action_pred", actor_network)
        self.loss_function = check_loss_function(loss_function)
        self.reduction = check_reduction(reduction)
        self.out_keys = ["loss"]
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        return [*self.actor_network.in_keys, self.tensor_keys.action_target]

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes ``loss``.

        Args:
            tensordict: sequences ``[*B, T]`` with the actor's inputs and the target actions.

        Returns:
            A TensorDict with ``loss``.
        """
        keys = self.tensor_keys
        self._check_inputs(tensordict)
        target = tensordict.get(keys.action_target).detach()
        inputs = tensordict.select(*self.actor_network.in_keys, strict=False)
        pred = self.actor_network(inputs).get(keys.action_pred)
        if pred.shape != target.shape:
            raise ValueError(
                f"DTLoss: predicted actions {tuple(pred.shape)} and targets "
                f"{tuple(target.shape)} differ in shape"
            )
        loss = distance_loss(pred, target, self.loss_function)
        if self.reduction == "none":
            loss = loss.mean(-1)
        return TensorDict({"loss": reduce_loss(loss, self.reduction)}, batch_size=[])


class OnlineDTLoss(LossModule):
    """Online Decision Transformer: likelihood with a learned entropy constraint.

    ``loss_log_likelihood = -log pi(a|context)``, ``loss_entropy = -alpha * H(pi)`` (alpha
    detached) and ``loss_alpha = alpha * (H(pi) - target_entropy)`` (entropy detached), so that
    alpha grows when the entropy falls below its target.

    Args:
        actor_network: a probabilistic actor over the context (``get_dist``).
        alpha_init: initial temperature.
        min_alpha: lower clamp of alpha.
        max_alpha: upper clamp of alpha.
        fixed_alpha: keep alpha constant.
        target_entropy: a number or ``"auto"`` (``-action_dim``).
        action_spec: the action spec (for ``"auto"``).
        samples_mc_entropy: samples of the Monte-Carlo entropy estimate.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Examples:
        >>> from tensordict.nn import TensorDictModule, NormalParamExtractor
        >>> from torch import nn
        >>> from torchrl.modules import ProbabilisticActor, TanhNormal
        >>> actor = ProbabilisticActor(TensorDictModule(nn.Sequential(nn.Linear(3, 4),
        ...     NormalParamExtractor()), ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"], distribution_class=TanhNormal)
        >>> loss = OnlineDTLoss(actor, target_entropy=-2.0)
        >>> td = TensorDict(observation=torch.randn(4, 10, 3), action=torch.rand(4, 10, 2) - 0.5,
        ...                 batch_size=[4, 10])
        >>> sorted(loss(td).keys())
        ['alpha', 'entropy', 'loss_alpha', 'loss_entropy', 'loss_log_likelihood']
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Entries read by :class:`OnlineDTLoss`."""

        action_target: NestedKey = ACTION
        action_pred: NestedKey = ACTION

    default_keys = _AcceptedKeys
    actor_network: ProbabilisticTensorDictSequential
    log_alpha: Tensor
    fixed_alpha: bool
    min_log_alpha: float | None
    max_log_alpha: float | None

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        *,
        alpha_init: float = 0.1,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        fixed_alpha: bool = False,
        target_entropy: str | float = "auto",
        action_spec: TensorSpec | None = None,
        samples_mc_entropy: int = 1,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                "OnlineDTLoss: actor_network must be a probabilistic actor with get_dist(), got "
                f"{type(actor_network).__name__}"
            )
        self.convert_to_functional(actor_network, "actor_network")
        sample_keys = list(getattr(actor_network, "dist_sample_keys", None) or [ACTION])
        self._tensor_keys.action_target = sample_keys[0]
        self._tensor_keys.action_pred = sample_keys[0]
        register_log_alpha(self, alpha_init, fixed_alpha, min_alpha, max_alpha)
        self.target_entropy = resolve_target_entropy(
            "OnlineDTLoss", target_entropy, action_spec, actor_network, sample_keys[0]
        )
        self.samples_mc_entropy = samples_mc_entropy
        self.reduction = check_reduction(reduction)
        self.out_keys = [
            "loss_log_likelihood",
            "loss_entropy",
            "loss_alpha",
            "entropy",
            "alpha",
        ]
        self._refresh_keys()

    @property
    def alpha(self) -> Tensor:
        """``exp(log_alpha)`` (clamped, detached)."""
        return clamped_alpha(self)

    def _compute_in_keys(self) -> list[NestedKey]:
        return [*self.actor_network.in_keys, self.tensor_keys.action_target]

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes the likelihood, entropy and temperature terms.

        Args:
            tensordict: sequences ``[*B, T]`` with the actor's inputs and the target actions.

        Returns:
            A TensorDict with ``loss_log_likelihood``, ``loss_entropy``, ``loss_alpha`` and
            the detached ``entropy`` and ``alpha``.
        """
        keys = self.tensor_keys
        self._check_inputs(tensordict)
        inputs = tensordict.select(*self.actor_network.in_keys, strict=False)
        dist = self.actor_network.get_dist(inputs)
        log_likelihood = action_log_prob(dist, tensordict, keys.action_target)
        entropy = dist_entropy(dist, self.samples_mc_entropy)
        alpha = self.alpha
        log_alpha = self.log_alpha
        if self.min_log_alpha is not None or self.max_log_alpha is not None:
            log_alpha = log_alpha.clamp(self.min_log_alpha, self.max_log_alpha)
        loss_alpha = (
            torch.zeros_like(entropy)
            if self.fixed_alpha
            else log_alpha.exp() * (entropy.detach() - self.target_entropy)
        )
        return TensorDict(
            {
                "loss_log_likelihood": reduce_loss(-log_likelihood, self.reduction),
                "loss_entropy": reduce_loss(-alpha * entropy, self.reduction),
                "loss_alpha": reduce_loss(loss_alpha, self.reduction),
                "entropy": entropy.detach().mean(),
                "alpha": alpha,
            },
            batch_size=[],
        )
