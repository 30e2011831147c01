"""Exact moments of squared-exponential basis expansions under a Gaussian input (PILCO's algebra).

Private to :mod:`torchrl.modules.gp_world_model` and :mod:`torchrl.modules.rbf_controller`, which
both evaluate functions of the form ``f_a(x) = sum_i w_{a,i} k_a(x, c_i)`` with an ARD
squared-exponential ``k_a`` at a Gaussian ``x ~ N(mu, S)``: the GP posterior mean (centres are the
training inputs, weights ``beta = K^-1 y``) and the RBF network (free centres and weights).
The formulas are the Gaussian integrals of Deisenroth & Rasmussen (2011), Sec. 2.2.
"""

from __future__ import annotations

import torch
from torch import Tensor


def se_kernel(x1: Tensor, x2: Tensor, lengthscales_sq: Tensor, amplitude_sq: Tensor) -> Tensor:
    """``k_a(x1_i, x2_j)`` for every output ``a``: ``[A, *batch, n1, n2]``.

    ``x1``: ``[*batch, n1, E]``; ``x2``: ``[*batch, n2, E]``; ``lengthscales_sq``: ``[A, E]``;
    ``amplitude_sq``: ``[A]``.
    """
    shape = (-1,) + (1,) * (x1.dim() - 2) + (1, 1, x1.shape[-1])
    inv = (1.0 / lengthscales_sq).reshape(shape)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)  # [*batch, n1, n2, E]
    sq = (diff.pow(2) * inv).sum(-1)
    return amplitude_sq.reshape((-1,) + (1,) * (sq.dim() - 1)) * torch.exp(-0.5 * sq)


