"""An RBF-network policy with a sine-squashed output and moment matching (PILCO's controller)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from torchrl.modules._gaussian_moments import se_expansion_moments

__all__ = ["RBFController"]


class RBFController(nn.Module):
    """Radial-basis-function policy that maps a Gaussian state belief to a Gaussian action.

    ``pi(x)_a = sum_i w_{a,i} exp(-1/2 (x - c_i)^T Lambda_a^-1 (x - c_i))`` with ``n_basis``
    centres ``c_i`` shared by the outputs, and one diagonal lengthscale ``Lambda_a`` per output
    (shared by its basis functions); the action is ``max_action * sin(pi(x))``, so it always lies
    in ``[-max_action, max_action]``. ``forward(mean, covariance)`` returns the action's mean,
    covariance and ``Cov[x, u]`` for ``x ~ N(mean, covariance)``: the RBF layer's moments are
    exact, and the sine is applied to a Gaussian matched to them (:meth:`squash_sin`), as in
    Deisenroth & Rasmussen (2011). :meth:`act` is the deterministic policy ``u(x)``.

    Args:
        input_dim: ``D``, the size of the state.
        output_dim: ``F``, the size of the action.
        max_action: bound of the action (a float, or ``[F]``). ``None`` leaves ``pi(x)``
            unsquashed (and unbounded).
        n_basis: number of basis functions. Defaults to 10.

    Examples:
        >>> import torch
        >>> controller = RBFController(input_dim=3, output_dim=1, max_action=2.0, n_basis=5)
        >>> mean, cov = torch.zeros(4, 3), 0.1 * torch.eye(3).expand(4, 3, 3)
        >>> action_mean, action_cov, cross_cov = controller(mean, cov)
        >>> action_mean.shape, action_cov.shape, cross_cov.shape
        (torch.Size([4, 1]), torch.Size([4, 1, 1]), torch.Size([4, 3, 1]))
        >>> bool(controller.act(10 * torch.randn(100, 3)).abs().max() <= 2.0)
        True
    """

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        max_action: float | Tensor | None,
        n_basis: int = 10,
    ) -> None:
        super().__init__()
        if input_dim < 1 or output_dim < 1 or n_basis < 1:
            raise ValueError(
                "input_dim, output_dim and n_basis must be >= 1, got "
                f"{input_dim}, {output_dim} and {n_basis}"
            )
        self.input_dim, self.output_dim, self.n_basis = input_dim, output_dim, n_basis
        self.centres = nn.Parameter(torch.randn(n_basis, input_dim))
        self.weights = nn.Parameter(0.1 * torch.randn(output_dim, n_basis))
        self.log_lengthscales = nn.Parameter(torch.zeros(output_dim, input_dim))
        if max_action is None:
            self.max_action: Tensor | None = None
        else:
            bound = torch.as_tensor(max_action, dtype=torch.get_default_dtype())
            bound = bound.expand(output_dim).clone()
            if (bound <= 0).any():
                raise ValueError(f"max_action must be positive, got {max_action}")
            self.register_buffer("max_action", bound)

    def _lengthscales_sq(self, dtype: torch.dtype) -> Tensor:
        return torch.exp(2.0 * self.log_lengthscales).to(dtype)

    def unsquashed(self, observation: Tensor) -> Tensor:
        """The RBF layer's output ``pi(x)`` before the sine, ``[*B, F]``."""
        dtype = observation.dtype
        diff = observation.unsqueeze(-2) - self.centres.to(dtype)  # [*B, n, D]
        inv = 1.0 / self._lengthscales_sq(dtype)  # [F, D]
        sq = (diff.unsqueeze(-3).pow(2) * inv.unsqueeze(-2)).sum(-1)  # [*B, F, n]
        return (self.weights.to(dtype) * torch.exp(-0.5 * sq)).sum(-1)

    def act(self, observation: Tensor) -> Tensor:
        """The deterministic action ``max_action * sin(pi(x))`` at ``observation`` ``[*B, D]``."""
        pre = self.unsquashed(observation)
        if self.max_action is None:
            return pre
        return self.max_action.to(pre.dtype) * torch.sin(pre)

    def forward(
        self, mean: Tensor, covariance: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Mean, covariance and input-output covariance of the action for ``x ~ N(mean, cov)``.

        Args:
            mean: state mean ``[*B, D]``.
            covariance: state covariance ``[*B, D, D]``; ``None`` is a known state (zeros).

        Returns:
            ``(action_mean [*B, F], action_covariance [*B, F, F], cross_covariance [*B, D, F])``
            where ``cross_covariance = Cov[x, u]``.
        """
        if mean.shape[-1] != self.input_dim:
            raise ValueError(
                f"RBFController: mean must end with input_dim={self.input_dim}, "
                f"got {tuple(mean.shape)}"
            )
        if covariance is None:
            covariance = mean.new_zeros(*mean.shape, self.input_dim)
        dtype = mean.dtype
        ones = torch.ones(self.output_dim, dtype=dtype, device=mean.device)
        m, s, c = se_expansion_moments(
            self.centres.to(dtype),
            self.weights.to(dtype),
            self._lengthscales_sq(dtype),
            ones,
            mean,
            covariance,
        )
        if self.max_action is None:
            return m, s, c
        m_u, s_u, jac = self.squash_sin(m, s, self.max_action.to(dtype))
        return m_u, s_u, c @ jac

    @staticmethod
    def squash_sin(
        mean: Tensor, covariance: Tensor, max_action: Tensor | float = 1.0
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Moments of ``u = max_action * sin(p)`` for a Gaussian ``p ~ N(mean, covariance)``.

        Args:
            mean: ``[*B, F]``.
            covariance: ``[*B, F, F]``.
            max_action: bound, a float or ``[F]``.

        Returns:
            ``(u_mean [*B, F], u_cov [*B, F, F], J [*B, F, F])``, where ``J`` is diagonal and
            ``Cov[y, u] = Cov[y, p] J`` for any ``y`` jointly Gaussian with ``p``.

        Examples:
            >>> import torch
            >>> m, s = torch.zeros(1, 1), torch.full((1, 1, 1), 100.0)
            >>> u_mean, u_cov, _ = RBFController.squash_sin(m, s, 2.0)
            >>> round(float(u_cov), 3)  # a very wide p: u spreads like 2 sin(uniform)
            2.0
        """
        bound = torch.as_tensor(max_action, dtype=mean.dtype, device=mean.device)
        bound = bound.expand(mean.shape[-1])
        var = torch.diagonal(covariance, dim1=-2, dim2=-1)  # [*B, F]
        decay = torch.exp(-0.5 * var)
        u_mean = bound * decay * torch.sin(mean)
        v_sum = var.unsqueeze(-1) + var.unsqueeze(-2)
        diff = torch.exp(-0.5 * (v_sum - 2 * covariance)) * torch.cos(
            mean.unsqueeze(-1) - mean.unsqueeze(-2)
        )
        summ = torch.exp(-0.5 * (v_sum + 2 * covariance)) * torch.cos(
            mean.unsqueeze(-1) + mean.unsqueeze(-2)
        )
        second = 0.5 * (diff - summ)  # E[sin p_a sin p_b]
        outer = bound.unsqueeze(-1) * bound.unsqueeze(-2)
        u_cov = outer * second - u_mean.unsqueeze(-1) * u_mean.unsqueeze(-2)
        jac = torch.diag_embed(bound * decay * torch.cos(mean))
        return u_mean, 0.5 * (u_cov + u_cov.mT), jac
