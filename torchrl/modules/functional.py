"""Element-wise value rescalings: symlog/symexp (DreamerV3) and the signed hyperbolic pair (R2D2).

Each function maps a tensor to a tensor of the same shape, dtype and device. The pairs are
inverses of each other: ``symexp(symlog(x)) == x`` and ``signed_parabolic(signed_hyperbolic(x))
== x`` (up to floating-point error). The module forms are
:class:`~torchrl.modules.SymLogValueTransform` and
:class:`~torchrl.modules.SignedHyperbolicValueTransform`.
"""

from __future__ import annotations

import torch

__all__ = ["signed_hyperbolic", "signed_parabolic", "symexp", "symlog"]


def symlog(value: torch.Tensor) -> torch.Tensor:
    """The symmetric logarithm ``sign(x) * log(1 + |x|)``.

    Compresses large magnitudes of either sign and is close to the identity near 0 (its
    derivative there is 1).

    Args:
        value: any floating-point tensor.

    Returns:
        A tensor shaped like ``value``.

    Examples:
        >>> symlog(torch.tensor([-100.0, 0.0, 100.0]))
        tensor([-4.6151,  0.0000,  4.6151])
    """
    # sign() has a zero gradient at 0, where symlog's slope is 1: keep the input there.
    return torch.where(value == 0, value, value.sign() * value.abs().log1p())


def symexp(value: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`symlog`: ``sign(x) * (exp(|x|) - 1)``.

    Args:
        value: a tensor in symlog space.

    Returns:
        A tensor shaped like ``value``.

    Examples:
        >>> symexp(symlog(torch.tensor([-100.0, 0.0, 100.0])))
        tensor([-100.0000,    0.0000,  100.0000])
    """
    return torch.where(value == 0, value, value.sign() * value.abs().expm1())


def signed_hyperbolic(value: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """The value rescaling ``h(x) = sign(x) * (sqrt(|x| + 1) - 1) + eps * x`` of R2D2/MuZero.

    Square-root compression of large returns; the linear term ``eps * x`` keeps the inverse
    Lipschitz (Pohlen et al., 2018).

    Args:
        value: any floating-point tensor.
        eps: the weight of the linear term (``> 0`` for an invertible map).

    Returns:
        A tensor shaped like ``value``.

    Examples:
        >>> signed_hyperbolic(torch.tensor([-100.0, 0.0, 100.0]))
        tensor([-9.1499,  0.0000,  9.1499])
    """
    return value.sign() * ((value.abs() + 1).sqrt() - 1) + eps * value


def signed_parabolic(value: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """The inverse of :func:`signed_hyperbolic` (closed form of the quadratic it solves).

    ``h^-1(y) = sign(y) * (((sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps))^2 - 1)``.

    Args:
        value: a tensor in rescaled space.
        eps: the ``eps`` that :func:`signed_hyperbolic` was called with (``> 0``).

    Returns:
        A tensor shaped like ``value``.

    Examples:
        >>> signed_parabolic(signed_hyperbolic(torch.tensor([-100.0, 0.0, 100.0])))
        tensor([-100.0000,    0.0000,  100.0000])
    """
    if eps <= 0:
        raise ValueError(f"signed_parabolic needs eps > 0 (the map is invertible then), got {eps}")
    shifted = value.abs() + 1 + eps
    # (root - 1) / (2 eps) rewritten as 2 * shifted / (root + 1): no cancellation when eps is
    # small, so float32 round trips stay exact to a few ulps.
    half_root = 2 * shifted / ((1 + 4 * eps * shifted).sqrt() + 1)
    return torch.where(value == 0, value, value.sign() * (half_root.square() - 1))
