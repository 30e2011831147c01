"""``ExponentialQuadraticCost``: PILCO's saturating cost, in expectation over a Gaussian state.

Reference: Deisenroth & Rasmussen, "PILCO: A Model-Based and Data-Efficient Approach to Policy
Search" (ICML 2011), eq. (24)-(25).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor

from torchrl._keys import OBSERVATION
from torchrl._types import NestedKey
from torchrl.objectives.common import LossModule

__all__ = ["ExponentialQuadraticCost"]


class ExponentialQuadraticCost(LossModule):
    """Expected saturating cost ``E[1 - exp(-(x - t)^T W (x - t) / 2)]`` for ``x ~ N(m, S)``.

    A smooth, bounded stand-in for a 0-1 cost around the target ``t``, whose expectation under a
    Gaussian state has a closed form (so a planner propagating state means and covariances,
    as PILCO does with a GP model, can differentiate it):

        ``E[c] = 1 - det(I + S W)^(-1/2) * exp(-(m - t)^T W (I + S W)^(-1) (m - t) / 2)``.

    ``S`` is a full covariance ``[*B, D, D]`` or a diagonal variance ``[*B, D]``; ``S = 0``
    gives the cost at ``m``.

    Args:
        target: the target state ``t`` ``[D]``. Defaults to the origin.
        weights: the precision matrix ``W`` ``[D, D]`` (positive semi-definite). Defaults to the identity.
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` over the batch. Defaults to ``"mean"``.

    Examples:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({("observation", "mean"): torch.tensor([[0.0, 0.0], [3.0, 4.0]]),
        ...     ("observation", "var"): torch.zeros(2, 2)}, batch_size=[2])
        >>> ExponentialQuadraticCost(reduction="none")(td)["loss_cost"]
        tensor([0.0000, 1.0000])
    """

    @dataclasses.dataclass
    class _AcceptedKeys:
        """Keys read by the loss; rename with ``set_keys``.

        Attributes:
            loc: the state mean ``m`` ``[*B, D]``. Defaults to ``("observation", "mean")``.
            scale: the state (co)variance ``S``. Defaults to ``("observation", "var")``.
            loss_cost: the output entry. Defaults to ``"loss_cost"``.
        """

        loc: NestedKey = (OBSERVATION, "mean")
        scale: NestedKey = (OBSERVATION, "var")
        loss_cost: NestedKey = "loss_cost"

    default_keys = _AcceptedKeys
    out_keys = ["loss_cost"]
    target: Tensor | None
    weights: Tensor | None

    def __init__(
        self,
        target: Tensor | None = None,
        weights: Tensor | None = None,
        reduction: Literal["mean", "sum", "none"] = "mean",
    ) -> None:
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        if target is not None and target.ndim != 1:
            raise ValueError(f"target must be a [D] vector, got shape {tuple(target.shape)}")
        if weights is not None and (weights.ndim != 2 or weights.shape[0] != weights.shape[1]):
            raise ValueError(f"weights must be a [D, D] matrix, got shape {tuple(weights.shape)}")
        if target is not None and weights is not None and weights.shape[0] != target.shape[0]:
            raise ValueError(
                f"target has {target.shape[0]} dims but weights is {tuple(weights.shape)}"
            )
        self.reduction = reduction
        self.register_buffer("target", target)
        self.register_buffer("weights", weights)
        self.loss_mask_key = None
        self._refresh_keys()

    def _compute_in_keys(self) -> list[NestedKey]:
        return [self.tensor_keys.loc, self.tensor_keys.scale]

    def expected_cost(self, mean: Tensor, covariance: Tensor) -> Tensor:
        """The expected cost ``[*B]`` of ``N(mean [*B, D], covariance [*B, D, D] or [*B, D])``.

        Args:
            mean: the state means.
            covariance: full covariances, or diagonal variances shaped like ``mean``.

        Returns:
            ``[*B]`` expected costs in ``[0, 1]``.
        """
        dim = mean.shape[-1]
        if covariance.shape == mean.shape:
            covariance = torch.diag_embed(covariance)
        if covariance.shape != (*mean.shape, dim):
            raise ValueError(
                f"ExponentialQuadraticCost: the covariance has shape {tuple(covariance.shape)}; "
                f"expected {(*mean.shape, dim)} (full) or {tuple(mean.shape)} (diagonal) for a "
                f"mean of shape {tuple(mean.shape)}"
            )
        eye = torch.eye(dim, dtype=mean.dtype, device=mean.device)
        weights = eye if self.weights is None else self.weights.to(mean)
        target = torch.zeros_like(mean) if self.target is None else self.target.to(mean)
        if target.shape[-1] != dim:
            raise ValueError(f"the state has {dim} dims, the target {target.shape[-1]}")
        diff = (mean - target).unsqueeze(-1)  # [*B, D, 1]
        a = eye + covariance @ weights  # I + S W
        # W (I + S W)^-1 = (I + W S)^-1 W (push-through identity): one solve, no inverse of
        # W (which may be singular when only some state dims are penalised).
        solved = torch.linalg.solve(eye + weights @ covariance, weights @ diff)
        quad = (diff.transpose(-1, -2) @ solved).squeeze(-1).squeeze(-1)
        return 1.0 - torch.linalg.det(a).rsqrt() * torch.exp(-0.5 * quad)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``loss_cost`` from the state distribution in ``tensordict``.

        Args:
            tensordict: ``[*B]`` data with the state mean and (co)variance.

        Returns:
            A TensorDict with ``loss_cost`` (reduced as ``reduction`` says).
        """
        self._check_inputs(tensordict)
        keys = self.tensor_keys
        cost = self.expected_cost(tensordict.get(keys.loc), tensordict.get(keys.scale))
        if self.reduction == "mean":
            cost = cost.mean()
        elif self.reduction == "sum":
            cost = cost.sum()
        batch = [] if self.reduction != "none" else tensordict.batch_size
        return TensorDict({keys.loss_cost: cost}, batch_size=batch)