def se_expansion_moments(
    centres: Tensor,
    weights: Tensor,
    lengthscales_sq: Tensor,
    amplitude_sq: Tensor,
    mean: Tensor,
    cov: Tensor,
    kernel_inverse: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Mean, covariance and input-output covariance of ``f(x)`` for ``x ~ N(mean, cov)``.

    Args:
        centres: ``[n, E]``, the points ``c_i``.
        weights: ``[A, n]``, the weights ``w_{a,i}``.
        lengthscales_sq: ``[A, E]``, squared ARD lengthscales (the diagonal of ``Lambda_a``).
        amplitude_sq: ``[A]``, signal variances ``alpha_a^2``.
        mean: ``[*B, E]``.
        cov: ``[*B, E, E]``.
        kernel_inverse: ``[A, n, n]``, ``(K_a + sigma_a^2 I)^-1`` for a GP: its expected posterior
            variance ``alpha_a^2 - tr(K_a^-1 Q_aa)`` is added to the diagonal of the covariance.

    Returns:
        ``(m, S, C)``: ``E[f]`` ``[*B, A]``, ``Cov[f]`` ``[*B, A, A]`` and ``Cov[x, f]``
        ``[*B, E, A]``.
    """
    num_out, dim = lengthscales_sq.shape
    inv_ls = 1.0 / lengthscales_sq  # [A, E]
    eye = torch.eye(dim, dtype=mean.dtype, device=mean.device)
    nu = centres - mean.unsqueeze(-2)  # [*B, n, E]
    cov_a = cov.unsqueeze(-3)  # [*B, 1, E, E]
    nu_a = nu.unsqueeze(-3)  # [*B, 1, n, E]

    # First moment: q_{a,i} = alpha^2 |S Lambda^-1 + I|^-1/2 exp(-1/2 nu^T (S + Lambda)^-1 nu).
    s_plus_l = cov_a + torch.diag_embed(lengthscales_sq)  # [*B, A, E, E]
    t = torch.linalg.solve(s_plus_l, nu_a.expand(*s_plus_l.shape[:-2], -1, -1).mT).mT
    _, logdet = torch.linalg.slogdet(cov_a * inv_ls.unsqueeze(-2) + eye)  # [*B, A]
    log_q = -0.5 * (nu_a * t).sum(-1) - 0.5 * logdet.unsqueeze(-1)  # [*B, A, n]
    wq = weights * amplitude_sq.unsqueeze(-1) * torch.exp(log_q)  # [*B, A, n]
    m = wq.sum(-1)
    # Cov[x, f_a] = S (S + Lambda_a)^-1 sum_i w_i q_i nu_i.
    v = (wq.unsqueeze(-1) * t).sum(-2)  # [*B, A, E]
    cross = cov @ v.mT  # [*B, E, A]

    # Second moment: Q_{ab,ij} = k_a(c_i, mu) k_b(c_j, mu) |R|^-1/2 exp(1/2 z^T R^-1 S z),
    # R = S (Lambda_a^-1 + Lambda_b^-1) + I, z = Lambda_a^-1 nu_i + Lambda_b^-1 nu_j.
    # With M = R^-1 S (symmetric), z^T M z splits into a term in i, one in j and 2 zeta_i M zeta_j,
    # so Q_ab = |R|^-1/2 diag(e_a) exp(zeta_a M zeta_b^T) diag(e_b): the only n x n work is one
    # matrix product and one exp per pair (a <= b; Q_ba = Q_ab^T). e_a <= alpha_a (the quadratic
    # term never exceeds the kernel's), so the split cannot overflow.
    zeta = nu_a * inv_ls.unsqueeze(-2)  # [*B, A, n, E]
    log_k = torch.log(amplitude_sq).unsqueeze(-1) - 0.5 * (nu_a * zeta).sum(-1)  # [*B, A, n]
    pa, pb = torch.triu_indices(num_out, num_out, device=mean.device)
    inv_sum = inv_ls[pa] + inv_ls[pb]  # [P, E]
    cov_p = cov.unsqueeze(-3)  # [*B, 1, E, E]
    r = cov_p * inv_sum.unsqueeze(-2) + eye  # [*B, P, E, E]
    m_ab = torch.linalg.solve(r, cov_p.expand_as(r))  # R^-1 S
    _, logdet_r = torch.linalg.slogdet(r)  # [*B, P]
    zeta_a, zeta_b = zeta[..., pa, :, :], zeta[..., pb, :, :]  # [*B, P, n, E]
    za_m = zeta_a @ m_ab
    log_e_a = log_k[..., pa, :] + 0.5 * (za_m * zeta_a).sum(-1)  # [*B, P, n]
    log_e_b = log_k[..., pb, :] + 0.5 * ((zeta_b @ m_ab) * zeta_b).sum(-1)
    scale = torch.exp(-0.5 * logdet_r)  # [*B, P]
    e_a, e_b = torch.exp(log_e_a), torch.exp(log_e_b)
    cross_p = za_m @ zeta_b.mT  # [*B, P, n, n]
    if bool(cross_p.detach().max() > 600.0):
        # Only far outside the data (an exponent of hundreds) could exp overflow; Q is ~0 there.
        cross_p = cross_p.clamp_max(600.0)
    expcross = torch.exp(cross_p)
    left = weights[pa] * e_a  # [*B, P, n]
    right = weights[pb] * e_b
    second_p = scale * (left.unsqueeze(-2) @ expcross @ right.unsqueeze(-1)).squeeze(-1).squeeze(-1)
    second = _symmetric_from_pairs(second_p, pa, pb, num_out)
    s = second - m.unsqueeze(-1) * m.unsqueeze(-2)
    if kernel_inverse is not None:
        # tr(K_a^-1 Q_aa) on the diagonal pairs (a == b).
        diag = (pa == pb).nonzero().squeeze(-1)
        e_d = e_a[..., diag, :]  # [*B, A, n]
        q_aa = expcross[..., diag, :, :] * e_d.unsqueeze(-1) * e_d.unsqueeze(-2)
        trace = scale[..., diag] * (kernel_inverse * q_aa).sum((-1, -2))  # [*B, A]
        s = s + torch.diag_embed(amplitude_sq - trace)
    s = 0.5 * (s + s.mT)
    return m, s, cross


def _symmetric_from_pairs(values: Tensor, pa: Tensor, pb: Tensor, size: int) -> Tensor:
    """``[*B, P]`` values of the pairs ``a <= b`` -> the symmetric ``[*B, size, size]`` matrix."""
    index = torch.empty(size, size, dtype=torch.long, device=values.device)
    index[pa, pb] = torch.arange(pa.numel(), device=values.device)
    index[pb, pa] = index[pa, pb]
    return values[..., index.reshape(-1)].reshape(*values.shape[:-1], size, size)
