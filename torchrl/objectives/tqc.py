"""Truncated Quantile Critics (Kuznetsov et al., 2020): SAC with distributional critics.

Each critic predicts ``M`` return quantiles. The Bellman target pools the ``n * M`` atoms of the
target critics at the next state, drops the ``n * k`` largest (``k`` =
``top_quantiles_to_drop_per_net``) to control overestimation, and every critic fits the
remaining atoms with the quantile Huber loss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, dispatch
from torch import Tensor

from torchrl._keys import NEXT
from torchrl._types import NestedKey
from torchrl.objectives._helpers import soft_actor_critic_terms, td_error_priority
from torchrl.objectives.common import ParamSet
from torchrl.objectives.sac import SACLoss
from torchrl.objectives.utils import ValueEstimators

if TYPE_CHECKING:
    from torchrl.data.specs import TensorSpec

__all__ = ["TQCLoss"]


def _quantile_huber_loss(atoms: Tensor, target: Tensor) -> Tensor:
    """Quantile Huber loss (threshold 1) of ``atoms`` ``[n, *B, M]`` against ``target`` ``[*B, K]``.

    Returns ``[*B, 1]``: the mean over critics, quantiles and target atoms.
    """
    n_quantiles = atoms.shape[-1]
    taus = (torch.arange(n_quantiles, device=atoms.device, dtype=atoms.dtype) + 0.5) / n_quantiles
    delta = target.unsqueeze(-2) - atoms.unsqueeze(-1)  # [n, *B, M, K]
    abs_delta = delta.abs()
    huber = torch.where(abs_delta <= 1.0, 0.5 * delta.pow(2), abs_delta - 0.5)
    # Over-estimated atoms (delta < 0) weigh 1 - tau, under-estimated ones tau.
    weight = (taus.unsqueeze(-1) - (delta.detach() < 0).to(atoms.dtype)).abs()
    return (weight * huber).mean((-2, -1)).mean(0).unsqueeze(-1)


class TQCLoss(SACLoss):
    """Truncated Quantile Critics: SAC with quantile critics and a truncated pooled target.

    Every critic writes ``M`` atoms at ``"state_action_value"`` (``[*B, M]``). With
    ``a~ ~ pi(.|s)``, ``a' ~ pi(.|s')`` and ``n`` critics:

    - ``Z' =`` the ``n * M - n * k`` smallest of the pooled target atoms ``Z_target_i(s', a')``
      (``k = top_quantiles_to_drop_per_net``);
    - ``y = r + gamma (1 - terminated) (Z' - alpha log pi(a'|s'))``, one target per kept atom;
    - ``loss_qvalue``: the quantile Huber loss of every critic's atoms ``Z_i(s, a)`` (quantile
      levels ``(2j + 1) / 2M``) against ``y``, averaged over critics, atoms and targets;
    - ``loss_actor = alpha * log pi(a~|s) - mean_{i, j} Z_ij(s, a~)`` (critics detached);
    - ``loss_alpha = -log_alpha * (log pi(a~|s) + target_entropy)``.

    Args:
        actor_network: a probabilistic actor with a reparameterisable distribution.
        qvalue_network: reads the observation and ``"action"``, writes ``M`` atoms at
            ``"state_action_value"``; copied into ``num_qvalue_nets`` critics.
        num_qvalue_nets: number of critics.
        top_quantiles_to_drop_per_net: atoms dropped per critic from the pooled target.
        alpha_init: initial entropy temperature.
        min_alpha: lower clamp of alpha.
        max_alpha: upper clamp of alpha.
        action_spec: the action spec (for ``target_entropy="auto"``).
        fixed_alpha: keep alpha constant.
        target_entropy: a number, or ``"auto"`` for ``-action_dim``.
        delay_qvalue: keep target critic parameters (updated by ``SoftUpdate``).
        priority_key: where to write the TD error.
        separate_losses: unused (the actor loss never updates the critics).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        deactivate_vmap: loop over the critics instead of vmapping.

    Examples:
        >>> from tensordict.nn import TensorDictModule, NormalParamExtractor
        >>> from torch import nn
        >>> from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
        >>> actor = ProbabilisticActor(TensorDictModule(nn.Sequential(nn.Linear(3, 2),
        ...     NormalParamExtractor()), ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"], distribution_class=TanhNormal)
        >>> qvalue = ValueOperator(MLP(in_features=4, out_features=10, depth=1),
        ...                        in_keys=["observation", "action"])  # 10 atoms
        >>> loss = TQCLoss(actor, qvalue, num_qvalue_nets=3, target_entropy=-1.0)
        >>> out = loss(observation=torch.randn(5, 3), action=torch.rand(5, 1),
        ...     next_observation=torch.randn(5, 3), next_reward=torch.randn(5, 1),
        ...     next_done=torch.zeros(5, 1, dtype=torch.bool),
        ...     next_terminated=torch.zeros(5, 1, dtype=torch.bool))
        >>> loss.out_keys, loss.num_target_atoms(10)  # 3 * 10 - 3 * 2
        (['loss_actor', 'loss_qvalue', 'loss_alpha', 'alpha', 'entropy'], 24)
    """

    default_value_estimator = ValueEstimators.TD0
    # The target is a set of atoms, not one value: only the one-step bootstrap applies.
    _supported_estimators = (ValueEstimators.TD0,)  # type: ignore[assignment]

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        *,
        num_qvalue_nets: int = 5,
        top_quantiles_to_drop_per_net: int = 2,
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: TensorSpec | None = None,
        fixed_alpha: bool = False,
        target_entropy: str | float = "auto",
        delay_qvalue: bool = True,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str = "mean",
        deactivate_vmap: bool = False,
    ) -> None:
        if int(top_quantiles_to_drop_per_net) != top_quantiles_to_drop_per_net or (
            top_quantiles_to_drop_per_net < 0
        ):
            raise ValueError(
                "TQCLoss: top_quantiles_to_drop_per_net must be a non-negative integer, got "
                f"{top_quantiles_to_drop_per_net!r}"
            )
        super().__init__(
            actor_network,
            qvalue_network,
            None,
            num_qvalue_nets=num_qvalue_nets,
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
        self.top_quantiles_to_drop_per_net = int(top_quantiles_to_drop_per_net)

    def num_target_atoms(self, n_quantiles: int) -> int:
        """How many pooled target atoms are kept for critics of ``n_quantiles`` atoms each.

        Args:
            n_quantiles: atoms per critic (``M``).

        Returns:
            ``num_qvalue_nets * (n_quantiles - top_quantiles_to_drop_per_net)``.
        """
        kept = self.num_qvalue_nets * (n_quantiles - self.top_quantiles_to_drop_per_net)
        if kept <= 0:
            raise ValueError(
                f"TQCLoss: top_quantiles_to_drop_per_net={self.top_quantiles_to_drop_per_net} "
                f"drops every target atom of critics with {n_quantiles} quantiles; it must be "
                "smaller than the number of quantiles"
            )
        return kept

    def _atoms(self, tensordict: TensorDictBase, param_set: ParamSet) -> Tensor:
        """``[n_critics, *B, M]`` atoms; checks that the critics keep the batch shape."""
        atoms = self._q(tensordict, param_set)
        if atoms.dim() < 2 or atoms.shape[1:-1] != tensordict.batch_size:
            raise ValueError(
                f"TQCLoss: the critic must write {self.tensor_keys.state_action_value!r} of shape "
                f"[*B, n_quantiles] with B = {list(tensordict.batch_size)}, got "
                f"{list(atoms.shape[1:])}"
            )
        return atoms

    def _target_atoms(self, tensordict: TensorDictBase, alpha: Tensor) -> Tensor:
        """The Bellman targets ``[*B, K]``: one per kept atom of the pooled target critics."""
        next_td = tensordict.get(NEXT)
        acted, next_log_prob = self._sample(next_td, ParamSet.ONLINE)
        next_atoms = self._atoms(acted, ParamSet.TARGET)  # [n, *B, M]
        kept = self.num_target_atoms(next_atoms.shape[-1])
        pooled = next_atoms.movedim(0, -2).flatten(-2)  # [*B, n * M]
        truncated = pooled.sort(-1).values[..., :kept]
        next_value = truncated - alpha * next_log_prob
        # The estimator computes r + gamma (1 - terminated) v for one value per sample; that is
        # affine in v, so two calls (v = 0 and v = 1) give its offset and slope for every atom,
        # honouring its gamma, reward standardisation and key names.
        zeros = torch.zeros_like(next_log_prob)
        offset = self.value_estimator.value_estimate(tensordict, next_value=zeros)
        slope = self.value_estimator.value_estimate(tensordict, next_value=zeros + 1) - offset
        return offset + slope * next_value

    @dispatch
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:  # type: ignore[override]
        """Computes the TQC loss terms.

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
        atoms_pi = self._atoms(acted, ParamSet.DETACHED)
        loss_actor = alpha * log_prob - atoms_pi.mean(-1, keepdim=True).mean(0)

        with torch.no_grad():
            target = self._target_atoms(tensordict, alpha)
        atoms = self._atoms(tensordict, ParamSet.ONLINE)
        loss_qvalue = _quantile_huber_loss(atoms, target)
        td_error = (atoms.detach().mean(-1, keepdim=True) - target.mean(-1, keepdim=True)).abs()
        tensordict.set(
            self.tensor_keys.priority,
            td_error_priority(td_error.max(0).values, tensordict.batch_size),
        )
        return soft_actor_critic_terms(self, loss_actor, loss_qvalue, log_prob, alpha)
