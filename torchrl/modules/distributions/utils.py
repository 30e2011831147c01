"""Sampling, entropy and KL helpers shared by policies and losses.

``sample_and_log_prob`` / ``rsample_and_log_prob`` draw and score in one call when the
distribution can (the score then comes from the same latent draw, e.g. the pre-tanh value of a
:class:`~torchrl.modules.TanhNormal`, instead of inverting the sample). ``has_analytic_entropy``
and ``has_analytic_kl`` answer from the classes, so a loss can pick a closed form or a
Monte-Carlo estimate without a ``try``/``except`` on every call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import CompositeDistribution, composite_lp_aggregate
from torch import distributions as D

from torchrl.modules.distributions.continuous import TanhNormal

__all__ = [
    "composite_entropy",
    "has_analytic_entropy",
    "has_analytic_kl",
    "mc_entropy",
    "rsample_and_log_prob",
    "sample_and_log_prob",
]

# Classes that define ``entropy`` only to raise a clearer NotImplementedError.
_NO_CLOSED_FORM_ENTROPY: tuple[type, ...] = (TanhNormal,)


def sample_and_log_prob(
    distribution: D.Distribution,
    sample_shape: torch.Size | Sequence[int] = (),
    *,
    reparameterize: bool = False,
) -> tuple[Any, torch.Tensor | TensorDictBase]:
    """Draws a sample and returns it with the log-probability of that same draw.

    Uses the distribution's ``sample_and_log_prob`` (or ``rsample_and_log_prob`` with
    ``reparameterize=True``) when its class has one, else samples then calls ``log_prob``.
    Composite distributions are handled per component and follow
    :func:`tensordict.nn.composite_lp_aggregate`.

    Args:
        distribution: the distribution.
        sample_shape: leading sample dims ``S``.
        reparameterize: draw with ``rsample`` (gradients flow to the parameters).

    Returns:
        ``(sample [*S, *B, *E], log_prob [*S, *B])`` (a TensorDict sample, and TensorDict
        log-probabilities when not aggregated, for composite distributions).

    Examples:
        >>> dist = D.Normal(torch.zeros(3), torch.ones(3))
        >>> sample, lp = sample_and_log_prob(dist, (2,))
        >>> sample.shape, torch.allclose(lp, dist.log_prob(sample))
        (torch.Size([2, 3]), True)
    """
    shape = torch.Size(sample_shape)
    name = "rsample_and_log_prob" if reparameterize else "sample_and_log_prob"
    if callable(getattr(type(distribution), name, None)):
        return getattr(distribution, name)(shape)
    sample = distribution.rsample(shape) if reparameterize else distribution.sample(shape)
    return sample, distribution.log_prob(sample)


def rsample_and_log_prob(
    distribution: D.Distribution, sample_shape: torch.Size | Sequence[int] = ()
) -> tuple[Any, torch.Tensor | TensorDictBase]:
    """A reparameterised sample and its log-probability, scored from the same draw.

    Same as ``sample_and_log_prob(distribution, sample_shape, reparameterize=True)``.

    Args:
        distribution: a distribution with ``rsample``.
        sample_shape: leading sample dims.

    Returns:
        ``(sample, log_prob)``; the sample carries gradients.

    Examples:
        >>> loc = torch.zeros(2, requires_grad=True)
        >>> sample, lp = rsample_and_log_prob(D.Normal(loc, 1.0))
        >>> sample.requires_grad, lp.shape
        (True, torch.Size([2]))
    """
    return sample_and_log_prob(distribution, sample_shape, reparameterize=True)


def mc_entropy(distribution: D.Distribution, samples_mc: int = 1) -> torch.Tensor:
    """A Monte-Carlo entropy estimate, ``-mean(log p)`` over ``samples_mc`` reparameterised
    draws scored by :func:`rsample_and_log_prob` (a :class:`~torchrl.modules.TanhNormal`
    scores its draws without squashing them: :meth:`~torchrl.modules.TanhNormal.mc_entropy`).

    Args:
        distribution: a distribution with ``rsample``.
        samples_mc: the number of draws averaged.

    Returns:
        The estimate, ``[*B]``.

    Examples:
        >>> mc_entropy(TanhNormal(torch.zeros(3, 2), torch.ones(3, 2)), samples_mc=4).shape
        torch.Size([3])
    """
    if type(distribution) is TanhNormal:
        return distribution.mc_entropy(samples_mc)
    if samples_mc == 1:  # one draw of the batch shape: no sample dim to average away
        return -rsample_and_log_prob(distribution)[1]  # type: ignore[operator]
    _, log_prob = rsample_and_log_prob(distribution, (samples_mc,))
    return -log_prob.mean(0)  # type: ignore[union-attr]


def _base(dist: D.Distribution) -> D.Distribution:
    while isinstance(dist, D.Independent):
        dist = dist.base_dist
    return dist


def has_analytic_entropy(dist: D.Distribution) -> bool:
    """Whether ``dist.entropy()`` has a closed form (decided from the class, nothing computed).

    ``Independent`` is looked through to its base distribution; a composite distribution
    counts as not analytic (use :func:`composite_entropy`).

    Args:
        dist: the distribution.

    Returns:
        ``True`` when the class implements ``entropy``.

    Examples:
        >>> has_analytic_entropy(D.Independent(D.Normal(torch.zeros(2), 1.0), 1))
        True
        >>> has_analytic_entropy(D.TransformedDistribution(D.Normal(0.0, 1.0), []))
        False
    """
    if isinstance(dist, CompositeDistribution):
        return False
    cls = type(_base(dist))
    if issubclass(cls, _NO_CLOSED_FORM_ENTROPY):
        return False
    return cls.entropy is not D.Distribution.entropy


def _kl_registry() -> dict[tuple[type, type], Any] | None:
    # torch keeps its KL table private; when it moves, has_analytic_kl computes instead.
    registry = getattr(torch.distributions.kl, "_KL_REGISTRY", None)
    return registry if isinstance(registry, dict) else None


def has_analytic_kl(p: D.Distribution, q: D.Distribution) -> bool:
    """Whether ``torch.distributions.kl_divergence(p, q)`` has a registered closed form.

    ``Independent`` pairs (same reinterpreted dims) and transformed pairs (same transforms)
    are looked through to their bases, as torch's own rules for them need the bases' KL.

    Args:
        p: the first distribution.
        q: the second distribution.

    Returns:
        ``True`` when a closed form applies.

    Examples:
        >>> n = D.Normal(torch.zeros(2), 1.0)
        >>> has_analytic_kl(n, D.Normal(torch.ones(2), 2.0))
        True
        >>> has_analytic_kl(n, D.Independent(n, 1))
        False
    """
    while isinstance(p, D.Independent) and isinstance(q, D.Independent):
        if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
            return False
        p, q = p.base_dist, q.base_dist
    if isinstance(p, D.TransformedDistribution) or isinstance(q, D.TransformedDistribution):
        if not (
            isinstance(p, D.TransformedDistribution)
            and isinstance(q, D.TransformedDistribution)
            and p.transforms == q.transforms
            and p.event_shape == q.event_shape
        ):
            return False
        return has_analytic_kl(p.base_dist, q.base_dist)
    if isinstance(p, (D.Independent, CompositeDistribution)) or isinstance(
        q, (D.Independent, CompositeDistribution)
    ):
        return False
    registry = _kl_registry()
    if registry is None:
        try:
            D.kl_divergence(p, q)
        except NotImplementedError:
            return False
        return True
    tp, tq = type(p), type(q)
    return any(issubclass(tp, sp) and issubclass(tq, sq) for sp, sq in registry)


def _entropy_key(name: Any) -> tuple[str, ...]:
    key = name if isinstance(name, tuple) else (name,)
    return (*key[:-1], f"{key[-1]}_entropy")


def composite_entropy(
    distribution: CompositeDistribution, samples_mc: int = 1
) -> torch.Tensor | TensorDictBase:
    """Entropy of each component of a composite distribution, closed form where possible.

    A component without a closed form is estimated as ``-mean(log_prob)`` over ``samples_mc``
    draws scored by :func:`rsample_and_log_prob` (the same draw, never an inverted sample).

    Args:
        distribution: the composite distribution (batch shape ``B``).
        samples_mc: Monte-Carlo draws for the components without a closed form.

    Returns:
        With :func:`tensordict.nn.composite_lp_aggregate` set, one tensor ``[*B]`` (the sum
        over components and their event dims); else a TensorDict with one
        ``<name>_entropy`` entry per component.

    Examples:
        >>> from tensordict.nn import set_composite_lp_aggregate
        >>> params = TensorDict({"a": {"loc": torch.zeros(3, 2), "scale": torch.ones(3, 2)},
        ...     "b": {"logits": torch.zeros(3, 4)}}, [3])
        >>> dist = CompositeDistribution(params, {"a": D.Normal, "b": D.Categorical})
        >>> sorted(composite_entropy(dist).keys())
        ['a_entropy', 'b_entropy']
        >>> with set_composite_lp_aggregate(True):
        ...     composite_entropy(dist)
        tensor([4.2242, 4.2242, 4.2242])
    """
    if samples_mc < 1:
        raise ValueError(f"composite_entropy: samples_mc must be >= 1, got {samples_mc}")
    batch_shape = distribution.batch_shape
    entropies: dict[Any, torch.Tensor] = {}
    for name, dist in distribution.dists.items():
        if has_analytic_entropy(dist):
            entropies[name] = dist.entropy()
        else:
            entropies[name] = mc_entropy(dist, samples_mc)
    if composite_lp_aggregate():
        summed = [ent.reshape(*batch_shape, -1).sum(-1) for ent in entropies.values()]
        return torch.stack(summed).sum(0)
    out = TensorDict({}, batch_shape)
    for name, ent in entropies.items():
        out.set(_entropy_key(name), ent)
    return out
