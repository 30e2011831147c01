"""DreamerV3's tensor functions: symlog, two-hot targets, unimix categoricals, balanced KL terms.

Reference: Hafner et al., "Mastering Diverse Domains through World Models" (2023),
https://arxiv.org/abs/2301.04104. These are plain functions on tensors; the modules in
:mod:`torchrl.modules.models.dreamer_v3` and the DreamerV3 losses use them.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch.nn import functional as F

from torchrl.modules.functional import symexp, symlog

__all__ = [
    "categorical_kl_terms",
    "straight_through_sample",
    "symexp",
    "symlog",
    "two_hot_cross_entropy",
    "two_hot_decode",
    "two_hot_encode",
    "unimix_probs",
]


def _check_bins(bins: torch.Tensor) -> None:
    if bins.ndim != 1 or bins.numel() < 2:
        raise ValueError(f"bins must be 1-d with at least 2 entries, got shape {tuple(bins.shape)}")


def two_hot_encode(x: torch.Tensor, bins: torch.Tensor) -> torch.Tensor:
    """Spreads each scalar over its two neighbouring bins so that the expected bin equals it.

    A value between ``bins[k]`` and ``bins[k + 1]`` puts weight ``(bins[k+1] - x) / (bins[k+1] -
    bins[k])`` on ``k`` and the rest on ``k + 1``; values outside ``[bins[0], bins[-1]]`` are
    clipped to the end bins.

    Args:
        x: values, shape ``[...]``.
        bins: ascending bin centres, shape ``[num_bins]``.

    Returns:
        Two-hot vectors ``[..., num_bins]`` in ``x``'s dtype; ``(out * bins).sum(-1)`` is ``x``
        (clipped to the bin range).

    Examples:
        >>> two_hot_encode(torch.tensor([0.25]), torch.tensor([-1.0, 0.0, 1.0]))
        tensor([[0.0000, 0.7500, 0.2500]])
    """
    _check_bins(bins)
    bins = bins.to(dtype=x.dtype, device=x.device)
    num_bins = bins.numel()
    clipped = x.clamp(bins[0], bins[-1])
    low = (torch.searchsorted(bins, clipped.detach().contiguous(), right=True) - 1).clamp(
        0, num_bins - 2
    )
    low_value = bins[low]
    high_value = bins[low + 1]
    weight_high = (clipped - low_value) / (high_value - low_value)
    out = torch.zeros(*x.shape, num_bins, dtype=x.dtype, device=x.device)
    out.scatter_(-1, low.unsqueeze(-1), (1 - weight_high).unsqueeze(-1))
    out.scatter_add_(-1, (low + 1).unsqueeze(-1), weight_high.unsqueeze(-1))
    return out


def two_hot_decode(logits: torch.Tensor, bins: torch.Tensor) -> torch.Tensor:
    """The expected bin under ``softmax(logits)``.

    Args:
        logits: ``[..., num_bins]`` logits.
        bins: bin centres, shape ``[num_bins]``.

    Returns:
        ``[...]`` expected values.

    Examples:
        >>> bins = torch.tensor([-1.0, 0.0, 1.0])
        >>> two_hot_decode(two_hot_encode(torch.tensor([0.25]), bins).log(), bins)
        tensor([0.2500])
    """
    _check_bins(bins)
    if logits.shape[-1] != bins.numel():
        raise ValueError(
            f"logits have {logits.shape[-1]} classes in their last dim, bins has {bins.numel()}"
        )
    probs = logits.softmax(-1)
    return (probs * bins.to(dtype=probs.dtype, device=probs.device)).sum(-1)


def two_hot_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, bins: torch.Tensor
) -> torch.Tensor:
    """Cross-entropy between ``softmax(logits)`` and the two-hot encoding of ``target``.

    Args:
        logits: ``[..., num_bins]`` logits.
        target: values ``[...]`` (or ``[..., 1]``) in the bins' space.
        bins: ascending bin centres, shape ``[num_bins]``.

    Returns:
        The unreduced loss ``-sum(two_hot(target) * log_softmax(logits), -1)``, shape ``[...]``.

    Examples:
        >>> two_hot_cross_entropy(torch.zeros(2, 3), torch.tensor([-0.5, 0.5]), torch.tensor([-1.0, 0.0, 1.0]))
        tensor([1.0986, 1.0986])
    """
    batch = logits.shape[:-1]
    if target.shape != batch:
        if target.shape[-1:] == (1,) and target.shape[:-1] == batch:
            target = target.squeeze(-1)
        else:
            raise ValueError(
                f"target shape {tuple(target.shape)} does not match logits {tuple(logits.shape)}: "
                f"expected {tuple(batch)} or {(*batch, 1)}"
            )
    encoded = two_hot_encode(target.detach().to(logits.dtype), bins)
    return -(encoded * logits.log_softmax(-1)).sum(-1)


def unimix_probs(logits: torch.Tensor, unimix: float) -> torch.Tensor:
    """Class probabilities mixed with a uniform distribution: ``(1 - u) softmax(l) + u / K``.

    The mixture keeps every probability at least ``unimix / num_classes``, which bounds the KL
    terms and the log-probabilities of categorical latents and actions (DreamerV3's "unimix").

    Args:
        logits: ``[..., num_classes]`` logits.
        unimix: the uniform fraction in ``[0, 1)``.

    Returns:
        ``[..., num_classes]`` probabilities.

    Examples:
        >>> round(unimix_probs(torch.tensor([100.0, 0.0, 0.0, 0.0]), 0.01).min().item(), 6)
        0.0025
    """
    if not 0.0 <= unimix < 1.0:
        raise ValueError(f"unimix must be in [0, 1), got {unimix}")
    probs = logits.softmax(-1)
    if unimix == 0.0:
        return probs
    return (1.0 - unimix) * probs + unimix / logits.shape[-1]


def straight_through_sample(
    logits: torch.Tensor, unimix: float = 0.0, *, sample: bool = True
) -> torch.Tensor:
    """A one-hot sample whose gradient is that of the class probabilities (straight-through).

    The forward value is exactly one-hot; the backward pass treats it as ``probs`` (Bengio et
    al., 2013), so losses on the sample train the logits.

    Args:
        logits: ``[..., num_classes]`` logits.
        unimix: uniform fraction mixed into the probabilities before sampling.
        sample: draw a class (``True``) or take the most likely one (``False``).

    Returns:
        ``[..., num_classes]`` one-hot tensor in ``logits``' dtype.

    Examples:
        >>> s = straight_through_sample(torch.zeros(5, 4, requires_grad=True))
        >>> bool((s.sum(-1) == 1).all()), s.requires_grad
        (True, True)
    """
    probs = unimix_probs(logits, unimix)
    if sample:
        index = torch.multinomial(probs.detach().reshape(-1, probs.shape[-1]), 1)
        index = index.reshape(probs.shape[:-1])
    else:
        index = probs.detach().argmax(-1)
    one_hot = F.one_hot(index, probs.shape[-1]).to(probs.dtype)
    # (probs - probs.detach()) is exactly 0 forward, so the value stays exactly one-hot
    return one_hot + (probs - probs.detach())


def _categorical_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    # KL(p || q) per categorical, from log-probabilities.
    log_p = p_logits.log_softmax(-1)
    log_q = q_logits.log_softmax(-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def categorical_kl_terms(
    posterior_logits: torch.Tensor,
    prior_logits: torch.Tensor,
    free_nats: float = 1.0,
    unimix: float = 0.01,
    *,
    reduction: Literal["mean", "none"] = "mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """DreamerV3's dynamics and representation KL terms with free bits.

    With ``post`` and ``prior`` the unimix-mixed categoricals, summed over the
    ``num_categoricals`` latents::

        dyn = max(free_nats, KL(sg(post) || prior))   # trains the prior
        rep = max(free_nats, KL(post || sg(prior)))   # trains the posterior (encoder)

    where ``sg`` stops gradients. Below ``free_nats`` a term is constant, so it gives no gradient.
    The loss weights (0.5 and 0.1 in the paper) are applied by the caller.

    Args:
        posterior_logits: ``[..., num_categoricals, num_classes]`` logits.
        prior_logits: logits of the same shape.
        free_nats: the free-bits threshold in nats. Defaults to 1.0.
        unimix: uniform fraction mixed into both distributions. Defaults to 0.01.
        reduction: ``"mean"`` over the batch dims (scalars) or ``"none"`` (shape ``[...]``).

    Returns:
        ``(dynamics_kl, representation_kl)``.

    Examples:
        >>> post = torch.randn(2, 4, 8, requires_grad=True)
        >>> prior = torch.randn(2, 4, 8, requires_grad=True)
        >>> dyn, rep = categorical_kl_terms(post, prior)
        >>> dyn.shape, bool(torch.allclose(dyn, rep))
        (torch.Size([]), True)
    """
    if posterior_logits.shape != prior_logits.shape:
        raise ValueError(
            f"posterior_logits {tuple(posterior_logits.shape)} and prior_logits "
            f"{tuple(prior_logits.shape)} must have the same shape"
        )
    if posterior_logits.ndim < 2:
        raise ValueError(
            "logits must be shaped [..., num_categoricals, num_classes], got "
            f"{tuple(posterior_logits.shape)}"
        )
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
    # log of the mixed probabilities: the KL of the mixtures, as logits.
    if unimix == 0.0:
        post, prior = posterior_logits, prior_logits
    else:
        post = unimix_probs(posterior_logits, unimix).log()
        prior = unimix_probs(prior_logits, unimix).log()
    dyn = _categorical_kl(post.detach(), prior).sum(-1).clamp_min(free_nats)
    rep = _categorical_kl(post, prior.detach()).sum(-1).clamp_min(free_nats)
    if reduction == "mean":
        return dyn.mean(), rep.mean()
    return dyn, rep
